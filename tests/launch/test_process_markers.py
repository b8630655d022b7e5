"""The unit lane starts no process: tests/conftest.py fails a test that starts one without saying so.

Run as an inner pytest session (pytester, in this process) with the real conftest, so the rule itself is what
is tested: an unmarked test that runs a child fails with the fix in the message, a marked one passes.
"""

from pathlib import Path

import pytest

from tests.helpers import REPO

pytest_plugins = ["pytester"]

INNER = """
import subprocess, sys, multiprocessing
import pytest

def test_unmarked_child():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_unmarked_multiprocessing():
    multiprocessing.get_context("spawn").Process(target=print).start()

@pytest.mark.subprocess
def test_marked_child():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_no_process():
    assert sum(range(4)) == 6
"""


# marked: the outer rule must not refuse the inner marked test's child (this test checks the inner rule)
@pytest.mark.subprocess
def test_an_unmarked_test_that_starts_a_process_fails(pytester):
    pytester.makeconftest(Path(REPO / "tests" / "conftest.py").read_text())
    pytester.mkpydir("tests")
    (pytester.path / "tests" / "helpers").mkdir()
    (pytester.path / "tests" / "helpers" / "__init__.py").write_text((REPO / "tests/helpers/__init__.py").read_text())
    pytester.makeini("[pytest]\nmarkers =\n    subprocess: x\n    distributed: x\n    slow: x\n    gpu: x\n")
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["*test_unmarked_child starts a process without a marker*"])
    result.stdout.fnmatch_lines(["*test_unmarked_multiprocessing starts a process without a marker*"])
