"""`python -m data_prep` killed mid-write (SIGINT, SIGKILL) leaves nothing that could pass for a finished
dataset, the next run rebuilds and succeeds, and two separate runs write byte-identical output.

Real processes, real signals: the kill lands once the first shard is on disk, while the others are being
written (tests/helpers/launching/slow_prep.py pauses 2 s after each shard so that window is certain).
"""

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from data_prep.output.writer import is_complete
from tests.helpers import REPO

# every test reads the interrupted child prep's leftovers; slow (not in `make test-quick`); in
# it: tests/data_prep/test_data_prep_pipeline.py interrupts a write in process
pytestmark = [pytest.mark.subprocess, pytest.mark.slow]

WORDS = ("the", "river", "crosses", "a", "long", "road", "while", "seven", "blue", "foxes", "find", "harbour", "door")


def corpus(path: Path, rows: int = 400) -> Path:
    rng = random.Random(0)
    docs = (" ".join(rng.choice(WORDS) for _ in range(rng.randint(50, 400))) for _ in range(rows))
    path.write_text("".join(json.dumps({"text": doc}) + "\n" for doc in docs))
    return path


def prep_command(source: Path, output: Path, module: str = "data_prep") -> list[str]:
    # small shards so the write phase is many-stepped: the kill lands inside it
    flags = ["--tokenizer", "recipes/assets/tiny-llama", "--max-length", "512", "--sp-size", "2"]
    return [sys.executable, "-m", module, "--input", str(source), *flags, "--shard-tokens", "4096"]


def run_prep(source: Path, output: Path) -> subprocess.CompletedProcess:
    cmd = [*prep_command(source, output), "--output", str(output)]
    return subprocess.run(cmd, cwd=REPO, check=False, capture_output=True, text=True, timeout=300)


def kill_mid_write(source: Path, output: Path, sig: int) -> int:
    """Start a prep, send `sig` once something is written, return its exit code."""
    cmd = [*prep_command(source, output, module="tests.helpers.launching.slow_prep"), "--output", str(output)]
    proc = subprocess.Popen(cmd, cwd=REPO)
    deadline = time.monotonic() + 120
    while not list(output.glob(".tmp-*/dataset/*.arrow")):  # the first shard is on disk
        assert proc.poll() is None, "data_prep finished before it could be interrupted: use a bigger corpus"
        assert time.monotonic() < deadline, "no shard written within 120 s"
        time.sleep(0.02)
    proc.send_signal(sig)
    return proc.wait(timeout=60)


def finished_looking(output: Path) -> list[Path]:
    """Folders a later run or reader could take for a prepared dataset: anything not named `.tmp-*`.

    Measured: SIGKILL can land after the report is written and before the rename, leaving a `.tmp-*`
    folder with `dataset/` and `report.json`; only its name marks it unfinished, and the next run removes it.
    """
    return [p for p in output.iterdir() if not p.name.startswith(".tmp-")]


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """SIGINT, then SIGKILL, then an uninterrupted rerun into the same folder; and a fresh run elsewhere."""
    root = tmp_path_factory.mktemp("prep")
    source, output = corpus(root / "docs.jsonl"), root / "prepared"
    found = {}
    for sig in (signal.SIGINT, signal.SIGKILL):
        code = kill_mid_write(source, output, sig)
        found[sig.name] = (code, finished_looking(output))
    return {"interrupted": found, "rerun": run_prep(source, output), "fresh": run_prep(source, root / "fresh")}


@pytest.mark.parametrize("sig", ["SIGINT", "SIGKILL"])
def test_interrupted_prep_leaves_nothing_that_looks_complete(runs, sig):
    code, finished = runs["interrupted"][sig]
    assert code != 0 and finished == []


def test_the_next_run_rebuilds_and_succeeds(runs):
    rerun = runs["rerun"]
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "cache hit" not in rerun.stdout
    (built,) = Path(rerun.stdout.split("[data] wrote ")[1].split()[0]).parent.iterdir()  # no .tmp-* left over
    assert is_complete(built) and not built.name.startswith(".tmp-")


def test_two_runs_write_byte_identical_datasets(runs):
    assert runs["fresh"].returncode == 0, runs["fresh"].stderr[-3000:]
    (a,) = Path(runs["rerun"].stdout.split("[data] wrote ")[1].split()[0]).parent.iterdir()
    (b,) = (Path(runs["fresh"].stdout.split("[data] wrote ")[1].split()[0])).parent.iterdir()
    assert a.name == b.name and tree(a) == tree(b)
