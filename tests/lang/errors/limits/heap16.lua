-- A 16 MB heap: enough for the prelude, not for an unbounded list.
heap_limit_mb = 16
