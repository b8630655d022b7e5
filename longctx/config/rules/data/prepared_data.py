"""Recipe rules for the data-preparation keys (`prepare_data`, `seq_alignment`, ...).

Whether packed rows stay isolated on the recipe's attention backend is longctx/config/rules/attention/isolation.py's
call.
"""

import math

from longctx.config.problems import Problem, error
from longctx.config.rules.sequence import uneven_shards


def prepared_data_problems(recipe, args, model, topo, source: str) -> list[Problem]:
    """Every reason a recipe's `prepare_data` setting cannot run, each naming the key and the fix."""
    bad_holdout = recipe.eval_holdout < 0 or (
        recipe.eval_holdout >= 1 and recipe.eval_holdout != int(recipe.eval_holdout)
    )
    if recipe.prepare_data == "off":
        if recipe.eval_holdout:
            msg = "holds documents out of the data `prepare_data` prepares, but `prepare_data` is off"
            fix = "drop `eval_holdout` and use the dataset's own split (`dataset_test_split`)"
            return [error(source, "eval_holdout", msg, fix)]
        return []
    problems = []
    if args.eval_strategy != "no" and not recipe.eval_holdout:
        strategy = getattr(args.eval_strategy, "value", args.eval_strategy)
        msg = f"is `{strategy}`, but with `prepare_data` the eval rows are held-out documents and none are held out"
        fix = "set `eval_holdout` (a fraction like 0.05 or a count like 200), or `eval_strategy: no`"
        problems.append(error(source, "eval_strategy", msg, fix))
    if bad_holdout:
        msg = f"{recipe.eval_holdout} must be a fraction in (0, 1) or a whole number of documents"
        problems.append(error(source, "eval_holdout", msg, "use e.g. 0.05 or 200 (0 holds nothing out)"))
    if getattr(recipe, "trainer", "sft") == "grpo":  # prompt rows, untokenized: no layout (rules/trainers/grpo.py)
        return problems
    if getattr(args, "packing", False) or getattr(args, "padding_free", False):  # GRPOConfig has neither
        msg = "are TRL's packing; with `prepare_data` data_prep packs"
        problems.append(error(source, "packing", msg, "set `packing: false` and `padding_free: false`"))
    if not args.max_length:
        problems.append(error(source, "max_length", "is unset; `prepare_data` needs it", "set `max_length`"))
    if recipe.seq_alignment < 1:
        problems.append(error(source, "seq_alignment", f"must be >= 1, got {recipe.seq_alignment}", "use 1 or 64"))
    elif args.max_length and args.max_length % topo.sp_size == 0:  # not a multiple of sp: rules/sequence.py says so
        m, align = math.lcm(topo.sp_size, recipe.seq_alignment), recipe.seq_alignment
        uneven = uneven_shards(args.max_length, m, f"lcm(sp={topo.sp_size}, seq_alignment={align}) = {m}")
        problems += [error(source, "max_length", *uneven)] if uneven else []
    if recipe.dataset_streaming:
        msg = "has no effect with `prepare_data` (data_prep streams)"
        problems.append(error(source, "dataset_streaming", msg, "drop it"))
    return problems


def row_balance_problems(recipe, args, model, topo, source: str) -> list[Problem]:
    """`balance_rows: work` where it cannot run: a streamed dataset (no rows to order), or a trainer other than SFT
    (DPO: not proven with it, its pairs keep the sampler's order; GRPO: its rows are prompts, sampled in groups)."""
    window, setting = getattr(recipe, "balance_window", 1), getattr(recipe, "balance_rows", "auto")
    trainer = getattr(recipe, "trainer", "sft")
    if window < 1:
        return [error(source, "balance_window", f"is {window}; it counts optimizer steps", "use 1 or more")]
    if window > 1 and (setting == "off" or (setting == "auto" and trainer != "sft")):
        msg = f"is {window}, but `balance_rows` is off" + (
            f" (`auto` for `trainer: {trainer}`)" if setting == "auto" else ""
        )
        return [error(source, "balance_window", msg + ", so no row moves", "drop `balance_window`")]
    if setting != "work":
        return []
    if trainer != "sft":
        msg = f"is `work`, which the {trainer.upper()} trainer does not run (proven for `trainer: sft` only)"
        return [error(source, "balance_rows", msg, f"remove it (`auto` is `off` for {trainer.upper()})")]
    if recipe.dataset_streaming:
        msg = "is `work`, but a streamed dataset has no rows to order ahead"
        return [error(source, "balance_rows", msg, "drop `dataset_streaming`, or set `balance_rows: off`")]
    return []
