"""SP parity for a miniature gpt-oss: attention sinks on every head and a sliding-window layer, at sp=1, 2 and 4.

tests/recipes/models/tiny-gpt-oss (random weights from config, fp32): 4 query / 2 KV heads (sp=4 gives each
rank one query head and a replicated KV head), a 16-token window on layer 0 and full attention on layer 1,
4 experts top-2, the router auxiliary loss at gpt-oss's 0.9. The rows (tests/helpers/references/moe_rows.py) mix packed
rows and one-document rows in one dataset, so a single launch per sp trains both kinds through the real
stack (accelerate launch, DeepSpeed ZeRO-3, Ulysses over gloo, `sdpa` = longctx/training/attention/sinks.py over the
isolated sdpa). Per-step loss and grad norm, and the weights after the SGD steps, must match sp=1. The gate's
own test runs sp=2 with every rank taking the first heads' sinks and requires a mismatch (quick tier).
"""

import math

import pytest

from tests.helpers.launching.run_cache import run_cache
from tests.helpers.references.moe_rows import write_rows
from tests.parity.test_sp_parity import mismatches

pytestmark = pytest.mark.distributed

STEPS = 4  # tests/recipes/moe-parity.yaml: max_steps


def train(tmp, data, sp: int, script: str = "recipes/sft.py"):
    from safetensors.torch import load_file

    from tests.helpers.launching.launch import accelerate_launch, assert_ok, log_history

    accel = f"accelerate_configs/cpu-sp{sp}.yaml"
    out = tmp / f"{script.split('/')[-1][:-3]}-sp{sp}"
    args = ["--config", "tests/recipes/moe-parity.yaml", "--accelerate_config", accel]
    proc = accelerate_launch(accel, script, [*args, "--dataset_name", str(data), "--output_dir", str(out)])
    assert_ok(proc)
    assert "[sinks] sdpa: each rank's heads get their own sinks" in proc.stdout
    history = log_history(out)
    assert [row["step"] for row in history] == list(range(1, STEPS + 1))
    return history, load_file(out / "model.safetensors")


runs = run_cache("gpt-oss-parity", write_rows, train)


@pytest.mark.parametrize("sp", [2, pytest.param(4, marks=pytest.mark.slow)])  # sp=4: slow, not in make test-quick
def test_gpt_oss_sp_matches_sp1(runs, sp):
    assert mismatches(runs(1), runs(sp)) == []


def test_losses_are_real_and_sinks_per_head(runs):
    """Guards the gate: losses finite and distinct per step; both layers carry one sink per query head."""
    history, weights = runs(1)
    losses = [row["loss"] for row in history]
    assert len(set(losses)) == STEPS and all(math.isfinite(loss) for loss in losses)
    sink_names = [name for name in weights if name.endswith("self_attn.sinks")]
    assert len(sink_names) == 2 and all(weights[name].shape == (4,) for name in sink_names)


def test_gate_catches_misaligned_sinks(runs):
    """The gate's negative control, in the quick tier (one 2-process launch): every rank taking the first heads'
    sinks must fail it."""
    assert mismatches(runs(1), runs(2, "tests/helpers/controls/misaligned_sinks.py")), (
        "sinks of the wrong heads went unnoticed"
    )
