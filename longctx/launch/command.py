"""What `make sft` runs: preflight, the prepared data, then `accelerate launch recipes/sft.py` with the recipe's YAML.

Usage:
    python -m longctx.launch RECIPE [--dry-run] [-- OVERRIDES...]
    python -m longctx.launch tiny-llama/sft-2k-cpu-sp2 -- --max_steps 10

`--dry-run` prints the launch line only (no checks, no data, no launch).

RECIPE is a name under recipes/ or a path. The accelerate YAML comes from the recipe's one
`accelerate_config` key (or an `--accelerate_config` override), so recipe and topology are never typed
twice. The launch line is printed before it runs, so it can be copied to a cluster script.
"""

import os
import shlex
import sys
from pathlib import Path

from longctx.config.keys import split_argv
from longctx.config.paths import REPO_ROOT, display_path, resolve_recipe, unknown_recipe_message
from longctx.config.recipe import RecipeError, exit_on_recipe_error
from longctx.config.topology import ConfigError, load_yaml_mapping
from longctx.training.credentials import redact_argv


def accelerate_config_of(recipe_path: Path, overrides: list[str]) -> str:
    """The recipe's accelerate YAML, honouring a command-line `--accelerate_config X` override."""
    for i, arg in enumerate(overrides):
        if arg == "--accelerate_config" and i + 1 < len(overrides):
            return overrides[i + 1]
        if arg.startswith("--accelerate_config="):
            return arg.split("=", 1)[1]
    try:
        value = load_yaml_mapping(recipe_path).get("accelerate_config")
    except ConfigError as exc:
        raise RecipeError(str(recipe_path), [str(exc)]) from None
    if not value:
        raise RecipeError(str(recipe_path), ["`accelerate_config` is not set: name the accelerate YAML it runs with"])
    return value


def launch_command(recipe: str, overrides: list[str]) -> list[str]:
    """The exact `accelerate launch` argv for a recipe; no `--cpu`/`--use_deepspeed`, which drop the YAML's SP keys."""
    recipe_path = resolve_recipe(recipe)
    if not recipe_path.is_file():
        raise RecipeError(recipe, [unknown_recipe_message(recipe)])
    accel = accelerate_config_of(recipe_path, overrides)
    shown_path = os.path.relpath(recipe_path.resolve(), REPO_ROOT)
    if shown_path.startswith(".."):
        shown_path = str(recipe_path.resolve())
    return [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        accel,
        "recipes/sft.py",
        "--config",
        shown_path,
        *overrides,
    ]


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    own, overrides = split_argv(argv)
    dry_run = "--dry-run" in own
    own = [a for a in own if a != "--dry-run"]
    try:
        cmd = launch_command(own[0], own[1:] + overrides)
        if not dry_run:
            from longctx.launch.prepare import run

            accel = run(own[0], own[1:] + overrides)  # preflight and data, from one parse of the recipe
            if accel is None:
                return 1
            cmd[cmd.index("--config_file") + 1] = display_path(accel)
    except RecipeError as exc:
        exit_on_recipe_error(exc)
    shown = ["accelerate", "launch"] + cmd[3:]
    print("[launch]", shlex.join(redact_argv(shown)), flush=True)
    if dry_run:
        return 0
    # ALST: long sequences allocate blocks of many sizes; expandable segments stop the fragmentation that
    # otherwise runs out of memory with GiBs free. A value the user exported wins.
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    os.chdir(REPO_ROOT)  # config paths in recipes and accelerate YAMLs are relative to the repository root
    os.execv(cmd[0], cmd)
