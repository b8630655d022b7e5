"""What DeepSpeed's CPU Adam costs the test tier: its JIT build (once per checkout) and its cached load.

    python benchmarks/cpu_adam_build.py [--cold]

The offload recipes step with DeepSpeed's CPU Adam, a C++ op torch's JIT loader compiles on first use
(tests/launch/test_cpu_adam.py and the offload recipe's rehearsal run it). `--cold` builds it in a fresh temporary
TORCH_EXTENSIONS_DIR (what the first tier run on a checkout pays); without it, it loads from the tier's cache
(`.cache/torch-extensions`, tests/helpers), building it there if it is not yet. Prints the wall time, the CPU
time of the compiler processes (user + system; wall time depends on the machine's load, CPU time much less) and
their peak memory. Not a test: timing depends on the machine and its load.
"""

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TIER_CACHE = REPO / ".cache" / "torch-extensions"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cold", action="store_true", help="build in a fresh temporary folder (no cache)")
    args = parser.parse_args(argv)
    folder = tempfile.mkdtemp(prefix="cpu-adam-") if args.cold else str(TIER_CACHE)
    os.environ["TORCH_EXTENSIONS_DIR"] = folder
    from deepspeed.ops.op_builder import CPUAdamBuilder

    start = time.perf_counter()
    CPUAdamBuilder().load(verbose=False)
    wall = time.perf_counter() - start
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = children.ru_utime + children.ru_stime
    what = "cold build" if args.cold else "tier cache"
    print(f"{what} in {folder}: {wall:.1f} s wall, compiler CPU {cpu:.1f} s (user + system)")
    peak, load = children.ru_maxrss / 1e6, os.getloadavg()[0]
    print(f"compiler peak RSS {peak:.2f} GB; {os.cpu_count()} cores, load average {load:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
