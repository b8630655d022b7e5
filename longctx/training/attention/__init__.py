"""Attention under SP with packed documents: the per-forward document layout, isolation in the sdpa registry,
the log-sum-exp kernels, the GPU varlen path, and gpt-oss sinks and sliding windows."""
