-- A value of the wrong type on line 2.
stack_limit = "lots"
