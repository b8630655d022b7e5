"""ZeRO-3 partial optimizer offload (`offload_optimizer.ratio`): the GPU share follows the schedule and resumes.

A real DeepSpeed engine with its CPU Adam on CPU (tests/helpers/workers/partial_offload_worker.py), half of its
optimizer sub-groups stepped by DeepSpeed's backup AdamW as on a GPU, three steps of a learning-rate warm-up, then its
optimizer state saved and loaded into a fresh engine. With longctx/training/memory/partial_offload.py the GPU share
steps with the learning rate the CPU Adam steps with and comes back from a checkpoint with its Adam state; upstream
(the negative control, `--upstream`) it keeps the rate it had when the engine was built and loses its state.
"""

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import REPO

# slow (not in `make test-quick`); each engine runs in a child process (DeepSpeed's process group)
pytestmark = [pytest.mark.subprocess, pytest.mark.slow]


def run(*flags: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "tests.helpers.workers.partial_offload_worker", *flags],
        check=False, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_gpu_share_follows_the_schedule_and_resumes():
    report = run()
    assert report["gpu_sub_groups"] == 2 and report["sub_groups"] == 5, report
    assert [s["gpu_share"] for s in report["lr_used"]] == [s["cpu_adam"] for s in report["lr_used"]]
    assert report["lr_used"][0]["cpu_adam"] < report["lr_used"][-1]["cpu_adam"]  # the warm-up moved it
    assert report["checkpoint_has_gpu_share"] and report["restored_equal"]


def test_upstream_freezes_the_gpu_share_and_drops_its_state():
    report = run("--upstream")
    assert {s["gpu_share"] for s in report["lr_used"]} == {1e-3}  # the rate the engine was built with
    assert report["lr_used"][0]["cpu_adam"] != 1e-3
    assert not report["checkpoint_has_gpu_share"] and not report["restored_equal"]
