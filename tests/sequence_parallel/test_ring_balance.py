"""The ring's load-balance benchmark (benchmarks/ring_balance.py) runs, and reports what the balance is for."""

import subprocess
import sys

import pytest

from tests.helpers.launching.launch import REPO

pytestmark = pytest.mark.subprocess


def test_tiny_benchmark_reports_the_balanced_long_document():
    command = [sys.executable, "benchmarks/ring_balance.py", "--tiny"]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    work = proc.stdout.split("measured on this CPU")[0]  # the work table (exact), not the timing one
    rows = {tuple(cell.strip() for cell in line.split("|")[1:4]): line for line in work.splitlines()}
    # one document on a ring of 4: contiguous chunks 1:3:5:7 half-chunk triangles, the mirror halves 4:4:4:4
    assert rows[("one document", "1", "off")].endswith("| 1.75 |")
    assert rows[("one document", "1", "on")].endswith("| 1.00 |")
    assert rows[("one document", "1", "auto")].endswith("| 1.00 |")
