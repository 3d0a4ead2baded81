-- At most 10000 dlam frames.
stack_limit = 10000
