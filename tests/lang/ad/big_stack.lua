-- Reverse mode through a user-written loop keeps one frame per iteration in each
-- pass (the chain of backpropagators is the tape): a 10^6-step loop needs more
-- than the default 10^6 frames.
stack_limit = 4000000
