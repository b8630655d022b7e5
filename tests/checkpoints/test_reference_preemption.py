"""A preemption during the DPO reference pass stops every rank there and keeps what was computed (reference.py).

Two launches of the same command (sp=2 over 2 CPU processes, the reference precomputed; every row in step 1 through
gradient accumulation) into one output folder, as a requeued job runs it
(tests/helpers/checkpoints/reference_preempt_probe.py):
  1. rank 1 receives SIGUSR1 in the pass's second batch: both ranks stop before the third, the rows of the first two
     are kept in `train-<key>.partial.json`, and the launch exits 75 (PREEMPTED) with no checkpoint;
  2. the same command computes only the rows after them, and step 1's loss is ln 2 exactly: policy and reference
     are the same weights, so every row's reference log-probs, kept or new, are the policy's.
Before: the pass ignored the signal, ran to its end and trained a step before stopping; a preemption during a long
pass lost it all (nothing is kept), and its requeue computed it again.
"""

import json
import math

import pytest
from datasets import load_from_disk

from longctx.config.exit_codes import PREEMPTED
from tests.helpers.launching.launch import accelerate_launch, assert_ok, log_history
from tests.helpers.references.preference import prepare, recipe_argv, write_pairs

# two launches: `slow` (the quick tier's budget); the quick tier keeps the partial file's round trip
# (tests/preference/test_preference_reference.py) and the training-step preemption chain
# (tests/faults/test_faults_launch.py)
pytestmark = [pytest.mark.distributed, pytest.mark.faults, pytest.mark.slow]
ACCEL = "accelerate_configs/cpu-sp2.yaml"
PROBE = "tests/helpers/checkpoints/reference_preempt_probe.py"


def rows_computed(probe) -> list[int]:
    return [i for line in (probe / "rank0.jsonl").read_text().splitlines() for i in json.loads(line)]


def test_a_preempted_reference_pass_keeps_its_rows_and_the_requeue_goes_on(tmp_path):
    data = write_pairs(tmp_path / "data", n_pairs=20)
    prepared, out = tmp_path / "prepared", tmp_path / "out"
    rows = len(load_from_disk(str(prepare(ACCEL, data, prepared) / "dataset")))
    assert rows >= 4, rows
    extra = ("--max_steps", "1", "--gradient_accumulation_steps", str(rows), "--resume_from_checkpoint", "auto")
    argv = recipe_argv(ACCEL, data, prepared, out, extra)
    signal = {"PROBE_DIR": str(tmp_path / "first"), "PROBE_REF_SIGNAL_RANK": "1", "PROBE_REF_SIGNAL_BATCH": "2"}
    (tmp_path / "first").mkdir()
    first = accelerate_launch(ACCEL, PROBE, argv, env=signal, launcher=True)
    assert first.returncode == PREEMPTED, first.stdout[-3000:] + first.stderr[-9000:]
    assert "[preempted] during the train reference pass, before batch 2" in first.stdout
    (partial,) = (out / "reference_log_probs").glob("train-*.partial.json")
    assert sorted(json.loads(partial.read_text())["rows"]) == ["0", "1"]
    assert not list(out.glob("checkpoint-*")) and not (out / "trainer_state.json").exists()

    (tmp_path / "second").mkdir()
    second = accelerate_launch(ACCEL, PROBE, argv, env={"PROBE_DIR": str(tmp_path / "second")}, launcher=True)
    assert_ok(second)
    assert "2 rows' log-probs kept in" in second.stdout and "going on at batch 2" in second.stdout
    assert rows_computed(tmp_path / "second") == list(range(2, rows))
    assert not partial.exists()
    (step,) = log_history(out)
    assert step["loss"] == pytest.approx(math.log(2), abs=1e-6)
