"""Prepare a long-context SFT dataset: tokenize, pack and pad to SP-safe lengths, with a report.

Usage:
    python -m data_prep --recipe recipes/tiny-llama/sft-2k-cpu-sp2.yaml [--input FILE...] [--force] [-- OVERRIDES]
    python -m data_prep --input data/*.jsonl --tokenizer recipes/assets/tiny-llama --max-length 4096 \
        --sp-size 4 [--format text|messages|prompt_completion] [--policy split|truncate|drop] \
        [--mode packed|unpacked] [--alignment 64] [--fixed-length] [--output data/prepared] [--force] [--quiet]

With `--recipe`, everything comes from the recipe and its accelerate YAML (sp_size is never typed twice);
the recipe's `prepare_data` key says packed or unpacked. `--input` (files, folders, globs or one Hub id),
`--hub`, `--hub-config` and `--split` then replace the recipe's data, as the overrides `--data_files`,
`--dataset_name`, `--dataset_config` and `--dataset_train_split` (data_prep/reading/user_inputs.py), and the command
that trains on it is printed. Errors are one line on stderr and exit 2.
Progress goes to stderr: a live bar on a terminal, one line every --progress-every seconds otherwise.
"""

import argparse
import os
import sys
import warnings

from data_prep.errors import PrepError
from longctx.config.keys import split_argv

# flags that only the flags-only form takes -> the recipe key to override instead, with a recipe
RECIPE_KEY_OF_FLAG = {
    "tokenizer": "model_name_or_path",
    "max_length": "max_length",
    "sp_size": "accelerate_config",
    "format": "dataset_format",
    "policy": "long_document_policy",
    "mode": "prepare_data",
    "alignment": "seq_alignment",
    "max_dropped_fraction": "max_dropped_fraction",
}
# store_true flags of the flags-only form -> the recipe key that says it
RECIPE_KEY_OF_SWITCH = {"preference": "trainer", "prefix_sharing": "prefix_sharing"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m data_prep", description=__doc__.split("\n")[0])
    p.add_argument("--recipe", help="recipe YAML (or name under recipes/) to read everything from")
    p.add_argument("--skip-if-off", action="store_true", help="exit 0 when the recipe has prepare_data: off")
    p.add_argument("--input", nargs="+", action="extend", help="files, folders or globs (repeatable), or one Hub id")
    p.add_argument("--hub", help="Hub dataset name (streamed)")
    p.add_argument("--hub-config")
    p.add_argument("--split", help="the split to read (default train; a recipe's `dataset_train_split`)")
    p.add_argument("--tokenizer", help="tokenizer name or folder (the model's)")
    p.add_argument("--max-length", type=int)
    p.add_argument("--sp-size", type=int)
    p.add_argument("--format", choices=["auto", "text", "messages", "prompt_completion"])
    p.add_argument("--policy", choices=["auto", "split", "truncate", "drop"])
    p.add_argument("--mode", choices=["packed", "unpacked"])
    p.add_argument("--alignment", type=int, help="pad lengths to a multiple of this too (e.g. 64)")
    p.add_argument("--fixed-length", action="store_true", help="pad every sequence to exactly max_length")
    p.add_argument("--preference", action="store_true", help="preference pairs (chosen/rejected), packed whole")
    p.add_argument("--prefix-sharing", action="store_true", help="with --preference: a pair's prompt once a row")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument(
        "--max-dropped-fraction", type=float, help="fail above this fraction of unusable rows (default 0.05)"
    )
    p.add_argument("--output", help="parent folder of prepared datasets (default data/prepared)")
    p.add_argument("--num-proc", type=int, help="tokenizer threads (default: a recipe's dataset_num_proc, else all)")
    p.add_argument("--shard-tokens", type=int, default=8_000_000, help="token slots per Arrow file (bounds memory)")
    p.add_argument("--quiet", action="store_true", help="no progress output (the summary is still printed)")
    p.add_argument("--progress-every", type=float, default=30.0, help="seconds between progress lines off a terminal")
    p.add_argument("--force", action="store_true", help="rebuild even when the cache has this dataset")
    return p


def prepare_recipe(args, overrides: list[str], progress) -> bool:
    """Prepare the recipe's data (data_prep/recipe_data.py); False when its `prepare_data` is off."""
    from data_prep.reading.user_inputs import inputs_as_overrides, train_line
    from data_prep.recipe_data import prepare_for_recipe
    from longctx.config.paths import resolve_recipe
    from longctx.config.recipe import RecipeError, parse_recipe, recipe_topology

    given = [f for f in RECIPE_KEY_OF_FLAG if getattr(args, f) is not None]
    given += [f for f in RECIPE_KEY_OF_SWITCH if getattr(args, f)]
    if given:
        keys = ", ".join(f"--{f.replace('_', '-')}: `{(RECIPE_KEY_OF_FLAG | RECIPE_KEY_OF_SWITCH)[f]}`" for f in given)
        raise PrepError(f"with a recipe, set these as recipe keys (after `--`, or in the recipe): {keys}")
    own_data = inputs_as_overrides(args)
    overrides = [*overrides, *own_data]
    try:
        recipe, sft, model = parse_recipe(["--config", str(resolve_recipe(args.recipe)), *overrides])
    except RecipeError as exc:
        raise PrepError(" ".join(str(exc).split())) from None
    if recipe.prepare_data == "off":
        return False
    threads = args.num_proc or getattr(sft, "dataset_num_proc", None) or len(os.sched_getaffinity(0))
    extra = {"num_proc": threads, "shard_tokens": args.shard_tokens}
    if args.output:
        extra["output_dir"] = args.output
    topo = recipe_topology(recipe)
    prepare_for_recipe(recipe, sft, model, topo, args.recipe, force=args.force, progress=progress, **extra)
    if own_data:
        print(f"[data] train on it: {train_line(args.recipe, overrides)}")
    return True


def config_from_flags(args):
    from data_prep.config import PrepConfig

    if not args.tokenizer or not args.max_length:
        raise PrepError("--tokenizer and --max-length are required without --recipe")
    return PrepConfig(
        tokenizer=args.tokenizer,
        max_length=args.max_length,
        sp_size=args.sp_size or 1,
        inputs=tuple(args.input or ()),
        hub=args.hub,
        hub_config=args.hub_config,
        split=args.split or "train",
        format=args.format or "auto",
        policy=args.policy or "auto",
        mode=args.mode or "packed",
        alignment=args.alignment or 1,
        fixed_length=args.fixed_length,
        objective="dpo" if args.preference else "sft",
        prefix_sharing=args.prefix_sharing,
        seed=args.seed,
        output_dir=args.output or "data/prepared",
        num_proc=args.num_proc or len(os.sched_getaffinity(0)),
        shard_tokens=args.shard_tokens,
        max_dropped_fraction=0.05 if args.max_dropped_fraction is None else args.max_dropped_fraction,
    )


def main(argv: list[str]) -> int:
    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' deprecations, not actionable here
    own, overrides = split_argv(argv)
    args = build_parser().parse_args(own)
    try:
        from data_prep.output.progress import Progress

        progress = Progress(quiet=args.quiet, interval=args.progress_every)
        if args.recipe:
            if not prepare_recipe(args, overrides, progress) and not args.skip_if_off:
                raise PrepError(f"{args.recipe}: `prepare_data` is off; set `prepare_data: packed` (or `unpacked`)")
        else:
            from data_prep.config import check
            from data_prep.pipeline import prepare_dataset

            prepare_dataset(check(config_from_flags(args)), force=args.force, progress=progress)
    except PrepError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
