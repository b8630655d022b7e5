"""`make sft` on packed prepared data at sp=2 through the real launch path (data_prep runs first)."""

import json
import math
import re
from pathlib import Path

import pytest

from tests.helpers.launching.launch import log_history
from tests.helpers.launching.make import run_make

# slow: make sft on prepared data also runs in tests/user/test_sft_e2e.py and packed sp=2 training in
# tests/attention/test_isolation_training.py; this end-to-end pairing runs in make test (not make test-quick)
pytestmark = [pytest.mark.distributed, pytest.mark.slow]


def test_make_sft_trains_on_packed_prepared_data_at_sp2(tmp_path):
    out = tmp_path / "packed-sp2"
    args = f"ARGS=--max_steps 4 --output_dir {out}"
    proc = run_make("-s", "sft", "RECIPE=tests/recipes/packed-sp2.yaml", args, timeout=900)
    log = proc.stdout + proc.stderr
    assert "[isolation] sdpa: packed documents attend only within themselves" in log
    folder = re.search(r"\[data\] (?:wrote|cache hit:) (\S+)", log).group(1)
    report = json.loads((Path(folder) / "report.json").read_text())
    assert report["config"]["mode"] == "packed" and report["sequences"] < report["documents_out"]
    shard = re.search(r"rank 0 holds a shard of (\d+) tokens", log)
    assert shard and int(shard.group(1)) == 4096 // 2
    losses = [row["loss"] for row in log_history(out)]
    assert len(losses) == 2 and all(math.isfinite(loss) for loss in losses)  # finite, logged every 2 steps
