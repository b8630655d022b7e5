"""Sequence parallelism beyond DeepSpeed's Ulysses wrapper: the hybrid Ulysses x ring attention (`hybrid.py`, with
the ring's exact log-sum-exp merged attention over packed documents in `ring.py`), and the room the lead is moving
the other SP modules into (gloo collectives, the mesh, the SP loss, eval and data order)."""
