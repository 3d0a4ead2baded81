-- An unknown key on line 2.
bogus_key = 1
