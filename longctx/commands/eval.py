"""`python -m longctx eval RECIPE [--checkpoint DIR] [...] [-- RECIPE_OVERRIDES]`: the retrieval eval.

Runs preflight for this machine, then launches itself on the recipe's mesh with `accelerate launch` (built by
longctx/launch/; longctx/evaluation/worker.py runs on every rank), then prints the table and writes, under --out,
`results.json` (every cell), `heatmap.png` (length x depth accuracy per task) and `table.txt`.
`--compare BASE_DIR` (the --out of an earlier run, e.g. of the base model) adds it side by side.
`--dry-run` checks the recipe with preflight at its intended topology and prints the launch line and grid.
"""

import os

from longctx.evaluation.options import parse_args, resolve_grid, worker_argv


def main(argv: list[str]) -> int:
    from longctx.config.recipe import RecipeError, exit_on_recipe_error
    from longctx.launch.accelerate_launch import accelerate_argv, announce, free_port, run

    args, overrides = parse_args(argv)
    try:
        _recipe, topo = resolve_grid(args, overrides)
    except RecipeError as exc:
        exit_on_recipe_error(exc)
    if args.checkpoint and not os.path.isdir(args.checkpoint):
        print(f"error: --checkpoint {args.checkpoint}: no such folder (the output_dir of a `make sft` run)")
        return 2
    cells = len(args.tasks) * len(args.lengths) * len(args.depths)
    print(f"[eval] {cells} cells x {args.samples} samples: lengths {args.lengths}, depths {args.depths}")
    if args.dry_run:
        from longctx.commands.validate import main as validate
        from longctx.evaluation.cost import cost_line, grid_cost

        announce(accelerate_argv(topo.path, worker_target(args, overrides)))
        per_length = len(args.tasks) * len(args.depths) * args.samples
        print(cost_line(grid_cost(args.recipe_path, overrides, args.lengths, per_length)))
        return validate([args.recipe_path, "--intended", "--", *overrides])
    from longctx.launch.prepare import preflight_here

    # this machine can run the recipe's mesh, or stop here; eval reads prepared rows, never the training dataset
    if preflight_here(args.recipe_path, overrides, reads_dataset=False) is None:
        return 1
    cmd = accelerate_argv(topo.path, worker_target(args, overrides), port=free_port())
    announce(cmd)
    return run(cmd, offline=False).returncode


def worker_target(args, overrides: list[str]) -> list[str]:
    """The module every rank runs, with the grid and the recipe overrides."""
    return ["-m", "longctx.evaluation.worker", *worker_argv(args), *(["--", *overrides] if overrides else [])]
