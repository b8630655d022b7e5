"""`python -m longctx data RECIPE [--input FILE...] [flags] [-- overrides]` (`make data`): prepare a recipe's data.

Tokenizes, packs and pads the recipe's dataset, or the files given with `--input` (files, folders, globs or one
Hub id; .jsonl, .json, .parquet, .arrow), into the rows the recipe trains on, with report.json beside them
(docs/data-preparation.md). The work is data_prep's (`python -m data_prep --recipe RECIPE`), a tool above this
package, so it runs as its own process; with `--input` it prints the command that trains on the result.
"""

import argparse
import os
import sys

from longctx.config.keys import split_argv
from longctx.config.paths import recipes_epilog

EXAMPLE = "python -m longctx data tiny-2k --input my_chats.jsonl -- --messages_field dialogue"


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m longctx data",
        description=__doc__.split("\n\n")[1],
        epilog=recipes_epilog(EXAMPLE),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("recipe", help="the recipe whose tokenizer, lengths, mesh and data keys apply")
    p.add_argument("--input", nargs="+", action="extend", help="your data instead of the recipe's: files, "
                   "folders, globs (.jsonl .json .parquet .arrow) or one Hub dataset id")  # fmt: skip
    p.add_argument("--hub-config", help="the Hub dataset's config (the recipe's `dataset_config`)")
    p.add_argument("--split", help="the split to read (the recipe's `dataset_train_split`)")
    p.add_argument("--force", action="store_true", help="rebuild even when the cache has this dataset")
    p.add_argument("--output", help="parent folder of prepared datasets (no manifest: for inspection only)")
    p.add_argument("--num-proc", type=int, help="tokenizer threads (default: `dataset_num_proc`, else all cores)")
    p.add_argument("--quiet", action="store_true", help="no progress output (the summary is still printed)")
    p.add_argument("--skip-if-off", action="store_true", help="exit 0 when the recipe has `prepare_data: off`")
    return p


def main(argv: list[str]) -> int:
    from longctx.launch.prepare import data_prep_argv

    own, overrides = split_argv(argv)
    args = make_parser().parse_args(own)
    flags = [f for name, on in (("--force", args.force), ("--quiet", args.quiet)) if on for f in [name]]
    flags += ["--skip-if-off"] if args.skip_if_off else []
    for flag, value in (("--hub-config", args.hub_config), ("--split", args.split), ("--output", args.output)):
        flags += [flag, value] if value is not None else []
    flags += ["--num-proc", str(args.num_proc)] if args.num_proc else []
    flags += [item for path in args.input or [] for item in ("--input", path)]
    cmd = data_prep_argv(args.recipe, flags, overrides)
    sys.stdout.flush()
    os.execv(cmd[0], cmd)
