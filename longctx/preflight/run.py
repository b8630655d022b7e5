"""Preflight of one launch: load the recipe with its topology, resolve the machine, run every check, print the
problems (and the plan) or one JSON object. `python -m longctx validate` and `plan` (longctx/commands/validate.py)
and every launch (longctx/launch/prepare.py) run it."""

import argparse
import json
import os

from longctx.config.problems import error
from longctx.preflight.checks import run_checks
from longctx.preflight.load import Launch, Machine, load_launch
from longctx.preflight.machine import resolve_machine


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def hardware_profile(text: str) -> str:
    """A profile name or a fitted profile's JSON path, checked here so a bad one is a usage error (exit 2)."""
    from longctx.training.metrics.hardware import profile

    try:
        profile(text)
    except (ValueError, OSError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


EXAMPLES = {
    "validate": "python -m longctx validate llama8b-256k --num-gpus 8 --gpu-memory-gb 80",
    "plan": "python -m longctx plan llama8b-256k --gpu-memory-gb 80",
}
DESCRIPTIONS = {
    "validate": "Every problem of a launch (recipe, accelerate YAML, DeepSpeed JSON, model, machine), before any GPU "
    "work. Exit 0: sound (warnings alone are fine); 1: an error; 2: unusable arguments.",
    "plan": "The mesh, tokens per rank and step, and the memory plan per rank and per node (no GPU needed), after "
    "the same checks as validate.",
}


def preflight_parser(command: str = "validate") -> argparse.ArgumentParser:
    from longctx.config.paths import recipes_epilog

    parser = argparse.ArgumentParser(
        prog=f"python -m longctx {command}",
        description=DESCRIPTIONS[command],
        epilog=recipes_epilog(EXAMPLES[command]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("recipe", nargs="?", help="a recipe name under recipes/ or a path")
    parser.add_argument("--accelerate-config", help="check against this accelerate YAML instead of the recipe's")
    parser.add_argument("--num-gpus", type=positive, help="GPUs per machine (default: the visible ones)")
    parser.add_argument("--num-nodes", type=positive, help="machines (default 1)")
    parser.add_argument("--gpu-memory-gb", type=positive_float, help="memory of one GPU in GB (e.g. 80)")
    parser.add_argument(
        "--host-memory-gb",
        type=positive_float,
        help="RAM of one node (RAM is sized in binary units: 128 means 128 GiB; default: read with --this-machine)",
    )
    parser.add_argument(
        "--hardware",
        type=hardware_profile,
        help="the step-time plan's hardware profile: h100-sxm, h200, or a JSON `python -m longctx.memory_plan.fit` "
        "wrote (default: h200 for --gpu-memory-gb 141, else h100-sxm)",
    )
    parser.add_argument(
        "--doc-length", type=positive, help="the step-time plan's documents, in tokens (default: one a row)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object per recipe")
    parser.add_argument("--all", action="store_true", help="every recipe under recipes/")
    parser.add_argument("--intended", action="store_true", help="GPUs per machine from each accelerate YAML")
    parser.add_argument("--this-machine", action="store_true", help="the launch runs here (used by `make sft`)")
    # `longctx eval`: the run reads prepared rows only, so the recipe's dataset need not be staged
    parser.add_argument("--no-dataset", action="store_true", help=argparse.SUPPRESS)
    return parser


def run_preflight(recipe: str, overrides: list[str], args) -> tuple[Launch, list, list[str]]:
    """Load, resolve the machine and run every check: (launch, problems, notes)."""
    if args.accelerate_config:
        overrides = [*overrides, "--accelerate_config", args.accelerate_config]
    launch = load_launch(recipe, overrides, Machine())
    notes = resolve_machine(launch, args)
    try:
        return launch, run_checks(launch), notes
    except Exception as exc:  # a value of an unexpected type: report it, never a traceback
        if os.environ.get("PREFLIGHT_DEBUG"):
            raise
        msg = f"could not be checked: {type(exc).__name__}: {exc}"
        fix = "check the types of the recipe's values (PREFLIGHT_DEBUG=1 shows the traceback)"
        return launch, [*launch.problems, error(launch.source, "(recipe)", msg, fix)], notes


def safely(build, launch, fallback):
    """The plan of a launch whose values have unexpected types is unavailable, not a traceback."""
    try:
        return build(launch)
    except Exception:  # the checks have already reported the value
        if os.environ.get("PREFLIGHT_DEBUG"):
            raise
        return fallback


def print_report(launch, problems, notes, args, plan: bool) -> dict:
    from longctx.preflight.plan import plan_dict, plan_lines

    errors = [p for p in problems if p.severity == "error"]
    summary = {
        "recipe": launch.source,
        "ok": not errors,
        "errors": len(errors),
        "warnings": len(problems) - len(errors),
        "problems": [p.as_dict() for p in problems],
        "notes": notes,
        "machine": vars(launch.machine),
    }
    if args.json:
        summary["plan"] = (
            safely(plan_dict, launch, None) if launch.sft is not None and launch.topo is not None else None
        )
        if summary["plan"]:
            summary["plan"].pop("timed")  # the objects behind `step_time`
        print(json.dumps(summary))
        return summary
    for problem in problems:
        print(problem.line())
    for note in notes:
        print(f"note: {note}")
    if plan:
        print("\n".join(safely(plan_lines, launch, ["plan: unavailable (see the errors)"])))
    verdict = "ok" if not errors else "FAILED"
    print(f"preflight {verdict}: {launch.source}: {summary['errors']} error(s), {summary['warnings']} warning(s)")
    return summary
