"""`python -m longctx sft|dpo|grpo RECIPE` (`make sft`, `make dpo`, `make grpo`): preflight, the prepared data, then
the accelerate launch of the recipe's entrypoint (`recipes/sft.py`; `recipes/dpo.py` or `recipes/grpo.py` for a
`trainer: dpo` or `trainer: grpo` recipe).

The accelerate YAML comes from the recipe's one `accelerate_config` key (or an `--accelerate_config` override),
so recipe and topology are never typed twice. The launch line is printed (secrets masked) before it runs, so
it can be copied into a cluster script. On one machine the rendezvous gets a free port; across machines the caller
names the main node and port, and each node its rank: as flags (scripts/slurm/sft.sbatch), or in the environment
Kubernetes and torchrun set (PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT: longctx/launch/
cluster_env.py; scripts/kubernetes/pytorchjob.yaml). The launch then becomes longctx/launch/supervise.py, accelerate's
launcher plus preemption forwarding and one exit status per outcome (longctx/config/exit_codes.py).
"""

import argparse
import os

from longctx.config.keys import recipe_with_overrides, split_argv
from longctx.config.paths import ENTRYPOINTS, entrypoint, recipes_epilog, resolve_recipe, unknown_recipe_message
from longctx.config.recipe import RecipeError, exit_on_recipe_error
from longctx.config.topology import ConfigError, read_topology
from longctx.launch.accelerate_launch import accelerate_argv, announce, free_port, replace_process, supervised
from longctx.launch.cluster_env import cluster_machines, consume

# subcommand -> the recipe its help shows; a recipe's `trainer` key names the subcommand that runs it
EXAMPLE = {"sft": "tiny-2k", "dpo": "tiny-dpo-2k", "grpo": "tiny-grpo"}


