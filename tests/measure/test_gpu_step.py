"""The GPU step benchmark (benchmarks/gpu_step.py): the recipe's own path, its rows, its budget and what it carries.

End to end on CPU (`slow`): the GPU session script with its CPU switch (`benchmarks/gpu_step.sh run --cpu`) writes
device.json, every `gpu` test's outcome and the step rows; its `gpu_step.py --tiny` runs the H200 recipe in
miniature through recipes/sft.py and the launch home; its rows' losses must be those `python -m longctx sft` (what
`make sft` runs) gives for the same recipe file, and each row's GPU and host plan what `python -m longctx plan`
gives for that recipe at the row's length, Adam states counted (every row is an optimizer step). The quick tier
holds the parts without a launch: the budget's decisions on a recorded run, the rows' schedule, the step record's
document count, and the carried archive's round trip.
"""

import io
import json
import os
import re
import subprocess
import sys
import types
import zipfile
from importlib.metadata import version
from xml.etree import ElementTree

import pytest
import torch
import yaml

from tests.helpers import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import gpu_step
import gpu_step_recipe
import node_wheels

from longctx.training.metrics.step_record import documents

GPU_MARK = re.compile(r"mark\.gpu\b")  # what benchmarks/gpu_step.sh greps for


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


def jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def tiny_session(tmp_path_factory):
    """The whole GPU session on CPU (`benchmarks/gpu_step.sh run --cpu`): device.json, the `gpu` tests (skipped or
    CPU-only here), then the benchmark with --tiny (every row); its folder and its scratch (TMPDIR) kept."""
    base = tmp_path_factory.mktemp("gpu_session")
    env = {**os.environ, "OUT": str(base / "out"), "TMPDIR": str(base), "PYTHON": sys.executable}
    proc = subprocess.run(["bash", "benchmarks/gpu_step.sh", "run", "--cpu"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=2400, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return base / "out"


@pytest.fixture(scope="module")
def tiny_run(tiny_session):
    """The session's rows, then `python -m longctx sft` of the recipe file it ran (copied beside the rows)."""
    rows, recipe = jsonl(tiny_session / "gpu_step.jsonl"), tiny_session / "recipe.yaml"
    sft_out = tiny_session.parent / "sft"
    cmd = [sys.executable, "-m", "longctx", "sft", str(recipe), "--no-checks", "--", "--output_dir", str(sft_out)]
    sft = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1200, check=False)
    assert sft.returncode == 0, sft.stdout[-2000:] + sft.stderr[-3000:]
    history = json.loads((sft_out / "trainer_state.json").read_text())["log_history"]
    return rows, {h["step"]: h["loss"] for h in history if "loss" in h}, recipe


@pytest.mark.slow
@pytest.mark.distributed
def test_the_gpu_session_on_cpu_writes_what_it_promises(tiny_session):
    """Every phase ran and exited 0; device.json names the stack that ran; every test of every file that marks one
    `gpu` has its outcome row (skipped without CUDA, or passed where it checks the CPU side), the JUnit XML the
    same tests; the step record and the exact recipe that ran sit beside the rows."""
    phases = jsonl(tiny_session / "phases.jsonl")
    assert [p["phase"] for p in phases] == ["device_image", "install", "check", "device", "gpu_tests", "gpu_step"]
    assert [p["exit"] for p in phases] == [0] * 6
    device = json.loads((tiny_session / "device.json").read_text())
    assert device["stage"] == "venv" and device["gpu"] is None and device["cuda_available"] is False
    assert device["versions"]["torch"] == torch.__version__ and device["host_total_gib"] > 0
    assert all(device["versions"][name] == version(name) for name in ("transformers", "trl", "deepspeed"))
    rows = jsonl(tiny_session / "gpu_tests.jsonl")
    tests = {r["test"]: r["outcome"] for r in rows if r["row"] == "test"}
    assert rows[0]["row"] == "collected" and set(rows[0]["ids"]) == set(tests)
    assert rows[-1] == {"row": "finished", "exit": 0}
    marked = {p.relative_to(REPO).as_posix() for p in (REPO / "tests").rglob("*.py") if GPU_MARK.search(p.read_text())}
    assert marked and {t.split("::")[0] for t in tests} == marked
    assert set(tests.values()) <= {"skipped", "passed"} and "skipped" in tests.values()
    cases = list(ElementTree.parse(tiny_session / "gpu_tests.xml").iter("testcase"))
    assert len(cases) == len(tests)
    steps = jsonl(tiny_session / "steps.jsonl")
    assert len(steps) == yaml.safe_load((tiny_session / "recipe.yaml").read_text())["max_steps"] == 6


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
