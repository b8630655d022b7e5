"""Prove that packed documents stay isolated on a recipe's attention path, at a given sp size.

Usage:
    python -m longctx probe RECIPE [--sp N] [--ring R] [--device auto|cpu|cuda] [--no-isolation] [--compare-stock]
        [--parity] [--json FILE] [-- --attn_implementation sdpa]
    make probe RECIPE=tiny-llama/sft-2k-cpu-sp2 FLAGS="--sp 2"
    make probe RECIPE=llama8b-256k          on a GPU node: sp=8, NCCL, one GPU per rank

Builds the recipe's architecture at tiny size (same query/KV heads, rope and layer types, random
weights), packs documents of uneven lengths into rows with restarting position_ids, perturbs each
document in turn and checks that no other document's logits or loss move (fp32 tolerance). At sp>1 it
runs under `accelerate launch` with accelerate_configs/cpu-sp{N}.yaml through DeepSpeed's Ulysses
attention over gloo. On a GPU node (`--device cuda`, the default where CUDA is visible) it runs at the
recipe's own sp unless --sp says otherwise: one process per GPU over NCCL, with the recipe's attention
implementation (FlashAttention in bf16, sdpa in fp32), so isolation is proven on the hardware and kernels
of the real run. Exit 0: isolated; 1: a leak (each leaking document is named); 2: bad usage.

`--no-isolation` probes stock sdpa (expected to leak at sp>1); `--compare-stock` runs both in one
launch; `--parity` also checks packed loss and gradients against sp=1 and against the documents one by one.
Recipe overrides after `--` may change what the probe builds (PROBE_KEYS: the model, its architecture source,
the attention implementation, the mesh); any other key changes nothing the probe runs and is refused.
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

from longctx.config.keys import override_values, split_argv
from longctx.config.paths import REPO_ROOT, own_file, recipes_epilog, resolve_recipe, unknown_recipe_message
from longctx.launch.accelerate_launch import accelerate_argv, announce, free_port
from longctx.launch.accelerate_launch import run as run_launch

# What the probe reads from a recipe: the model, where its architecture comes from, the attention and the mesh
PROBE_KEYS = frozenset({"model_name_or_path", "model_config_source", "attn_implementation", "accelerate_config"})


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m longctx probe",
        description=__doc__.split("\n")[0],
        epilog=recipes_epilog("python -m longctx probe tiny-2k --sp 2"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("recipe", help="a recipe name under recipes/ or a path")
    parser.add_argument("--sp", type=int, help="sequence-parallel size; default 1 on CPU, the recipe's on GPUs")
    parser.add_argument("--ring", type=int, default=1, help="R of a hybrid sp = U x R (Ulysses x ring); default 1")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto", help="auto: cuda when visible")
    parser.add_argument("--no-isolation", action="store_true", help="probe stock sdpa, without the isolation")
    parser.add_argument("--compare-stock", action="store_true", help="also probe stock sdpa in the same launch")
    parser.add_argument("--parity", action="store_true", help="also check packed loss and gradients")
    parser.add_argument("--json", help="write the full report here")
    own, overrides = split_argv(argv)
    args = parser.parse_args(own)
    args.overrides = override_values(overrides)
    ignored = sorted(set(args.overrides) - PROBE_KEYS)
    if ignored:
        parser.error(
            f"recipe override(s) {', '.join('--' + k for k in ignored)} change nothing the probe runs (it reads "
            f"{', '.join(sorted(PROBE_KEYS))}); drop them from ARGS"
        )
    args.override_argv = overrides
    return args


def launch_command(args: argparse.Namespace, report_path: Path, port: int) -> list[str]:
    """`accelerate launch` of the worker: cpu-sp{N}.yaml over gloo, or N GPUs (one per rank) over NCCL."""
    flags = [f for f, on in (("--no-isolation", args.no_isolation), ("--compare-stock", args.compare_stock)) if on]
    flags += ["--parity"] if args.parity else []
    config_file, launch_flags = own_file(f"accelerate_configs/{cpu_mesh(args.sp, args.ring)}.yaml"), []
    flags += ["--ring", str(args.ring)] if args.ring > 1 else []
    if args.device == "cuda":
        config_file = None
        launch_flags = ["--multi_gpu", "--num_processes", str(args.sp), "--num_machines", "1"]
        launch_flags += ["--mixed_precision", "no", "--dynamo_backend", "no"]
        flags += ["--device", "cuda"]
    worker = [own_file("longctx/leak_probe/worker.py"), args.recipe, "--json", str(report_path), *flags]
    overrides = ["--", *args.override_argv] if args.override_argv else []
    return accelerate_argv(config_file, [*worker, *overrides], launch_flags, port)


def launch(args: argparse.Namespace, report_path: Path):
    """Run the worker on `args.sp` processes under accelerate; returns the completed process."""
    cmd = launch_command(args, report_path, free_port())
    announce(cmd)
    return run_launch(cmd, offline=True, capture=True)


def run_probe(args: argparse.Namespace) -> dict:
    """The worker's report, from this process at sp=1 or from a launch at sp>1."""
    if args.sp == 1:
        from longctx.leak_probe.worker import run

        device = "cuda" if args.device == "cuda" else "cpu"
        isolation = not args.no_isolation
        return run(args.recipe, 1, 0, isolation, args.compare_stock, args.parity, device, args.overrides)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "report.json"
        proc = launch(args, path)
        if proc.returncode != 0 or not path.is_file():
            raise RuntimeError(f"the probe launch failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        return json.loads(path.read_text())


def summarise(report: dict) -> int:
    """Print the verdict; 0 when the probed path isolates documents (and parity holds when asked)."""
    where = f"{report['model']} ({report['attn_implementation']}) at sp={report['sp']}"
    if report.get("ring", 1) > 1:
        where += f" = Ulysses {report['sp'] // report['ring']} x ring {report['ring']}"
    print(report["install"])
    if "stock_leaks" in report:
        print(f"[probe] stock sdpa, isolation off: {len(report['stock_leaks'])} leaking document pairs")
    failures = report["leaks"] + report.get("parity", [])
    for failure in failures:
        print(f"[probe] LEAK: {failure}" if failure in report["leaks"] else f"[probe] PARITY: {failure}")
    if "parity" in report and not report["parity"]:
        print(f"[probe] parity: packed loss {report['packed_loss']:.7f} = packed sp=1 = documents one by one")
    print(f"[probe] {'FAILED' if failures else 'isolated'}: {where}")
    return 1 if failures else 0


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def resolve_device(args: argparse.Namespace) -> str | None:
    """Fill in --device and --sp; None when they are usable, else the error to print."""
    if args.device == "auto":
        args.device = "cuda" if _cuda() else "cpu"
    if args.sp is None:
        args.sp = recipe_sp(args.recipe, args.overrides) if args.device == "cuda" else 1
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            return "--device cuda: no CUDA GPU is visible"
        if torch.cuda.device_count() < args.sp:
            return f"sp={args.sp} needs {args.sp} GPUs (one per rank) but {torch.cuda.device_count()} are visible"
    if args.ring > 1 and (args.sp is None or args.sp % args.ring or args.sp == 1):
        return f"--ring {args.ring} needs an --sp it divides (sp = Ulysses U x ring R), e.g. --sp {2 * args.ring}"
    mesh = f"accelerate_configs/{cpu_mesh(args.sp, args.ring)}.yaml"
    if args.device != "cuda" and args.sp > 1 and not (REPO_ROOT / mesh).is_file():
        return f"--sp {args.sp}: no {mesh} to launch with"
    return None


def cpu_mesh(sp: int, ring: int) -> str:
    """The CPU accelerate YAML's name for sp (and a ring): cpu-sp4, cpu-sp4-u2r2."""
    return f"cpu-sp{sp}" if ring == 1 else f"cpu-sp{sp}-u{sp // ring}r{ring}"


def recipe_sp(recipe: str, overrides: dict | None = None) -> int:
    """The sp of the recipe's own accelerate YAML (1 when it names none)."""
    from longctx.config.keys import recipe_with_overrides
    from longctx.config.paths import repo_path
    from longctx.config.topology import read_topology

    value = recipe_with_overrides(resolve_recipe(recipe), overrides).get("accelerate_config")
    return read_topology(repo_path(value)).sp_size if value else 1


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if not resolve_recipe(args.recipe).is_file():
        print(f"error: {unknown_recipe_message(args.recipe)}", file=sys.stderr)
        return 2
    problem = resolve_device(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    from longctx.leak_probe.model import probe_model_source
    from longctx.training.attention.isolation import IsolationError

    if probe_model_source(args.recipe, args.overrides)[1].startswith("flash") and args.device != "cuda":
        print(f"error: {args.recipe} uses flash attention, which needs a CUDA GPU; probe it on one", file=sys.stderr)
        return 2
    try:
        report = run_probe(args)
    except (RuntimeError, FileNotFoundError, IsolationError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return summarise(report)
