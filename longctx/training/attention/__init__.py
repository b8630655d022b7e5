"""Attention under SP over packed rows: which tokens a query sees (the per-forward document layout, documents kept
apart, a shared prompt seen by both of its answers), isolation in the sdpa registry, the log-sum-exp kernels, the
GPU varlen path, and gpt-oss sinks and sliding windows."""
