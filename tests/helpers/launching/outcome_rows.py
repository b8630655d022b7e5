"""A pytest plugin: each test's outcome as one JSON line, flushed when the test ends
(`-p tests.helpers.launching.outcome_rows`).

Why: JUnit XML (`--junitxml`) is written once, at the end of the session; a GPU session (benchmarks/gpu_step.sh)
runs its `gpu` tests under a time cap, and a run cut by it must still say what finished. The file is
$OUTCOME_ROWS (nothing is written when it is unset). Rows: `collected` (how many tests were selected, and each
collection error), one `test` row per test (passed / failed / skipped / error, seconds, the reason or the tail of
the failure), and `finished` with pytest's exit status (absent when the run was killed).
"""

import json
import os
import time

_FILE = None


def _emit(row: dict) -> None:
    if _FILE is not None:
        _FILE.write(json.dumps(row) + "\n")
        _FILE.flush()


def pytest_configure(config):
    global _FILE
    path = os.environ.get("OUTCOME_ROWS")
    if path and _FILE is None:
        _FILE = open(path, "a")  # noqa: SIM115 - held open for the session, closed in pytest_unconfigure


def pytest_collectreport(report):
    if report.failed:
        _emit({"row": "collect_error", "where": report.nodeid, "error": str(report.longrepr)[-1500:]})


def pytest_collection_finish(session):
    _emit({"row": "collected", "tests": len(session.items), "ids": [item.nodeid for item in session.items]})


def pytest_runtest_logreport(report):
    """One row per test: its call's outcome, or its setup's when it never ran (skipped, or an error in a fixture);
    a teardown that fails is an `error` row of its own."""
    if (
        report.when == "call"
        or (report.when == "setup" and not report.passed)
        or (report.when == "teardown" and report.failed)
    ):
        outcome = "error" if report.when != "call" and report.failed else report.outcome
        row = {"row": "test", "test": report.nodeid, "outcome": outcome, "when": report.when,
               "seconds": round(report.duration, 3), "t": round(time.time(), 1)}  # fmt: skip
        if report.skipped and isinstance(report.longrepr, tuple):
            row["reason"] = report.longrepr[2].removeprefix("Skipped: ")
        elif report.failed:
            row["error"] = str(report.longrepr)[-1500:]
        _emit(row)


def pytest_sessionfinish(session, exitstatus):
    _emit({"row": "finished", "exit": int(exitstatus)})


def pytest_unconfigure(config):
    global _FILE
    if _FILE is not None:
        _FILE.close()
        _FILE = None
