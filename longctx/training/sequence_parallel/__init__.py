"""Ulysses SP plumbing: the mesh a process really runs on, the token-weighted SP loss and its ZeRO divisor, eval
under SP, the sp x dp data order, and the gloo fixes that let all of it run on CPU."""
