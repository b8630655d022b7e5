"""The GPU memory ladder's CPU smoke mode (benchmarks/): a worker in-process, and the whole ladder (slow)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_worker_climbs_the_lengths(capsys):
    """One feature set in-process (what each worker subprocess runs): one JSON row per length."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import gpu_memory_ladder

    gpu_memory_ladder.worker("offload+tiled", [128, 256], deadline=float("inf"), tiny=True)
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [(r["seq_len"], r["status"]) for r in rows] == [(128, "ok"), (256, "ok")]
    assert all(r["peak_gib"] > 0 and r["tokens_per_s"] > 0 and isinstance(r["estimate_gib"], float) for r in rows)


def test_worker_skips_a_point_that_would_overrun_the_budget(capsys):
    sys.path.insert(0, str(REPO / "benchmarks"))
    import gpu_memory_ladder

    gpu_memory_ladder.worker("baseline", [128, 100_000], deadline=0.0, tiny=True)
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert rows[0]["status"].startswith("skipped") and len(rows) == 1


@pytest.mark.slow
def test_ladder_tiny_runs_every_feature_set(tmp_path):
    out = tmp_path / "ladder.jsonl"
    proc = subprocess.run(
        [sys.executable, "benchmarks/gpu_memory_ladder.py", "--tiny", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["features"] for r in rows} == {"baseline", "offload", "offload+tiled"}
    assert all(r["status"] == "ok" and r["peak_gib"] > 0 and r["tokens_per_s"] > 0 for r in rows)
    assert "| offload+tiled | 256 | ok |" in proc.stdout
