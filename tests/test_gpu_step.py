"""The GPU step benchmark (benchmarks/gpu_step.py): the recipe's own path, its rows, its budget and what it carries.

End to end on CPU (`slow`): `gpu_step.py --tiny` runs the H200 recipe in miniature through recipes/sft.py and the
launch home; its rows' losses must be those `python -m longctx sft` (what `make sft` runs) gives for the same
recipe file, and each row's GPU and host plan what `python -m longctx plan` gives for that recipe at the row's
length, Adam states counted (every row is an optimizer step). The default tier holds the parts without a launch:
the budget's decisions on a recorded run, the rows' schedule, the step record's document count, and the carried
archive's round trip.
"""

import io
import json
import subprocess
import sys
import types
import zipfile

import pytest
import torch

from tests.helpers import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import gpu_step
import gpu_step_recipe
import node_wheels

from longctx.training.metrics.step_record import documents


def test_rows_run_short_to_long_and_packed_rows_hold_8k_documents():
    rows = gpu_step_recipe.row_specs(196608, 1, 1)
    assert [r["label"] for r in rows] == ["4K warm-up", "4K", "128K packed 16x8K", "128K unpacked", "192K unpacked",
                                          "192K packed 24x8K"]  # fmt: skip
    assert all(r["seq"] // r["docs"] == (8192 if r["packed"] else r["seq"]) for r in rows)
    tiny = gpu_step_recipe.row_specs(196608 // 256, 256, 2)
    assert [r["seq"] for r in tiny] == [16, 16, 512, 512, 512, 512, 768, 768, 768, 768]
    assert gpu_step_recipe.row_specs(131072, 1, 1)[-1]["label"] == "128K unpacked"  # no row past max_length


def test_the_step_record_counts_documents_where_positions_restart():
    pos = torch.cat([torch.arange(8), torch.arange(4), torch.arange(4)])[None]
    assert documents(pos) == 3 and documents(torch.arange(16)[None]) == 1
    assert documents(torch.stack([torch.arange(16), pos[0]])) == 4


class RecordedRun(gpu_step.RecipeRun):
    """A RecipeRun over a record that grows as a test says, with no process: the budget logic as it runs."""

    def __init__(self, rows, arrivals):
        self.rows, self.arrivals, self.done, self.last, self.ended = rows, list(arrivals), 0, None, False
        self.proc = types.SimpleNamespace(poll=lambda: None)

    def new_steps(self):
        return self.arrivals.pop(0) if self.arrivals else []

    def end(self):
        self.ended = True
        return -15

    def tail(self):
        return ""


def rows_of(out: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def spec(label, seq, flops):
    return {"label": label, "seq": seq, "docs": 1, "packed": False, "plan_gib": 1.0, "plan_host_gib": 2.0,
            "flops": flops}  # fmt: skip


def test_a_row_predicted_past_the_budget_is_not_started_and_the_rest_say_why(monkeypatch):
    """4K rows say nothing of a long row's time (no prediction); after 128K (10 s) the 256K row, 4x its FLOPs,
    is predicted at 40 s: past a 30 s budget, so the run is ended and both remaining rows are rows."""
    monkeypatch.setattr(gpu_step, "POLL_S", 0)
    rows = [spec("4K", 4096, 1.0), spec("128K", 131072, 10.0), spec("256K", 262144, 40.0)]
    rows.append(spec("256K packed", 262144, 40.0))
    step = {"step_s": 10.0, "peak_alloc_gib": 0.5, "peak_reserved_gib": 0.8, "rss_peak_gib": 4.0}
    run = RecordedRun(rows, [[step], [step]])
    out = io.StringIO()
    gpu_step.follow(gpu_step.Session(out, budget_s=30), run)
    got = rows_of(out)
    assert [r["status"] for r in got[:2]] == ["ok", "ok"] and run.ended
    assert got[2]["label"] == "256K" and got[2]["status"] == "not measured: predicted 40 s, past budget"
    assert got[3]["status"] == "not measured: the run was ended before it" and got[-1]["row"] == "run"
    assert got[0]["plan_over_reserved"] == 1.25 and got[0]["plan_host_over_rss_peak"] == 0.5


def test_every_row_measured_ends_the_run_before_its_final_save(monkeypatch):
    monkeypatch.setattr(gpu_step, "POLL_S", 0)
    run = RecordedRun([spec("4K", 4096, 1.0)], [[{"step_s": 1.0}]])
    out = io.StringIO()
    gpu_step.follow(gpu_step.Session(out, budget_s=30), run)
    assert run.ended and rows_of(out)[-1]["status"].startswith("every row measured")


def test_a_run_that_dies_leaves_a_row_saying_so(monkeypatch):
    monkeypatch.setattr(gpu_step, "POLL_S", 0)
    run = RecordedRun([spec("4K", 4096, 1.0), spec("128K", 131072, 10.0)], [[{"step_s": 1.0}]])
    run.proc = types.SimpleNamespace(poll=lambda: -9)  # the OOM killer's SIGKILL
    out = io.StringIO()
    gpu_step.follow(gpu_step.Session(out, budget_s=30), run)
    assert rows_of(out)[1]["status"] == "the run exited with code -9"


def test_the_carried_archive_gives_back_each_wheel_file_for_file(tmp_path):
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("demo/", "")  # a folder entry, as some wheels (regex's) carry: it must not come back as a file
        zf.writestr("demo/__init__.py", "VALUE = 1\n" * 100)
        needs = ["regex>=2025.10.22", 'tomli; python_version < "3.11"', 'pytest; extra == "dev"']
        zf.writestr("demo-1.0.dist-info/METADATA", "Name: demo\n" + "".join(f"Requires-Dist: {r}\n" for r in needs))
    node_wheels.pack([wheel], tmp_path / "carry.tar.xz", preset=1)
    (tmp_path / "carried").mkdir()
    (tmp_path / "carry.tar.xz").rename(tmp_path / "carried" / node_wheels.ARCHIVE)
    [back] = node_wheels.restore(tmp_path / "carried", tmp_path / "restored")
    with zipfile.ZipFile(wheel) as a, zipfile.ZipFile(back) as b:
        files = {n: a.read(n) for n in a.namelist() if not n.endswith("/")}
        assert back.name == wheel.name and files == {n: b.read(n) for n in b.namelist()}
    assert node_wheels.requirements(back) == ["regex"]  # Python 3.12's, extras left out


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """The benchmark with --tiny (every row), then `python -m longctx sft` of the recipe file it ran."""
    work = tmp_path_factory.mktemp("gpu_step")
    out = work / "rows.jsonl"
    argv = [sys.executable, "benchmarks/gpu_step.py", "--tiny", "--out", str(out), "--work", str(work / "run"),
            "--budget-s", "1500"]  # fmt: skip
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=1800, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    sft_out = work / "sft"
    cmd = [sys.executable, "-m", "longctx", "sft", str(work / "run" / "recipe.yaml"), "--no-checks", "--",
           "--output_dir", str(sft_out)]  # fmt: skip
    sft = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1200, check=False)
    assert sft.returncode == 0, sft.stdout[-2000:] + sft.stderr[-3000:]
    history = json.loads((sft_out / "trainer_state.json").read_text())["log_history"]
    return rows, {h["step"]: h["loss"] for h in history if "loss" in h}, work / "run" / "recipe.yaml"


@pytest.mark.slow
@pytest.mark.distributed
def test_the_benchmark_trains_what_make_sft_trains(tiny_run):
    rows, sft_losses, _ = tiny_run
    steps = [r for r in rows if r["row"] == "step"]
    assert [r["status"] for r in steps] == ["ok"] * 6 and rows[-1]["status"].startswith("every row measured")
    assert [r["seq"] for r in steps] == [16, 16, 512, 512, 768, 768]
    assert [r["documents"] for r in steps] == [1, 1, 16, 1, 1, 24] == [r["docs"] for r in steps]
    losses = {r["step"]: r["loss"] for r in steps}  # the same recipe, data and seed: the same losses
    assert losses.keys() == sft_losses.keys() and losses == pytest.approx(sft_losses, rel=1e-6)
    assert all(r["optimizer_step"] and r["rss_peak_gib"] > 0 and r["step_s"] > 0 for r in steps)


@pytest.mark.slow
@pytest.mark.distributed
def test_each_rows_plan_is_preflights_plan_at_its_length(tiny_run):
    rows, _, recipe = tiny_run
    for row in (r for r in rows if r["row"] == "step"):
        cmd = [sys.executable, "-m", "longctx", "plan", str(recipe), "--json", "--", "--max_length", str(row["seq"])]
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=True)
        plan = json.loads(proc.stdout.strip().splitlines()[-1])["plan"]
        assert row["plan_gib"] == pytest.approx(plan["total_gib"], abs=1e-6)
        assert row["plan_host_gib"] == pytest.approx(plan["host_per_node_gib"], abs=1e-6)
        assert row["plan_host_terms"]["optimizer_states"] > 0  # the Adam states of the step every row takes
