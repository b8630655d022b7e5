"""tests/helpers/launching/outcome_rows.py, the plugin the GPU session (benchmarks/gpu_step.sh) runs its `gpu` tests
with: one JSON line per test as it ends, so a session cut by its time cap still says what finished. Run as an inner
pytest session in this process (pytester): a pass, a failure, a skip, a fixture error and a failing teardown."""

import json

pytest_plugins = ["pytester"]

INNER = """
import pytest

@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")

@pytest.fixture
def bad_teardown():
    yield
    raise RuntimeError("teardown broke")

def test_passes():
    pass

def test_fails():
    assert 1 == 2

@pytest.mark.skip(reason="no CUDA here")
def test_skipped():
    pass

def test_setup_error(broken):
    pass

def test_teardown_error(bad_teardown):
    pass
"""


def test_each_test_is_one_row_with_its_outcome_and_the_session_ends_with_its_exit(pytester, monkeypatch):
    rows_file = pytester.path / "rows.jsonl"
    monkeypatch.setenv("OUTCOME_ROWS", str(rows_file))
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider", "-p", "tests.helpers.launching.outcome_rows")
    assert result.ret == 1
    rows = [json.loads(line) for line in rows_file.read_text().splitlines()]
    assert rows[0]["row"] == "collected" and rows[0]["tests"] == 5 and rows[-1] == {"row": "finished", "exit": 1}
    tests = [(r["test"].split("::")[1], r["outcome"], r["when"]) for r in rows if r["row"] == "test"]
    assert tests == [
        ("test_passes", "passed", "call"),
        ("test_fails", "failed", "call"),
        ("test_skipped", "skipped", "setup"),
        ("test_setup_error", "error", "setup"),
        ("test_teardown_error", "passed", "call"),
        ("test_teardown_error", "error", "teardown"),
    ]
    by_name = {r["test"].split("::")[1]: r for r in rows if r["row"] == "test"}
    assert by_name["test_skipped"]["reason"] == "no CUDA here" and "assert 1 == 2" in by_name["test_fails"]["error"]
    assert "fixture broke" in by_name["test_setup_error"]["error"]


def test_without_the_variable_nothing_is_written(pytester, monkeypatch):
    monkeypatch.delenv("OUTCOME_ROWS", raising=False)
    pytester.makepyfile(test_inner="def test_passes():\n    pass\n")
    result = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider", "-p", "tests.helpers.launching.outcome_rows")
    assert result.ret == 0 and sorted(p.name for p in pytester.path.iterdir()) == ["test_inner.py"]
