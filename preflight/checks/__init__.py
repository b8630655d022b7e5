"""The preflight checks: each module's `check(launch)` returns its problems; `run_checks` runs them all.

Every check reads the resolved `Launch` and returns a list, so one broken input never hides another
check's findings. A check that lacks what it needs (the model config, the GPU count) returns nothing, and
the loader or the machine check has already said why.
"""

from preflight.checks import (
    attention,
    deepspeed,
    files,
    heads,
    memory_fit,
    positions,
    resume,
    sequence,
    trl_limits,
    world,
)
from preflight.problems import Problem

CHECKS = (files, heads, world, sequence, attention, positions, deepspeed, trl_limits, resume, memory_fit)


def run_checks(launch) -> list[Problem]:
    """Loading problems first, then every check's, in a stable order."""
    problems = list(launch.problems)
    if launch.sft is None:  # the recipe did not parse: only file-level findings are meaningful
        return problems
    for module in CHECKS:
        problems += module.check(launch)
    return problems
