"""Tests sharing a launched run stay on one pytest-xdist worker (tests/helpers/launching/worker_groups.py), so
`make test`'s two workers never launch a module's runs twice."""

import subprocess
import sys

import pytest

from tests.helpers import REPO

CONFTEST = """
import pytest
from tests.helpers.launching.worker_groups import mark_groups

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    mark_groups(config, items)
"""

MODULE = """
import os, time
import pytest

@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    with open(os.environ["SETUPS"], "a") as f:  # one line per set-up: what a launched run would cost again
        f.write(f"{os.environ.get('PYTEST_XDIST_WORKER')}\\n")
    return 1

@pytest.mark.parametrize("i", range(6))
def test_shared(launched, i):
    time.sleep(0.2)

@pytest.mark.parametrize("i", range(12))  # twice the shared group's time: one worker alone cannot take them all
def test_free(i):
    time.sleep(0.2)
"""


@pytest.mark.subprocess
def test_tests_sharing_a_module_fixture_run_on_one_worker_and_set_it_up_once(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_shared_run.py").write_text(MODULE)
    setups = tmp_path / "setups.txt"
    argv = [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider",
            "--rootdir", str(tmp_path), "-c", "/dev/null", str(tmp_path)]  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "SETUPS": str(setups)}
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    shared = {line.split()[0] for line in proc.stdout.splitlines() if "PASSED" in line and "test_shared[" in line}
    free = {line.split()[0] for line in proc.stdout.splitlines() if "PASSED" in line and "test_free[" in line}
    assert len(shared) == 1, proc.stdout  # one worker ran every test of the module's fixture
    assert setups.read_text().count("\n") == 1
    assert free == {"[gw0]", "[gw1]"}, proc.stdout  # the others still spread
