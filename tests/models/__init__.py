"""Model families: the registry, model building and fixes, MoE rules, rope, per-family shapes, the tiny models."""
