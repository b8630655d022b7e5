"""Prepare a parsed recipe's data and record its manifest: what `make data` and `make sft` both do."""

import json

from data_prep.config import check, from_recipe, source_fingerprint
from data_prep.eval_split import eval_config
from data_prep.pipeline import prepare_splits
from longctx.config.paths import display_path, resolve_recipe
from longctx.config.prepared_manifest import REPORT, prep_settings, write_manifest


def prepare_for_recipe(recipe, args, model, topo, name: str, force: bool = False, progress=None, **extra):
    """Build (or find in the cache) the recipe's prepared dataset; write the manifest training ranks read.

    `extra` are data_prep's own knobs (num_proc, shard_tokens, output_dir); an `output_dir` other than the
    recipe's `prepared_data_dir` writes no manifest, since the recipe's ranks would not look there.
    """
    cfg = check(from_recipe(recipe, args, model, topo, **extra))
    # eval_folder: the held-out side, when the recipe sets `eval_holdout`
    folder, eval_folder = prepare_splits(cfg, force=force, progress=progress)
    sides = [(folder, cfg, "train")] + ([(eval_folder, eval_config(cfg), "eval")] if eval_folder else [])
    for where, side, role in sides if "output_dir" not in extra else []:
        key = json.loads((where / REPORT).read_text())["cache_key"]
        source = source_fingerprint(side) if side.inputs else []
        settings = prep_settings(recipe, args, model, topo, role)
        write_manifest(settings, where, key, source, display_path(resolve_recipe(name)))
    report_balance(folder, recipe, args, model, topo)
    return folder


def report_balance(folder, recipe, args, model, topo) -> None:
    """The data report's work balance at the recipe's mesh (data_prep/output/balance_report.py), printed after it. Not
    for
    GRPO: its rows are untokenized prompts (data_prep/trainers/prompts.py), whose work is known only after
    generation."""
    if getattr(recipe, "trainer", "sft") == "grpo":
        return
    from data_prep.output.balance_report import balance_line, work_balance
    from longctx.training.data.balance import resolved

    line = balance_line(work_balance(folder, recipe, args, model, topo), resolved(recipe))
    if line:
        print(line)
