"""Start a small gloo world by hand, one process per rank, and read what each rank wrote.

The tests of our collectives (tests/sequence_parallel/test_gloo_*.py, tests/models/test_moe_zero3_routing.py, the
all-to-all memory term, the TiledMLP tile count in tests/training/test_alst.py)
run a worker module on each rank without accelerate: `python -m WORKER OUT_DIR [ARGS]`, with RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT in its environment (what `init_process_group`'s default `env://` and
`deepspeed.init_distributed` read) on top of this process's (offline: tests/conftest.py). Each rank writes
OUT_DIR/rank{r}.json. Output goes to files, not pipes, so a chatty rank cannot block while another is read, and a
failure names every rank's exit status and the tail of its stderr.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from longctx.launch.accelerate_launch import free_port
from tests.helpers import REPO

TAIL = 3000  # characters of each rank's stderr in a failure message


def spawn_ranks(
    worker: str,
    world_size: int,
    out: Path,
    timeout: float,
    args: tuple[str, ...] = (),
    env: dict | None = None,
    check: bool = True,
) -> list[dict]:
    """Run `python -m worker out *args` on `world_size` ranks on a free port; each rank's rank{r}.json, in rank order.

    check=True: every rank must exit 0 within `timeout` seconds (all together) and write its file, else the test
    fails with each rank's exit status and stderr tail. check=False (a negative control that may fail or hang):
    ranks still running at the deadline are killed, and a rank that wrote no file reads as {}.
    """
    out.mkdir(parents=True, exist_ok=True)
    base = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(world_size)}
    procs = []
    for rank in range(world_size):
        rank_env = {**base, "RANK": str(rank), "LOCAL_RANK": str(rank), **(env or {})}
        with open(out / f"rank{rank}.stdout", "w") as stdout, open(out / f"rank{rank}.stderr", "w") as stderr:
            cmd = [os.environ.get("PYTHON_EXEC") or sys.executable, "-m", worker, str(out), *args]  # the zygote
            procs.append(subprocess.Popen(cmd, cwd=REPO, env=rank_env, stdout=stdout, stderr=stderr))
    codes = wait_all(procs, timeout)
    files = [out / f"rank{rank}.json" for rank in range(world_size)]
    results = [json.loads(path.read_text()) if path.is_file() else None for path in files]
    if check and (any(code != 0 for code in codes) or None in results):
        raise AssertionError(failure(worker, out, codes, results))
    return [result or {} for result in results]


def wait_all(procs: list[subprocess.Popen], timeout: float) -> list[int | None]:
    """Each process's exit status, waiting `timeout` seconds for all of them; those still running are killed
    (their status reads None)."""
    deadline = time.monotonic() + timeout
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=max(deadline - time.monotonic(), 0.1)))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            codes.append(None)
    return codes


def failure(worker: str, out: Path, codes: list[int | None], results: list[dict | None]) -> str:
    lines = [f"`python -m {worker}` on {len(codes)} ranks failed:"]
    for rank, (code, result) in enumerate(zip(codes, results, strict=True)):
        status = "killed at the timeout" if code is None else f"exit {code}"
        wrote = "wrote its result" if result is not None else f"wrote no {out / f'rank{rank}.json'}"
        stderr = (out / f"rank{rank}.stderr").read_text()[-TAIL:]
        lines.append(f"--- rank {rank}: {status}, {wrote}; stderr tail:\n{stderr}")
    return "\n".join(lines)
