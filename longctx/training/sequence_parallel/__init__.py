"""Sequence parallelism: the mesh a process really runs on, the token-weighted SP loss and its ZeRO divisor, eval
under SP, the sp x dp data order, the gloo fixes that let all of it run on CPU, and the hybrid Ulysses x ring
attention beyond the head count (`hybrid.py`, with the ring's exact log-sum-exp merged attention over packed
documents in `ring.py`, its GPU kernel in `ring_gpu.py`)."""
