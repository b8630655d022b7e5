"""Checkpoints: resume, universal conversion, export, topology records, a preempted reference pass."""
