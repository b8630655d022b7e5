"""Shared test plumbing: the offline environment, and the rule that a test which starts a process says so.

Lanes (markers in pyproject.toml): `make test-unit` runs only tests that start no process (under 2 minutes on
2 cores); `make test` adds `subprocess` (a CLI, make or child Python) and `distributed` (accelerate launch over
gloo); `slow` and `gpu` are opt-in. A test without one of those markers that starts a process fails here, so the
unit lane stays fast by construction rather than by convention.
"""

import multiprocessing.process
import os
import subprocess

import pytest

from tests.helpers import OFFLINE

os.environ.update(OFFLINE)

PROCESS_MARKERS = ("subprocess", "distributed", "slow", "gpu")


def pytest_sessionstart(session):
    """Build matplotlib's font cache before any test: on a fresh machine its first import runs `fc-list`, a
    process the rule below would charge to whichever unmarked test happened to import matplotlib first."""
    try:
        import matplotlib.font_manager  # noqa: F401
    except ImportError:
        pass


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
