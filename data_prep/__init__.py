"""Data preparation for long-context SFT under sequence parallelism."""
