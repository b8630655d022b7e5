"""The preflight checks: each module's `check(launch)` returns its problems; `run_checks` runs them all.

Every check reads the resolved `Launch` and returns a list, so one broken input never hides another
check's findings. A check that lacks what it needs (the model config, the GPU count) returns nothing, and
the loader or the machine check has already said why.
"""

import re

from config.problems import Problem, error
from preflight.checks import (
    attention,
    chat_template,
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

CHECKS = (
    files, heads, world, sequence, attention, chat_template, positions, deepspeed, trl_limits, resume, memory_fit,
)  # fmt: skip


def run_checks(launch) -> list[Problem]:
    """Loading problems first, then every check's, in a stable order."""
    problems = list(launch.problems)
    if launch.sft is None:  # the recipe did not parse: only file-level findings are meaningful
        return problems
    for module in CHECKS:
        problems += module.check(launch)
    return problems + entrypoint_problems(launch, problems)


def entrypoint_problems(launch, found: list[Problem]) -> list[Problem]:
    """The entrypoint's own `check_recipe` findings that no check above already reported for the same key.

    `recipes/sft.py` refuses what `check_recipe` returns, so preflight must never pass a recipe it refuses;
    checks added there by other modules show up here without being duplicated in preflight.
    """
    from config.recipe import check_recipe

    messages = check_recipe(launch.recipe, launch.sft, launch.model, launch.source)
    covered = {p.key.split(".")[-1] for p in found}
    extra = []
    for message in messages:
        keys = re.findall(r"`([\w.]+)`", message)
        key = keys[0] if keys else "recipe"
        if key not in covered and key.split(".")[-1] not in covered:
            text = message.removeprefix(f"{launch.source}: ")
            extra.append(error(launch.source, key, text, "as the message says (recipes/sft.py refuses it)"))
    return extra
