"""Measurement: metrics and FLOPs, step records, the GPU benchmarks and their outcome rows."""
