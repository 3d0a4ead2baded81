-- A small dlam frame limit.
stack_limit = 1000
