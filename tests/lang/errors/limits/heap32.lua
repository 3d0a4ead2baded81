-- A 32 MB heap: enough for the prelude and small programs, not for unbounded allocation.
heap_limit_mb = 32
