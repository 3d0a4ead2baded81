-- A small frame limit: a loop that is not a proper tail call overflows within a few
-- thousand iterations, so the tail-call scripts stay fast (also under GC stress).
stack_limit = 2000
