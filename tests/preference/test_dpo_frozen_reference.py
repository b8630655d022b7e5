"""A `frozen_model` DPO reference is prepared exactly as the policy is (longctx/training/model_fixes.py).

The Qwen3.5 miniature (Gated DeltaNet + gated softmax layers, tests/recipes/tiny-qwen3.5) trains DPO on packed
pairs with a frozen reference built from the same seed: policy and reference have identical weights at step 1, so
every pair's margin is 0 and the step's loss is ln 2 exactly (the mean of -log sigmoid over the margins is ln 2
only when every margin is 0: -log sigmoid is strictly convex). A reference missing the policy's fixes runs
transformers' own Gated DeltaNet over the packed row, its state carried from one document into the next (at sp=1),
or over each rank's shard alone (at sp=2, past accelerate's refusal, which TRL's own reference engine never meets).
"""

import math

import pytest

from tests.helpers.references.preference import train, write_pairs

pytestmark = pytest.mark.distributed

QWEN35 = ("--model_config_source", "tests/recipes/tiny-qwen3.5", "--reference_log_probs", "frozen_model")


@pytest.mark.parametrize(
    "accel",
    ["accelerate_configs/cpu-sp1.yaml", pytest.param("accelerate_configs/cpu-sp2.yaml", marks=pytest.mark.slow)],
)
def test_a_frozen_qwen35_reference_equals_the_policy_at_step_1(tmp_path, accel):
    data = write_pairs(tmp_path / "data", n_pairs=6)  # 2 rows: 8 sequences across both shards, 4 in the first
    both_rows = ("--max_steps", "1", "--gradient_accumulation_steps", "2")  # step 1: both rows, weights unchanged
    history, _, stdout = train(tmp_path, data, "out", accel, extra=(*QWEN35, *both_rows))
    assert "[reference] [linear-attention]" in stdout  # the reference's layers converted, said once
    step = history[0]
    assert step["rewards/chosen"] == pytest.approx(0, abs=1e-6)
    assert step["rewards/rejected"] == pytest.approx(0, abs=1e-6)
    assert step["loss"] == pytest.approx(math.log(2), abs=1e-6), f"step-1 margins not 0: {step}"
