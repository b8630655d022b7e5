"""Checkpoints and resume: SP-safe resume on exactly the data an uninterrupted run sees, the topology each
checkpoint records, and universal-checkpoint conversion for resuming on another mesh."""
