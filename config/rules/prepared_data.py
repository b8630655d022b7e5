"""Recipe checks for the data-preparation keys, called once from config.recipe.check_recipe.

Whether packed rows stay isolated on the recipe's attention backend is config/rules/isolation.py's
call (also from check_recipe), not this module's.
"""

import math


def prepared_data_problems(recipe, sft, model, topo, source: str) -> list[str]:
    """Every reason a recipe's `prepare_data` setting cannot run, each naming the key and the fix."""
    if recipe.prepare_data is False:  # YAML reads a bare `off` as false: normalise it once, for every reader
        recipe.prepare_data = "off"
    if recipe.prepare_data == "off":
        if recipe.eval_holdout:
            return [
                (
                    f"{source}: `eval_holdout` holds documents out of the data `prepare_data` prepares; with "
                    "`prepare_data: off` use the dataset's own split (`dataset_test_split`) and drop `eval_holdout`"
                )
            ]
        return []
    problems = []
    if sft.eval_strategy != "no" and not recipe.eval_holdout:
        problems.append(
            f"{source}: `eval_strategy: {sft.eval_strategy}` with `prepare_data` needs held-out documents: "
            "set `eval_holdout` (a fraction like 0.05 or a count like 200), or `eval_strategy: no`"
        )
    if recipe.eval_holdout < 0 or (recipe.eval_holdout >= 1 and recipe.eval_holdout != int(recipe.eval_holdout)):
        problems.append(
            f"{source}: `eval_holdout` {recipe.eval_holdout} must be a fraction in (0, 1) or a whole number of "
            "documents (e.g. 200)"
        )
    if sft.packing or sft.padding_free:
        problems.append(f"{source}: `packing`/`padding_free` are TRL's packing; with `prepare_data` set both false")
    if not sft.max_length:
        problems.append(f"{source}: `prepare_data` needs `max_length`")
    if recipe.seq_alignment < 1:
        problems.append(f"{source}: `seq_alignment` must be >= 1, got {recipe.seq_alignment}")
    elif sft.max_length and sft.max_length % math.lcm(topo.sp_size, recipe.seq_alignment):
        m = math.lcm(topo.sp_size, recipe.seq_alignment)
        problems.append(
            f"{source}: `max_length` {sft.max_length} is not a multiple of lcm(sp={topo.sp_size}, "
            f"seq_alignment={recipe.seq_alignment}) = {m}; use {max(sft.max_length // m, 1) * m}"
        )
    if recipe.dataset_streaming:
        problems.append(
            f"{source}: `dataset_streaming` has no effect with `prepare_data` (data_prep streams); drop it"
        )
    return problems
