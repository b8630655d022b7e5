"""The memory plan against published points (memory_plan/calibration.py), and the shape of its API."""

import pytest

from memory_plan.calibration import LLAMA_8B, POINTS, arch_config, ratio, within
from memory_plan.memory import MemoryPlan, estimate, max_seq_len

OFF = {
    "offload_optimizer": True,
    "offload_params": False,
    "liger": False,
    "tiled_mlp": False,
    "act_offload": False,
    "grad_ckpt": True,
}


@pytest.mark.parametrize("point", POINTS, ids=lambda p: p.name)
def test_calibration_point(point):
    assert within(point), f"{point.name}: plan/published = {ratio(point):.2f}, tolerance {point.tolerance:.0%}"


def test_estimate_is_a_plan_with_a_total():
    plan = estimate(arch_config(LLAMA_8B), seq_len=131072, sp=8, num_gpus=8, **OFF)
    assert isinstance(plan, MemoryPlan)
    assert plan.total_gib == pytest.approx(sum(value for _, value in plan.rows()))
    assert plan.host_per_node > 0  # the offloaded optimizer lives in host RAM


@pytest.mark.parametrize(
    "feature, component",
    [("liger", "logits"), ("tiled_mlp", "mlp"), ("act_offload", "activations"), ("offload_optimizer", "model_states")],
)
def test_each_feature_shrinks_its_component(feature, component):
    config = arch_config(LLAMA_8B)
    before = estimate(config, seq_len=262144, sp=8, num_gpus=8, **{**OFF, feature: False})
    after = estimate(config, seq_len=262144, sp=8, num_gpus=8, **{**OFF, feature: True})
    assert getattr(after, component) < getattr(before, component) / 2


def test_sp_divides_the_per_rank_working_set():
    config = arch_config(LLAMA_8B)
    sp1 = estimate(config, seq_len=65536, sp=1, num_gpus=8, **OFF)
    sp8 = estimate(config, seq_len=65536, sp=8, num_gpus=8, **OFF)
    assert sp8.activations == pytest.approx(sp1.activations / 8)
    assert sp8.logits == pytest.approx(sp1.logits / 8)


def test_max_seq_len_is_the_boundary():
    config, gib = arch_config(LLAMA_8B), 74.5
    fit = max_seq_len(config, gib, sp=8, num_gpus=8, **OFF)
    assert estimate(config, seq_len=fit, sp=8, num_gpus=8, **OFF).total_gib <= gib
    assert estimate(config, seq_len=fit + 8 * 1024, sp=8, num_gpus=8, **OFF).total_gib > gib
