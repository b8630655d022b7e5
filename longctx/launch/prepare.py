"""Before a launch: preflight in this process, then the recipe's prepared data.

The data step is data_prep's own command (`python -m data_prep --recipe R --skip-if-off`), run as a child:
data_prep is a top-level tool that imports this package's bottom layer, so this package never imports it. On a
cache hit the child only reads the manifest's key; a miss tokenizes and packs before any launch.
"""

import subprocess

from longctx.config.paths import display_path
from longctx.config.recipe import RecipeError
from longctx.launch.accelerate_launch import python_exec


def data_prep_argv(recipe: str, flags: list[str], overrides: list[str]) -> list[str]:
    """`python -m data_prep --recipe R [flags] -- overrides`: what `python -m longctx data R` runs."""
    return [python_exec(), "-m", "data_prep", "--recipe", recipe, *flags, "--", *overrides]


def preflight_here(recipe: str, overrides: list[str], num_nodes: int | None = None, reads_dataset: bool = True):
    """The preflight checks for a launch on this machine (and `num_nodes` like it); the resolved `Launch`, or
    None after printing the errors. `reads_dataset=False`: the run never reads `dataset_name` (eval)."""
    from longctx.preflight.run import preflight_parser, print_report, run_preflight

    flags = [*(["--num-nodes", str(num_nodes)] if num_nodes else []), *([] if reads_dataset else ["--no-dataset"])]
    args = preflight_parser().parse_args([recipe, "--this-machine", *flags])
    launch, problems, notes = run_preflight(recipe, overrides, args)
    return launch if print_report(launch, problems, notes, args, plan=False)["ok"] else None


def prepare_data(launch, recipe: str, overrides: list[str]) -> None:
    """`make data` for the recipe (a cache hit when nothing changed); RecipeError when it fails."""
    if launch.recipe.prepare_data == "off":
        return
    cmd = data_prep_argv(recipe, ["--skip-if-off"], overrides)
    if subprocess.run(cmd, check=False).returncode != 0:  # from the recipe's root, as the launch
        raise RecipeError(launch.source, ["data preparation failed (its error is printed above)"])


def prepare_launch(recipe: str, overrides: list[str], num_nodes: int | None = None) -> str | None:
    """Check and prepare; the accelerate YAML to launch with, or None when preflight found an error."""
    launch = preflight_here(recipe, overrides, num_nodes)
    if launch is None:
        return None
    prepare_data(launch, recipe, overrides)
    return display_path(launch.topo.path)
