"""Launches of tests/recipes/resume.yaml (the tiny Llama at sp=2, AdamW, a cosine schedule, a checkpoint every 3
steps) through tests/helpers/checkpoints/resume_probe.py, and what they recorded: shared by
tests/checkpoints/test_resume.py and the fault tests (tests/faults/test_faults_launch.py), which compare against one
uninterrupted run (the `uninterrupted_resume_run` fixture of tests/conftest.py)."""

import json
from pathlib import Path

from tests.helpers.launching.launch import accelerate_launch

PROBE = "tests/helpers/checkpoints/resume_probe.py"
SP2 = "accelerate_configs/cpu-sp2.yaml"
RECIPE = "tests/recipes/resume.yaml"
FAKE_TOKEN = "hf_NeverPrintThis0123456789abcdef"  # the uninterrupted run is given it as `--hub_token`


def launch_resume(out: Path, probe: Path, *args: str, env: dict | None = None, timeout: int = 600, launcher=False):
    """One launch of the recipe into `out`, every rank recording its steps under `probe`; `launcher`: through the
    launch process of `python -m longctx sft` (longctx/launch/supervise.py)."""
    probe.mkdir(parents=True, exist_ok=True)
    argv = ["--config", RECIPE, "--output_dir", str(out), *args]
    env = {"PROBE_DIR": str(probe), **(env or {})}
    return accelerate_launch(SP2, PROBE, argv, timeout=timeout, env=env, launcher=launcher)


def fingerprints(probe: Path) -> dict[int, dict[int, str]]:
    """{rank: {step: fingerprint}}; a step computed twice (killed, then resumed) keeps its last record."""
    ranks = {}
    for path in sorted(probe.glob("rank*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        ranks[int(path.stem[4:])] = {row["step"]: row["input_ids"] for row in rows}
    return ranks


def computed_steps(probe: Path, rank: int = 1) -> list[int]:
    """Every step the rank began, in order, across all launches into the same probe folder."""
    return [json.loads(line)["step"] for line in (probe / f"rank{rank}.jsonl").read_text().splitlines()]


def losses(rows: list[dict]) -> dict[int, float]:
    return {row["step"]: row["loss"] for row in rows}
