"""`python -m longctx fetch RECIPE`: stage a recipe's model, tokenizer and dataset into the Hugging Face cache on a
machine with network, so an offline node finds them (longctx/launch/staging.py). `--check` downloads nothing and
exits 1 naming what the cache lacks.
"""

import argparse
import os
import sys

from longctx.config.keys import recipe_with_overrides, split_argv
from longctx.config.paths import recipes_epilog, resolve_recipe, unknown_recipe_message
from longctx.config.topology import ConfigError
from longctx.launch.staging import fetch, missing, missing_message, needs


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m longctx fetch",
        description="Stage" + __doc__.split("\n\n")[0].split(": stage", 1)[1],
        epilog=recipes_epilog("python -m longctx fetch llama8b-256k --check"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("recipe", help="a recipe: short name (llama8b-256k), name under recipes/ or path")
    p.add_argument("--check", action="store_true", help="download nothing: list what the cache lacks (exit 1 if any)")
    return p


def main(argv: list[str], downloaders: dict | None = None, probes: dict | None = None) -> int:
    own, overrides = split_argv(argv)
    args = make_parser().parse_args(own)
    path = resolve_recipe(args.recipe)
    if not path.is_file():
        print(f"error: {unknown_recipe_message(args.recipe)}", file=sys.stderr)
        return 2
    try:
        items = needs(recipe_with_overrides(path, overrides))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not items:
        print(f"[fetch] {args.recipe} reads only local files: nothing to fetch")
        return 0
    if args.check or os.environ.get("HF_HUB_OFFLINE") == "1":
        gone = missing(items, probes)
        if gone:
            print(f"error: {missing_message(args.recipe, gone)}", file=sys.stderr)
            return 1
        print(f"[fetch] in the cache: {'; '.join(item.label() for item in items)}")
        return 0
    try:
        fetch(items, downloaders)
    except (OSError, ValueError) as exc:  # no network, a gated or misspelt repository
        first = str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else type(exc).__name__
        print(
            f"error: fetching for {args.recipe} failed: {first}; this needs network access to the Hub (and "
            "HF_TOKEN in the environment for a gated model)",
            file=sys.stderr,
        )
        return 1
    print(f"[fetch] staged {len(items)} item(s) for {args.recipe}; an offline node with this HF_HOME finds them")
    return 0
