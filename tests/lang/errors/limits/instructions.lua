-- Stop after a million instructions.
instruction_limit = 1000000
