"""The retrieval eval's options: its flags, the default grid of lengths and depths, and the check that the
recipe's mesh can split every length. Read by the command (longctx/commands/eval.py) and by every rank's worker."""

import argparse
import math
import os

from longctx.training.retrieval.tasks import TASKS

DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
MIN_LENGTH = 256  # the longest task (four-value needles plus question) needs ~230 tiny-tokenizer tokens


def build_parser() -> argparse.ArgumentParser:
    from longctx.config.paths import recipes_epilog

    p = argparse.ArgumentParser(
        prog="python -m longctx eval",
        description="Long-context retrieval eval (passkey, multi-key) of a model on the recipe's mesh, after "
        "preflight: a table, results.json and heatmap.png under --out.",
        epilog=recipes_epilog("python -m longctx eval tiny-2k --checkpoint outputs/tiny-llama/sft-2k-cpu-sp2"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("recipe", help="a recipe name under recipes/ (tiny-llama/sft-2k-cpu-sp2) or a path")
    p.add_argument("--checkpoint", help="model folder to score (default: the recipe's starting model)")
    p.add_argument("--out", help="output folder (default outputs/eval/<recipe>[-<checkpoint name>])")
    p.add_argument("--lengths", type=int, nargs="+", help="context lengths (default: max_length/8 .. max_length)")
    p.add_argument("--depths", type=float, nargs="+", default=list(DEPTHS), help="needle depths in [0, 1]")
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    p.add_argument("--samples", type=int, default=4, help="examples per (task, length, depth) cell")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic examples")
    p.add_argument("--compare", metavar="BASE_DIR", help="--out folder of another run to show side by side")
    p.add_argument("--dry-run", action="store_true", help="preflight at the intended topology; print, run nothing")
    return p


def parse_args(argv: list[str]):
    """(args, recipe overrides); fills the recipe's path, default lengths and output folder."""
    from longctx.config.paths import resolve_recipe

    own, overrides = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    args = build_parser().parse_args(own)
    args.recipe_path = str(resolve_recipe(args.recipe))
    if args.out is None:
        name = args.recipe.removesuffix(".yaml").replace("/", "_")
        tail = f"-{os.path.basename(os.path.normpath(args.checkpoint))}" if args.checkpoint else "-start"
        args.out = os.path.abspath(os.path.join("outputs", "eval", f"{name}{tail}"))  # under the recipe's root
    bad = [d for d in args.depths if not 0 <= d <= 1]
    if bad or args.samples < 1:
        build_parser().error(f"depths must lie in [0, 1] (got {bad}) and --samples must be >= 1")
    return args, overrides


def default_lengths(max_length: int, multiple: int) -> list[int]:
    """max_length/8, /4, /2 and max_length itself, each a multiple of lcm(sp, seq_alignment), >= MIN_LENGTH."""
    out = []
    for div in (8, 4, 2, 1):
        n = max_length // div // multiple * multiple
        if n >= MIN_LENGTH and n not in out:
            out.append(n)
    return out or [max_length]


def resolve_grid(args, overrides: list[str]):
    """The parsed recipe, its topology and the lengths to run (refusing any that the mesh cannot split)."""
    from longctx.config.recipe import RecipeError, parse_recipe, recipe_topology

    recipe, sft, _ = parse_recipe(["--config", args.recipe_path, *overrides])
    topo = recipe_topology(recipe)
    multiple = math.lcm(topo.sp_size, recipe.seq_alignment)
    args.lengths = args.lengths or default_lengths(sft.max_length or 4096, multiple)
    bad = [n for n in args.lengths if n % multiple or (sft.max_length and n > sft.max_length)]
    if bad:
        raise RecipeError(
            recipe.config_source,
            [
                (
                    f"--lengths {bad}: every length must be a multiple of lcm(sp={topo.sp_size}, seq_alignment="
                    f"{recipe.seq_alignment}) = {multiple} and at most max_length {sft.max_length}"
                )
            ],
        )
    return recipe, topo


def worker_argv(args) -> list[str]:
    argv = [args.recipe, "--out", args.out, "--lengths", *map(str, args.lengths), "--depths"]
    argv += [*map(str, args.depths), "--tasks", *args.tasks, "--samples", str(args.samples), "--seed", str(args.seed)]
    argv += ["--checkpoint", args.checkpoint] if args.checkpoint else []
    return argv + (["--compare", args.compare] if args.compare else [])