def make_parser(subcommand: str = "sft") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"python -m longctx {subcommand}",
        description=__doc__.split("\n\n")[0],
        epilog=recipes_epilog(
            f"python -m longctx {subcommand} {EXAMPLE[subcommand]} -- --max_steps 10 --output_dir outputs/try"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("recipe", help="a recipe: short name (llama8b-256k), name under recipes/ or path")
    p.add_argument("--dry-run", action="store_true", help="print the launch line only: no checks, no data, no run")
    p.add_argument("--no-launch", action="store_true", help="preflight and data only (a job's batch step)")
    p.add_argument("--no-checks", action="store_true", help="launch only: the job's batch step ran preflight and data")
    multi = p.add_argument_group("several machines (scripts/slurm/sft.sbatch passes these)")
    multi.add_argument("--num-machines", type=int, help="must equal the accelerate YAML's num_machines")
    multi.add_argument("--machine-rank", help="this machine's rank (0 on the main node)")
    multi.add_argument("--main-process-ip", help="address of the main node")
    multi.add_argument("--main-process-port", type=int, help="rendezvous port on the main node")
    return p


def check_trainer(recipe_path, overrides: list[str], subcommand: str) -> None:
    """`make sft` of a preference recipe (or `make dpo` of an SFT one) stops here, naming the target that runs it."""
    try:
        trainer = recipe_with_overrides(recipe_path, overrides).get("trainer", "sft")
    except ConfigError as exc:
        raise RecipeError(str(recipe_path), [str(exc)]) from None
    if trainer != subcommand and trainer in ENTRYPOINTS:
        raise RecipeError(str(recipe_path), [f"`trainer: {trainer}`: run it with `make {trainer}` (not {subcommand})"])


def accelerate_config_of(recipe_path, overrides: list[str]) -> str:
    """The recipe's accelerate YAML, honouring a command-line `--accelerate_config X` override."""
    try:
        value = recipe_with_overrides(recipe_path, overrides).get("accelerate_config")
    except ConfigError as exc:
        raise RecipeError(str(recipe_path), [str(exc)]) from None
    if not value:
        raise RecipeError(str(recipe_path), ["`accelerate_config` is not set: name the accelerate YAML it runs with"])
    return value


def take_cluster_env(args, accel: str) -> None:
    """Fill the machine flags not given on the command line from the cluster's environment (cluster_env.py)."""
    try:
        cluster = cluster_machines()
    except ValueError as exc:
        raise RecipeError(accel, [f"the cluster environment: {exc}"]) from None
    if cluster is None:
        return
    consume()  # as flags from here on (the launcher's own preflight would otherwise join a process group)
    if args.num_machines is None:
        args.num_machines, args.machines_from = cluster.num_machines, cluster.said()
    if args.machine_rank is None:
        args.machine_rank = cluster.machine_rank
    args.main_process_ip = args.main_process_ip or cluster.main_ip
    args.main_process_port = args.main_process_port or cluster.main_port


def machines_flags(args, accel: str) -> list[str]:
    """accelerate's flags for a launch across machines; [] on one machine. RecipeError on a mismatch."""
    from longctx.config.paths import repo_path

    wanted = read_topology(repo_path(accel)).num_machines
    if args.num_machines is not None and args.num_machines != wanted:
        fix = f"use {wanted} machines (under SLURM: sbatch --nodes {wanted}; Kubeflow: {wanted} pods / numNodes)"
        given = getattr(args, "machines_from", None) or "the launch"
        world = args.num_machines * read_topology(repo_path(accel)).processes_per_machine
        raise RecipeError(
            accel,
            [f"asks for num_machines={wanted} but {given} has {args.num_machines} (world size {world}); {fix}"],
        )
    if wanted == 1 or args.dry_run and args.machine_rank is None or args.no_launch:
        return []
    given = {"--machine-rank": args.machine_rank, "--main-process-ip": args.main_process_ip}
    given["--main-process-port"] = args.main_process_port
    missing = [flag for flag, value in given.items() if value is None]
    if missing:
        where = "scripts/slurm/sft.sbatch passes them; Kubeflow and torchrun set PET_NNODES, PET_NODE_RANK, "
        where += "PET_MASTER_ADDR and PET_MASTER_PORT, which are read when the flags are not given"
        raise RecipeError(accel, [f"num_machines={wanted}: give {', '.join(missing)} ({where})"])
    return ["--num_machines", str(wanted), "--machine_rank", str(args.machine_rank)]


def launch_argv(args, overrides: list[str], accel: str, trainer: str = "sft") -> list[str]:
    """The exact `accelerate launch` argv of the recipe on this machine."""
    recipe_path = resolve_recipe(args.recipe)
    shown_path = os.path.relpath(recipe_path.resolve())  # the launch runs from the recipe's root
    if shown_path.startswith(".."):
        shown_path = str(recipe_path.resolve())
    flags = machines_flags(args, accel)
    port = args.main_process_port
    if flags:
        flags += ["--main_process_ip", args.main_process_ip]
    elif not args.dry_run and port is None:
        port = free_port()  # two runs on one host must not meet on accelerate's default port
    return accelerate_argv(accel, [entrypoint(trainer), "--config", shown_path, *overrides], flags, port)


def main(argv: list[str], subcommand: str = "sft") -> int:
    """`sft|dpo RECIPE [flags] [-- overrides]`; returns an exit code, or becomes the launch."""
    own, overrides = split_argv(argv)
    args = make_parser(subcommand).parse_args(own)
    try:
        if not resolve_recipe(args.recipe).is_file():
            raise RecipeError(args.recipe, [unknown_recipe_message(args.recipe)])
        check_trainer(resolve_recipe(args.recipe), overrides, subcommand)
        accel = accelerate_config_of(resolve_recipe(args.recipe), overrides)
        take_cluster_env(args, accel)
        machines_flags(args, accel)  # a machine count other than the YAML's is refused before preflight and data
        if not (args.dry_run or args.no_checks):
            from longctx.launch.prepare import prepare_launch

            accel = prepare_launch(args.recipe, overrides, args.num_machines)  # preflight and data, one parse
            if accel is None:
                return 1
        cmd = launch_argv(args, overrides, accel, subcommand)
    except RecipeError as exc:
        exit_on_recipe_error(exc)
    if args.no_launch:
        print(f"[launch] preflight and data ready for {args.recipe}", flush=True)
        return 0
    announce(cmd)
    if args.dry_run:
        return 0
    replace_process(supervised(cmd))
