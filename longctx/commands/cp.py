"""`python -m longctx cp RECIPE DEST [--force]`: copy a recipe and the files it names into another repository.

DEST is that repository's root: the recipe, its accelerate YAML, DeepSpeed JSON, local model, data and chat
template, and its trainer's entrypoint (recipes/sft.py, dpo.py or grpo.py) land at the same relative paths, so
the copy runs there with `accelerate launch` (the longctx package installed) or `longctx sft|dpo|grpo DEST/...`
from any folder. The work is longctx/catalog/copy.py.
"""

import argparse
import shlex
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    from longctx.catalog.copy import CopyError, copy_recipe
    from longctx.config.keys import split_argv
    from longctx.config.paths import recipes_epilog, resolve_recipe

    parser = argparse.ArgumentParser(
        prog="python -m longctx cp",
        description=__doc__.split("\n\n")[1],
        epilog=recipes_epilog("python -m longctx cp tiny-2k ../team-repo"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("recipe", help="the recipe to copy")
    parser.add_argument("dest", help="the root of the repository to copy into (created if missing)")
    parser.add_argument("--force", action="store_true", help="overwrite files that differ")
    own, overrides = split_argv(argv)
    args = parser.parse_args(own)
    if overrides:
        parser.error("cp takes no recipe overrides: edit the copy")
    recipe, dest = resolve_recipe(args.recipe), Path(args.dest).resolve()
    try:
        copied, notes = copy_recipe(recipe, dest, args.force)
    except CopyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"[cp] into {dest}:")
    print("\n".join(f"  {rel}" for rel in copied))
    for note in notes:
        print(f"[cp] left as named: {note}")
    print("\n".join(run_lines(dest, copied[0])))
    return 0


def run_lines(dest: Path, recipe: str) -> list[str]:
    """How to run the copy there: the CLI from any folder, or accelerate by hand from its root."""
    import yaml

    from longctx.config.paths import ENTRYPOINTS, cli_command, venv_command

    values = yaml.safe_load((dest / recipe).read_text()) or {}
    trainer = values.get("trainer") or "sft"  # the subcommand and entrypoint of the recipe's trainer
    accel = values.get("accelerate_config")
    target = shlex.quote(str(dest / recipe))
    accelerate = venv_command("accelerate", "accelerate.commands.accelerate_cli")
    return [
        f"[cp] run it from any folder: {cli_command()} {trainer} {target}",
        f"[cp] or by hand from {dest} (after `{cli_command()} data {target}` when it prepares data):",
        f"     {accelerate} launch --config_file {accel} {ENTRYPOINTS[trainer]} --config {recipe}",
    ]
