"""Run the real launch path (`accelerate launch ... recipes/sft.py`) from tests and read what it logged."""

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from longctx.launch.accelerate_launch import accelerate_argv, free_port, supervised

REPO = Path(__file__).resolve().parents[3]


def accelerate_launch(
    accelerate_config: str,
    script: str,
    args: list[str],
    timeout: int = 600,
    env: dict | None = None,
    launcher: bool = False,
):
    """`accelerate launch --config_file X script args` from the repository root, on a free port; `launcher`: as the
    launch of `python -m longctx sft` runs it (longctx/launch/supervise.py: preemption, exit statuses, a dead rank)."""
    cmd = accelerate_argv(accelerate_config, [script, *args], port=free_port())
    cmd = supervised(cmd) if launcher else cmd
    env = {**os.environ, **(env or {})}  # offline: tests/conftest.py
    return subprocess.run(cmd, cwd=REPO, env=env, check=False, capture_output=True, text=True, timeout=timeout)


def log_history(output_dir: Path) -> list[dict]:
    """Per-step training logs (loss, grad_norm, ...) that the entrypoint saved with `trainer.save_state()`."""
    state = json.loads((Path(output_dir) / "trainer_state.json").read_text())
    return [row for row in state["log_history"] if "loss" in row]


def assert_ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-6000:]}"
    )


def accelerate_launch_machines(
    accelerate_config: str,
    script: str,
    args: list[str],
    num_machines: int = 2,
    timeout: int = 900,
    env: dict | None = None,
) -> list[subprocess.CompletedProcess]:
    """The README's multi-node command, one `accelerate launch` per machine, all on this host (loopback).

    Each "machine" is its own launcher process with its own --machine_rank, rendezvousing at 127.0.0.1 on a
    free port, exactly as separate nodes would at the main node's address. Output goes to files, not pipes,
    so a chatty machine cannot block while the other is being read.
    """
    port = str(free_port())
    env = {**os.environ, **(env or {})}  # offline: tests/conftest.py
    with tempfile.TemporaryDirectory() as logs:
        procs = []
        for machine in range(num_machines):
            node = ["--num_machines", str(num_machines), "--machine_rank", str(machine)]
            node += ["--main_process_ip", "127.0.0.1", "--main_process_port", port]
            cmd = accelerate_argv(accelerate_config, [script, *args], node)
            # closed below, once the machine has exited
            out, err = (open(Path(logs) / f"{machine}.{kind}", "w+") for kind in ("out", "err"))  # noqa: SIM115
            procs.append((subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=err, text=True), out, err))
        deadline = time.monotonic() + timeout
        results = []
        for proc, out, err in procs:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 1))
            except subprocess.TimeoutExpired:
                for other, _, _ in procs:
                    other.kill()
                raise
            out.seek(0), err.seek(0)
            results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out.read(), err.read()))
            out.close(), err.close()
    return results
