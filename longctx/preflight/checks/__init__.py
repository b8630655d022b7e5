"""The preflight checks: each module's `check(launch)` returns its problems; `run_checks` runs them all.

Every check reads the resolved `Launch` and returns a list, so one broken input never hides another
check's findings. A check that lacks what it needs (the model config, the GPU count) returns nothing, and
the loader or the machine check has already said why.
"""

from longctx.config.problems import Problem
from longctx.config.rules import recipe_problems
from longctx.preflight.checks import (
    attention,
    deepspeed,
    disk,
    files,
    heads,
    host_fit,
    memory_fit,
    output_dir,
    positions,
    services,
    staged,
    toolchain,
    trl_limits,
    world,
)

CHECKS = (
    files,
    heads,
    world,
    attention,
    positions,
    deepspeed,
    toolchain,
    trl_limits,
    memory_fit,
    host_fit,
    disk,
    staged,
    services,
    output_dir,
)


def run_checks(launch) -> list[Problem]:
    """Loading problems first, then the recipe rules the entrypoint enforces, then every machine-level check."""
    problems = list(launch.problems)
    if launch.sft is None:  # the recipe did not parse: only file-level findings are meaningful
        return problems
    if launch.topo is not None:  # longctx/config/rules/: exactly what recipes/sft.py refuses
        problems += recipe_problems(launch.recipe, launch.sft, launch.model, launch.topo, launch.source)
    for module in CHECKS:
        problems += module.check(launch)
    return problems
