"""Shared test plumbing: the offline environment, and the rule that a test which starts a process says so.

Lanes (markers in pyproject.toml): `make test-unit` runs only tests that start no process (under 2 minutes on
2 cores); `make test` adds `subprocess` (a CLI, make or child Python) and `distributed` (accelerate launch over
gloo); `slow` and `gpu` are opt-in. A test without one of those markers that starts a process fails here, so the
unit lane stays fast by construction rather than by convention.
"""

import multiprocessing.process
import os
import subprocess
import sys

import pytest

from longctx.config.paths import launch_path
from tests.helpers import OFFLINE, REPO, TORCH_EXTENSIONS_DIR
from tests.helpers.fixtures.registries import restored_attention_registries  # noqa: F401 (a fixture, used below)
from tests.helpers.launching.worker_groups import mark_groups
from tests.helpers.launching.zygote import report_fallbacks, wait_ready, write_client

os.environ.update(OFFLINE, TORCH_EXTENSIONS_DIR=TORCH_EXTENSIONS_DIR)
# An xdist worker shares the cores with the others: one torch thread each, as torchrun gives each rank (two workers
# of two threads each on 2 cores spent 262 s of CPU on the unit lane where one process spends 150 s).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if "torch" in sys.modules:  # imported by a plugin before this file: its pool is sized already
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
# The tests' own JIT loads (tests/launch/test_cpu_adam.py) run the same ninja as every launch (the venv's, first on
# PATH: longctx/config/paths.py): a system ninja 1.11 on a folder that the venv's 1.13 last built rebuilt it (minutes).
os.environ["PATH"] = launch_path()

PROCESS_MARKERS = ("subprocess", "distributed", "slow", "gpu")


def pytest_sessionstart(session):
    """Build matplotlib's font cache before any test: on a fresh machine its first import runs `fc-list`, a
    process the rule below would charge to whichever unmarked test happened to import matplotlib first."""
    try:
        import matplotlib.font_manager  # noqa: F401
    except ImportError:
        pass


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    """Tests sharing a launched run stay on one xdist worker (tests/helpers/launching/worker_groups.py)."""
    mark_groups(config, items)


def _refuse_for(nodeid: str):
    def refuse(*args, **kwargs):
        raise AssertionError(
            f"{nodeid} starts a process without a marker: add `@pytest.mark.subprocess` (a CLI or child Python) "
            "or `@pytest.mark.distributed` (accelerate launch), so `make test-unit` stays process-free"
        )

    return refuse


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Setup, call and teardown of an unmarked test (module fixtures included) may not start a process."""
    if any(item.get_closest_marker(name) for name in PROCESS_MARKERS):
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "_execute_child", _refuse_for(item.nodeid))
        patch.setattr(multiprocessing.process.BaseProcess, "start", _refuse_for(item.nodeid))
        patch.setattr(os, "fork", _refuse_for(item.nodeid))
        yield


@pytest.fixture(scope="session")
def launch_zygote(tmp_path_factory):
    """The session's warm zygote (tests/helpers/launching/zygote.py), started at the first launching test: its client's
    path, for PYTHON_EXEC. None when it could not start (every launch then starts its ranks as before)."""
    folder = tmp_path_factory.mktemp("zygote")
    sock, log = str(folder / "zygote.sock"), open(folder / "zygote.log", "w")  # noqa: SIM115 - closed below
    argv = [sys.executable, "-m", "tests.helpers.launching.zygote", "serve", sock]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True, cwd=REPO, start_new_session=True)
    ready = wait_ready(proc.stdout)
    if not ready:  # stuck or dead: every launch then starts its ranks as before
        proc.kill()
    yield write_client(str(folder), sock, dict(os.environ)) if ready else None
    proc.terminate()
    proc.wait(timeout=30)
    log.close()
    report_fallbacks(folder / "fallbacks.log")


@pytest.fixture(autouse=True)
def warm_ranks(request):
    """Ranks of a launching test (`distributed` or `slow`) forked from the session's zygote, unless LONGCTX_ZYGOTE=0
    or the test is a `faults` test (it signals and kills processes by their place in the process tree)."""
    node = request.node
    launching = node.get_closest_marker("distributed") or node.get_closest_marker("slow")
    if os.environ.get("LONGCTX_ZYGOTE", "1") == "0" or not launching or node.get_closest_marker("faults"):
        yield
        return
    client = request.getfixturevalue("launch_zygote")
    with pytest.MonkeyPatch.context() as patch:
        if client:
            patch.setenv("PYTHON_EXEC", client)
        yield


@pytest.fixture(autouse=True)
def stock_attention_after_each_test(restored_attention_registries):  # noqa: F811 (the fixture imported above)
    """Every test leaves attention as transformers ships it (tests/helpers/fixtures/registries.py), whichever test ran
    before it: a test that installed the isolated `sdpa` and kept it made a later test's result depend on the order,
    which xdist's workers change (GRPO's Gemma 4 generation failed about one run in three)."""
    yield


@pytest.fixture(scope="session")
def uninterrupted_resume_run(tmp_path_factory):
    """tests/recipes/resume.yaml trained 6 steps at sp=2 without a fault (given a fake `--hub_token` that must appear
    nowhere): the reference that tests/checkpoints/test_resume.py and tests/faults/test_faults_launch.py compare
    resumed runs with, run once per session."""
    from tests.helpers.checkpoints.resume_runs import FAKE_TOKEN, launch_resume
    from tests.helpers.launching.launch import assert_ok

    root = tmp_path_factory.mktemp("uninterrupted")
    proc = launch_resume(root / "out", root / "probe", "--hub_token", FAKE_TOKEN)
    assert_ok(proc)
    return {"out": root / "out", "probe": root / "probe", "proc": proc}


@pytest.fixture
def isolation():
    """The isolated sdpa registered as `sdpa` (longctx/training/attention/isolation.py) for one test, then
    transformers' own sdpa and mask back, and no varlen kernel."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    from longctx.training.attention import varlen
    from longctx.training.attention.isolation import install_document_isolation

    install_document_isolation("sdpa")
    yield
    AttentionInterface.register("sdpa", sdpa_attention_forward)
    AttentionMaskInterface.register("sdpa", sdpa_mask)
    varlen.set_kernel(None)
