"""The exit statuses a training run ends with, one table for the ranks (recipes/sft.py), the launcher
(longctx/launch/supervise.py) and the job scripts (scripts/slurm/sft.sbatch): a scheduler must tell a preempted
run, which the same command resumes, from a failed one, which a person has to look at.
"""

FINISHED = 0
FAILED = 1  # a rank died or raised: the launcher names the rank (longctx/launch/supervise.py)
RECIPE_ERROR = 2  # the recipe cannot run as written (longctx/config/recipe.py `exit_on_recipe_error`)
NONFINITE = 3  # a NaN or Inf loss or gradient norm stopped the run (longctx/training/faults/run_guard.py)
SAVE_FAILED = 74  # sysexits' EX_IOERR: a checkpoint could not be written (space, permission)
PREEMPTED = 75  # sysexits' EX_TEMPFAIL: stopped by a signal at a step boundary; run the same command again

MEANING = {
    FINISHED: "finished",
    FAILED: "failed",
    RECIPE_ERROR: "recipe error",
    NONFINITE: "stopped on a non-finite loss or gradient norm",
    SAVE_FAILED: "a checkpoint could not be saved",
    PREEMPTED: "preempted: run the same command again to resume",
}
