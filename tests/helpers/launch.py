"""Run the real launch path (`accelerate launch ... recipes/sft.py`) from tests and read what it logged."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accelerate_launch(
    accelerate_config: str, script: str, args: list[str], timeout: int = 600, env: dict | None = None
):
    """`accelerate launch --config_file X script args` from the repository root, on a free port."""
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        accelerate_config,
        "--main_process_port",
        str(free_port()),
        script,
        *args,
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **(env or {})}
    return subprocess.run(cmd, cwd=REPO, env=env, check=False, capture_output=True, text=True, timeout=timeout)


def log_history(output_dir: Path) -> list[dict]:
    """Per-step training logs (loss, grad_norm, ...) that the entrypoint saved with `trainer.save_state()`."""
    state = json.loads((Path(output_dir) / "trainer_state.json").read_text())
    return [row for row in state["log_history"] if "loss" in row]


def assert_ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-6000:]}"
    )
