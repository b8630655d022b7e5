"""Recipe rules for the data-preparation keys (`prepare_data`, `seq_alignment`, ...).

Whether packed rows stay isolated on the recipe's attention backend is config/rules/isolation.py's call.
"""

import math

from config.problems import Problem, error


def prepared_data_problems(recipe, sft, model, topo, source: str) -> list[Problem]:
    """Every reason a recipe's `prepare_data` setting cannot run, each naming the key and the fix."""
    if recipe.prepare_data == "off":
        return []
    problems = []
    if sft.eval_strategy != "no":
        msg = "is set, but `prepare_data` prepares the train split only"
        problems.append(error(source, "eval_strategy", msg, "set `eval_strategy: no` (or `prepare_data: off`)"))
    if sft.packing or sft.padding_free:
        msg = "are TRL's packing; with `prepare_data` data_prep packs"
        problems.append(error(source, "packing", msg, "set `packing: false` and `padding_free: false`"))
    if not sft.max_length:
        problems.append(error(source, "max_length", "is unset; `prepare_data` needs it", "set `max_length`"))
    if recipe.seq_alignment < 1:
        problems.append(error(source, "seq_alignment", f"must be >= 1, got {recipe.seq_alignment}", "use 1 or 64"))
    elif sft.max_length and sft.max_length % math.lcm(topo.sp_size, recipe.seq_alignment):
        m = math.lcm(topo.sp_size, recipe.seq_alignment)
        align = recipe.seq_alignment
        msg = f"{sft.max_length} is not a multiple of lcm(sp={topo.sp_size}, seq_alignment={align}) = {m}"
        problems.append(error(source, "max_length", msg, f"use {max(sft.max_length // m, 1) * m}"))
    if recipe.dataset_streaming:
        msg = "has no effect with `prepare_data` (data_prep streams)"
        problems.append(error(source, "dataset_streaming", msg, "drop it"))
    return problems
