"""`make sft` before the launch: preflight in this process, then the recipe's prepared data.

The data step is data_prep's own command (`python -m data_prep --recipe R --skip-if-off`), run as a child:
data_prep is the tool above this package's bottom layer, so this package never imports it. On a cache hit the
child only reads the manifest's key; a miss tokenizes and packs before any launch.
"""

import subprocess
import sys

from longctx.config.paths import REPO_ROOT
from longctx.config.recipe import RecipeError


def preflight_here(recipe: str, overrides: list[str]):
    """The preflight checks for a launch on this machine; the resolved `Launch`, or None after printing errors."""
    from longctx.preflight.cli import check_launch, make_parser, report

    args = make_parser().parse_args([recipe, "--this-machine"])
    launch, problems, notes = check_launch(recipe, overrides, args)
    return launch if report(launch, problems, notes, args, plan=False)["ok"] else None


def prepare_data(launch, recipe: str, overrides: list[str]) -> None:
    """`make data` for the recipe (a cache hit when nothing changed); RecipeError when it fails."""
    if launch.recipe.prepare_data == "off":
        return
    cmd = [sys.executable, "-m", "data_prep", "--recipe", recipe, "--skip-if-off", "--", *overrides]
    if subprocess.run(cmd, cwd=REPO_ROOT, check=False).returncode != 0:
        raise RecipeError(launch.source, ["data preparation failed (its error is printed above)"])


def run(recipe: str, overrides: list[str]) -> str | None:
    """Check and prepare; the accelerate YAML to launch with, or None when preflight found an error."""
    launch = preflight_here(recipe, overrides)
    if launch is None:
        return None
    prepare_data(launch, recipe, overrides)
    return launch.topo.path
