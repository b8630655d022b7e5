"""Prove that packed documents stay isolated on a recipe's attention path, at a given sp size.

Usage:
    python -m isolation_probe RECIPE [--sp N] [--no-isolation] [--compare-stock] [--parity] [--json FILE]
    make probe RECIPE=tiny-llama/sft-2k-cpu-sp2 PROBE_FLAGS="--sp 2"

Builds the recipe's architecture at tiny size (same query/KV heads, rope and layer types, random
weights), packs documents of uneven lengths into rows with restarting position_ids, perturbs each
document in turn and checks that no other document's logits or loss move (fp32 tolerance). At sp>1 it
runs under `accelerate launch` with accelerate_configs/cpu-sp{N}.yaml through DeepSpeed's Ulysses
attention over gloo. Exit 0: isolated; 1: a leak (each leaking document is named); 2: bad usage.

`--no-isolation` probes stock sdpa (expected to leak at sp>1); `--compare-stock` runs both in one
launch; `--parity` also checks packed loss and gradients against sp=1 and against the documents one by one.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from config.paths import REPO_ROOT, resolve_recipe


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m isolation_probe", description=__doc__.split("\n")[0])
    parser.add_argument("recipe", help="a recipe name under recipes/ or a path")
    parser.add_argument("--sp", type=int, default=1, help="sequence-parallel size (CPU processes), default 1")
    parser.add_argument("--no-isolation", action="store_true", help="probe stock sdpa, without the isolation")
    parser.add_argument("--compare-stock", action="store_true", help="also probe stock sdpa in the same launch")
    parser.add_argument("--parity", action="store_true", help="also check packed loss and gradients")
    parser.add_argument("--json", help="write the full report here")
    return parser.parse_args(argv)


def launch(args: argparse.Namespace, report_path: Path):
    """Run the worker on `args.sp` CPU processes under accelerate; returns the completed process."""
    flags = [f for f, on in (("--no-isolation", args.no_isolation), ("--compare-stock", args.compare_stock)) if on]
    flags += ["--parity"] if args.parity else []
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        f"accelerate_configs/cpu-sp{args.sp}.yaml",
    ]
    cmd += ["--main_process_port", port, "isolation_probe/worker.py", args.recipe, "--json", str(report_path), *flags]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(cmd, cwd=REPO_ROOT, env=env, check=False, capture_output=True, text=True)


def run_probe(args: argparse.Namespace) -> dict:
    """The worker's report, from this process at sp=1 or from a launch at sp>1."""
    if args.sp == 1:
        from isolation_probe.worker import run

        return run(args.recipe, 1, 0, not args.no_isolation, args.compare_stock, args.parity)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "report.json"
        proc = launch(args, path)
        if proc.returncode != 0 or not path.is_file():
            raise RuntimeError(f"the probe launch failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        return json.loads(path.read_text())


def summarise(report: dict) -> int:
    """Print the verdict; 0 when the probed path isolates documents (and parity holds when asked)."""
    where = f"{report['model']} ({report['attn_implementation']}) at sp={report['sp']}"
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


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if not resolve_recipe(args.recipe).is_file():
        print(f"error: no recipe {args.recipe!r} (looked for {resolve_recipe(args.recipe)})", file=sys.stderr)
        return 2
    if args.sp > 1 and not (REPO_ROOT / f"accelerate_configs/cpu-sp{args.sp}.yaml").is_file():
        print(f"error: --sp {args.sp}: no accelerate_configs/cpu-sp{args.sp}.yaml to launch with", file=sys.stderr)
        return 2
    from isolation_probe.model import recipe_model
    from training.isolation import IsolationError

    if recipe_model(args.recipe)[1].startswith("flash") and not _cuda():
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
