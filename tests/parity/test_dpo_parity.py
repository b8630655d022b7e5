"""DPO parity gate: sp=2 (and sp=4, sp=2 x dp=2, accumulation, ZeRO-2) computes what sp=1 computes, step by step.

The tiny Llama trains from the same random weights on the same packed rows (several passkey pairs a row, 1024 tokens,
tests/helpers/references/preference.py) through the real stack (`make data`'s preparation, accelerate launch,
DeepSpeed, Ulysses over gloo). An answer's log-prob is a sum over tokens that the SP shards split unevenly (some
answers straddle the boundary), so a rank that summed only its shard, as TRL's stock DPOTrainer does under SP, trains
on a different loss. The gate compares per-step loss, grad norm, TRL's reward metrics and log-probs, and the weights
after the SGD steps, with sp=1; a final test runs it against the shard-local sums
(tests/helpers/controls/shard_local_dpo.py) and requires it to fail.
"""

import math

import numpy as np
import pytest

from tests.helpers.launching.run_cache import run_cache
from tests.helpers.references.preference import eval_rows, prepare, train, write_pairs

# slow (not in `make test-quick`); in it: tests/preference/test_dpo_reference.py (sp=2 against
# a DPO loss written by hand over each sequence alone)
pytestmark = [pytest.mark.distributed, pytest.mark.slow]

STEPS = 4
METRICS = ("loss", "grad_norm", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins")
METRICS += ("logps/chosen", "logps/rejected")
# 4 pairs held out, evaluated at the last step sharded like training rows: held-out loss and rewards must agree
EVAL = ("--eval_holdout", "4", "--eval_strategy", "steps", "--eval_steps", "4", "--per_device_eval_batch_size", "1")
EVAL_METRICS = ("eval_loss", "eval_pairs", "eval_rewards/accuracies", "eval_rewards/margins", "eval_logps/chosen")
# fp32 on CPU: the SP runs reorder the same sums (attention after the all-to-all, the shards' partial sums added by
# the all-reduce), so agreement is to rounding. Measured (this file, 2-core CPU): losses, grad norms, reward metrics
# and held-out metrics within 6.4e-7 relative at sp=2, 7.9e-7 at sp=4, 9.9e-7 at sp=2 x dp=2 (against sp=1 x dp=2);
# trained weights within 6e-8. The shard-local control: step 1's loss 6.21 against ln 2, weights 2.7e-2 apart.
RTOL, ATOL = 1e-5, 1e-6
WEIGHT_ATOL = 1e-6


def mismatches(base, other) -> list[str]:
    """Differences beyond tolerance between two runs: (history, weights, stdout[, eval rows])."""
    (h0, w0, e0), (h1, w1, e1) = ((run[0], run[1], run[3] if len(run) > 3 else []) for run in (base, other))
    found = []
    for a, b in zip(e0, e1, strict=True):
        for key in EVAL_METRICS:
            if abs(a[key] - b[key]) > RTOL * max(abs(a[key]), abs(b[key])) + ATOL:
                found.append(f"step {a['step']} {key} {a[key]:.7g} vs {b[key]:.7g}")
    for a, b in zip(h0, h1, strict=True):
        for key in METRICS:
            if abs(a[key] - b[key]) > RTOL * max(abs(a[key]), abs(b[key])) + ATOL:
                found.append(f"step {a['step']} {key} {a[key]:.7g} vs {b[key]:.7g}")
    worst = max((w0[k] - w1[k]).abs().max().item() for k in w0)
    if worst > WEIGHT_ATOL:
        found.append(f"trained weights differ by up to {worst:.2e}")
    return found


def one_run(root, data, mesh: str, script: str = "recipes/dpo.py", extra: tuple = ()):
    """(history, weights, stdout, eval rows) of one launch on `mesh` (accelerate_configs/cpu-{mesh}.yaml)."""
    name = "-".join([mesh, script.split("/")[-1][:-3], *extra]).replace("--", "")
    history, weights, stdout = train(root, data, name, f"accelerate_configs/cpu-{mesh}.yaml", script, EVAL + extra)
    steps = int(extra[extra.index("--max_steps") + 1]) if "--max_steps" in extra else STEPS
    assert len(history) == steps
    return history, weights, stdout, eval_rows(root / name)


runs = run_cache("dpo-parity", write_pairs, one_run)  # runs(mesh[, script, extra]): each launch once a session


def test_rows_put_answers_on_both_sides_of_the_shard_boundary(tmp_path):
    """The fixture must exercise the reduction: several pairs a row, and sequences cut by the sp=2 boundary."""
    from datasets import load_from_disk

    folder = prepare("accelerate_configs/cpu-sp2.yaml", write_pairs(tmp_path / "data"), tmp_path / "prepared")
    rows = load_from_disk(str(folder / "dataset"))
    several = cut = both_sides = 0
    for row in rows:
        seq, answered = np.array(row["sequence_ids"]), np.array(row["labels"]) != -100
        several += seq.max() + 1 >= 6  # 3 pairs or more
        straddling = set(seq[:512]) & set(seq[512:]) - {-1}
        cut += bool(straddling)
        both_sides += bool(straddling & set(seq[:512][answered[:512]]) & set(seq[512:][answered[512:]]))
    assert several >= len(rows) - 1 and cut >= len(rows) - 1, "best-fit packing leaves at most one short row"
    assert both_sides >= 1, "no answer whose tokens fall on both shards"


def test_sp2_matches_sp1(runs):
    assert runs("sp1")[3] and runs("sp1")[3][0]["eval_pairs"] == 4, "the held-out pairs were evaluated"
    assert mismatches(runs("sp1"), runs("sp2")) == []


def test_losses_are_real_training(runs):
    """Guards the gate itself: the first step is the reference (ln 2), the later ones move, the rewards separate."""
    history = runs("sp1")[0]
    assert history[0]["loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert history[0]["rewards/margins"] == 0.0
    assert len({round(row["loss"], 6) for row in history}) == STEPS
    assert any(abs(row["rewards/margins"]) > 1e-3 for row in history[1:])


def test_gate_catches_shard_local_log_probs(runs):
    broken = runs("sp2", "tests/helpers/controls/shard_local_dpo.py")
    assert mismatches(runs("sp1"), broken), "summing each shard's log-probs alone (stock TRL under SP) went unnoticed"


@pytest.mark.slow
def test_sp4_matches_sp1(runs):
    """sp=4 replicates the tiny model's 2 KV heads; the rows split in 4 shards of 256 tokens."""
    assert mismatches(runs("sp1"), runs("sp4")) == []


@pytest.mark.slow
def test_sp2_dp2_matches_sp1_dp2(runs):
    """Two SP groups: the pairs of a step counted over both, each group's rows those of the dp-only run."""
    assert mismatches(runs("sp1-dp2"), runs("sp2-dp2-shard")) == []


@pytest.mark.slow
def test_accumulation_matches_sp1(runs):
    """Two micro-batches a step with unequal pair counts: the loss is the mean over the step's pairs. 3 steps: the 7
    training rows fill 3 whole steps; the 4th would be a partial cycle, whose rows accelerate pads by cycling from
    the epoch's start differently at each world size (longctx/training/sequence_parallel/data_order.py)."""
    ga = ("--gradient_accumulation_steps", "2", "--max_steps", "3")
    assert mismatches(runs("sp1", extra=ga), runs("sp2", extra=ga)) == []
