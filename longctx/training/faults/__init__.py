"""What a run does when the cluster or the numbers go wrong: a preemption signal on any rank stops every rank at
the next optimizer-step boundary with a complete checkpoint (signals.py, run_guard.py), and a NaN or Inf loss or
gradient norm stops the run at that step, or skips its update when the recipe asks (run_guard.py). The ranks agree
on both through one small all-reduce per step. Checkpoint atomicity lives with the checkpoints
(longctx/training/checkpoints/commit.py); what each fault does and the test that shows it: docs/reliability.md."""
