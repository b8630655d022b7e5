"""The per-GPU memory model of a launch and its calibration against published runs."""
