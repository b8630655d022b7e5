"""The run's output folder: one that holds a run's checkpoints is resumed or refused, never trained over.

The rule is longctx/config/rules/resume.py's (the run checks it again before loading anything); here it runs before
a training launch on this machine only (`--this-machine`, as `make sft` runs it): `longctx eval` (preflight without
the dataset) reads a finished run's folder on purpose.
"""

from longctx.config.problems import Problem
from longctx.config.rules.resume import existing_checkpoint_problems


def check(launch) -> list[Problem]:
    if not launch.machine.this_machine or not launch.machine.reads_dataset or launch.sft is None:
        return []
    return existing_checkpoint_problems(launch.sft, launch.source)
