"""The GPU memory ladder's CPU smoke mode runs end to end: workers, table, JSON lines (benchmarks/)."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


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
