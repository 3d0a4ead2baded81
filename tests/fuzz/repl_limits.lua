-- Small limits for the REPL test (repl_pty_test.cpp): the errors come fast.
heap_limit_mb = 32
stack_limit = 10000
instruction_limit = 50000000
