"""SP loss-parity gates: sp>1 computes what sp=1 computes (SFT, DPO, GRPO, model families, meshes, pairs)."""
