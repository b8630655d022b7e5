"""The GPU ladder (benchmarks/gpu_memory_ladder.py): its bisection, and the whole ladder end to end with --tiny."""

import json
import subprocess
import sys

import pytest

from tests.helpers import REPO

sys.path[:0] = [str(REPO / "benchmarks")]

import gpu_memory_ladder  # noqa: E402
from gpu_memory_ladder import STEP, next_probe  # noqa: E402


def probes(limit: int, first: int) -> list[int]:
    """Drive next_probe against a GPU on which every length up to `limit` fits."""
    ok, fail, seen = 0, None, []
    while (seq := next_probe(ok, fail, first)) is not None and len(seen) < 50:
        seen.append(seq)
        ok, fail = (seq, fail) if seq <= limit else (ok, seq)
    return seen


def test_bisection_starts_at_the_plan_and_closes_in_on_the_limit():
    seen = probes(limit=300_000, first=256_000)
    assert seen[:2] == [256_000, 512_000]  # the plan's guess ran: double until a failure
    longest = max(s for s in seen if s <= 300_000)
    shortest_fail = min(s for s in seen if s > 300_000)
    assert shortest_fail / longest <= 1.05 and all(s % STEP == 0 for s in seen)
    assert len(seen) <= 8  # bisection, not a linear climb


def test_bisection_goes_down_when_the_plan_over_promises():
    seen = probes(limit=50_000, first=400_000)
    assert seen[0] == 400_000 and seen[1] < seen[0]
    assert 50_000 / 1.05 <= max(s for s in seen if s <= 50_000) <= 50_000


@pytest.mark.slow  # the step benchmark's --tiny run (tests/measure/test_gpu_step.py) is the quick tier's
def test_ladder_tiny_runs_every_feature_set(tmp_path):
    out = tmp_path / "ladder.json"
    proc = subprocess.run(
        [sys.executable, "benchmarks/gpu_memory_ladder.py", "--tiny", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert {r["features"] for r in rows} == set(gpu_memory_ladder.TINY_FEATURES)
    assert all(r["status"] == "ok" and r["peak_gib"] > 0 and r["tokens_per_s"] > 0 for r in rows)
    assert all(r["plan_gib"] > 0 for r in rows) and set(result["longest"]) == set(gpu_memory_ladder.TINY_FEATURES)
    assert out.with_suffix(".png").stat().st_size > 10_000
