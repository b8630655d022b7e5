"""How long `python -m longctx validate --all --intended` takes for the whole catalog, as a user runs it.

    python benchmarks/preflight_catalog.py [--repeat 3]

Reports the wall time of the command (a fresh interpreter each time: imports included), the time of
the checks alone in one warm process, and the per-recipe share. The issue's bar: under 5 s in total
on a 2-core CPU with no network. Not a test: timing depends on the machine and its load.
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def cold_seconds() -> float:
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "longctx", "validate", "--all", "--intended", "--json"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    subprocess.run(cmd, cwd=REPO, check=False, capture_output=True, env=env)
    return time.perf_counter() - start


def warm_seconds() -> tuple[float, int]:
    from longctx.preflight.run import preflight_parser, run_preflight

    args = preflight_parser().parse_args(["--all", "--intended"])
    recipes = sorted((REPO / "recipes").rglob("*.yaml"))
    run_preflight(str(recipes[0]), [], args)  # imports
    start = time.perf_counter()
    for recipe in recipes:
        run_preflight(str(recipe), [], args)
    return time.perf_counter() - start, len(recipes)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    repeat = parser.parse_args().repeat
    cold = min(cold_seconds() for _ in range(repeat))
    warm, n = warm_seconds()
    print(f"recipes: {n}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"python -m longctx validate --all --intended: {cold:.2f} s (best of {repeat}, fresh interpreter)")
    print(f"checks alone, warm: {warm:.3f} s ({warm / n * 1000:.0f} ms per recipe); the rest is importing TRL/torch")


if __name__ == "__main__":
    main()
