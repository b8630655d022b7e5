"""The GPU step benchmark (benchmarks/gpu_step.py) end to end with --tiny on CPU: every row, and failures as rows.

The one run (module fixture) SIGKILLs its child at the warm-up step, as the kernel's OOM killer would when host
memory runs out: that step must be a row naming the kill, and the steps after it must run in a fresh child
(which builds the model again). The attention rows need CUDA; on CPU they are one skipped row.
"""

import io
import json
import subprocess
import sys

import pytest

from tests.helpers import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import gpu_step

STEP_KEYS = {"seconds", "tokens_per_s", "model_tflops", "mfu", "hfu", "plan_gib", "plan_host_gib", "plan_terms"}


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_step") / "tiny.jsonl"
    argv = ["--tiny", "--out", str(out), "--budget-s", "600", "--simulate-kill", "4K warm-up"]
    proc = subprocess.run([sys.executable, "benchmarks/gpu_step.py", *argv], cwd=REPO, capture_output=True,
                          text=True, check=False, timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    lines = out.read_text().splitlines()
    assert proc.stdout.splitlines()[-len(lines) :] == lines, "each row is printed as it is written"
    return {row["label"]: row for row in map(json.loads, lines)}


@pytest.mark.subprocess
def test_every_row_is_written(rows):
    assert list(rows) == ["env", "attention alone", "4K warm-up", "128K unpacked", "128K packed 16x8K",
                          "256K unpacked", "128K unpacked selective"]  # fmt: skip
    env = rows["env"]
    assert env["status"] == "ok" and env["torch"] and env["transformers"] and env["deepspeed"], env
    assert rows["attention alone"]["status"] == "skipped: no CUDA device"
    steps = [row for row in rows.values() if row["row"] == "step" and row["status"] == "ok"]
    assert len(steps) == 4 and all(STEP_KEYS <= set(row) and row["tokens_per_s"] > 0 for row in steps)
    assert [row["seq"] for row in steps] == [512, 512, 1024, 512] and rows["128K packed 16x8K"]["docs"] == 16
    assert all(row["plan_terms"]["model_states"] >= 0 and row["rss_gib"] > 0 for row in steps)
    assert rows["256K unpacked"]["predicted_s"] > 0
    assert "saved_attention" in rows["128K unpacked selective"]["plan_terms"]  # the plan knows what is kept


@pytest.mark.subprocess
def test_a_killed_child_is_a_row_and_the_run_goes_on(rows):
    killed = rows["4K warm-up"]
    assert "SIGKILL" in killed["status"] and "OOM killer" in killed["status"], killed
    assert rows["128K unpacked"]["status"] == "ok" and rows["128K unpacked"]["build_s"] > 0, "a fresh child built"


def test_a_spent_budget_is_a_row_without_a_child():
    out = io.StringIO()
    session = gpu_step.Session(out, budget_s=0)
    row = session.run("step", "128K unpacked", seq=131072, docs=1)
    assert row["status"] == "skipped: the budget is spent" and session.worker is None
    assert json.loads(out.getvalue()) == row
