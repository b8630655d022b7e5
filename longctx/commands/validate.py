"""Command line of preflight: validate a launch (default), `plan` it, or validate every shipped recipe.

    python -m longctx validate RECIPE [--accelerate-config P] [--num-gpus N] [--num-nodes M]
        [--gpu-memory-gb G] [--host-memory-gb R] [--json]
    python -m longctx plan RECIPE [same flags]
    python -m longctx validate --all [--intended]  every recipe under recipes/ (its own topology with --intended)
    python -m longctx validate RECIPE -- --max_length 65536   recipe overrides, as `make validate ARGS=..` passes them

Exit 0 when the launch is sound (warnings alone are fine), 1 when any error was found, 2 for unusable
arguments (an unknown flag, a recipe that does not exist).
"""

import sys

from longctx.config.keys import split_argv
from longctx.config.paths import RECIPES_DIR, recipe_names, resolve_recipe, unknown_recipe_message
from longctx.preflight.run import preflight_parser, print_report, run_preflight


def main(argv: list[str]) -> int:
    ours, overrides = split_argv(argv)
    plan = bool(ours) and ours[0] == "plan"
    args = preflight_parser("plan" if plan else "validate").parse_args(ours[1:] if plan else ours)  # 2: bad flag
    if args.all == bool(args.recipe):
        print("error: name one RECIPE, or pass --all", file=sys.stderr)
        return 2
    if args.recipe and not resolve_recipe(args.recipe).is_file():
        print(f"error: {unknown_recipe_message(args.recipe)}", file=sys.stderr)
        return 2
    recipes = [args.recipe] if args.recipe else [str(RECIPES_DIR / f"{n}.yaml") for n in recipe_names()]
    failed = 0
    for recipe in recipes:
        launch, problems, notes = run_preflight(recipe, overrides, args)
        failed += not print_report(launch, problems, notes, args, plan)["ok"]
    return 1 if failed else 0
