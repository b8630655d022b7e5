"""`make sft` in one process: preflight, then the recipe's prepared data, then the launch, from one parse.

The recipe is parsed once here (preflight's loader, the entrypoint's own parser); the data step reads the
same parsed dataclasses and records the manifest the training ranks read, and the launch line is built
from the accelerate YAML that preflight resolved. Only the training ranks, new processes, parse again,
from the same argv.
"""

from config.recipe import RecipeError


def preflight_here(recipe: str, overrides: list[str]):
    """The preflight checks for a launch on this machine; the resolved `Launch`, or None after printing errors."""
    from preflight.cli import check_launch, make_parser, report

    args = make_parser().parse_args([recipe, "--this-machine"])
    launch, problems, notes = check_launch(recipe, overrides, args)
    return launch if report(launch, problems, notes, args, plan=False)["ok"] else None


def prepare_data(launch, recipe: str) -> None:
    """`make data` for the parsed recipe (a cache hit when nothing changed); raises PrepError."""
    from data_prep.recipe_data import prepare_for_recipe

    if launch.recipe.prepare_data != "off":
        prepare_for_recipe(launch.recipe, launch.sft, launch.model, launch.topo, recipe)


def run(recipe: str, overrides: list[str]) -> str | None:
    """Check and prepare; the accelerate YAML to launch with, or None when preflight found an error."""
    from data_prep.errors import PrepError

    launch = preflight_here(recipe, overrides)
    if launch is None:
        return None
    try:
        prepare_data(launch, recipe)
    except PrepError as exc:
        raise RecipeError(launch.source, [f"data preparation: {exc}"]) from None
    return launch.topo.path
