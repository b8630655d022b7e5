"""The planner chooses by predicted time among the variants that fit, and its choice flips where the model says.

Two flips, both Llama-3.1-8B on the H100 SXM profile (every figure predicted):
- One node, sp=8: as rows grow, the fastest variant stops fitting and the choice moves to the cheapest memory
  saving. At 768K the planner offloads the optimizer (PCIe and CPU Adam) rather than recompute attention (full
  checkpointing), because the model says offload costs less time; at 1M offload no longer fits with selective
  checkpointing, and full checkpointing with the optimizer on the GPU wins. No ring split is ever chosen here: a
  ring variant is slower than the Ulysses one of the same settings and saves no memory (this repository's ring
  all-gathers the whole sequence's K/V to every rank: longctx/memory_plan/terms.py `ring_buffers`).
- Two nodes, sp=16 (Ulysses at most 8, a node): among U x R splits, a smaller U sends less in the all-to-all but
  all-gathers more K/V over the network. With packed 16K documents (little attention to hide the gathers behind)
  the ring's traffic outweighs the all-to-all saving and the planner takes U8 x R2; on a profile whose network is
  fast enough, the traffic falls below the saving and the choice flips to U1 x R16, at the bandwidth the terms say.
"""

from dataclasses import replace

import pytest

from longctx.memory_plan.calibration import LLAMA_8B, arch_config
from longctx.memory_plan.inputs import PlanInputs
from longctx.memory_plan.mesh_choice import candidate, checkpointing_kind, choice_lines, ranked
from longctx.training.metrics.hardware import PROFILES

K = 1024
HW = PROFILES["h100-sxm"]
CONFIG = arch_config(LLAMA_8B)
LIMIT = 0.9 * 79.2  # preflight's tight line on an 80 GB GPU
NODE = PlanInputs(
    seq_len=0, sp=8, num_gpus=8, gpus_per_node=8, offload_optimizer=False, offload_params=False, tiled_mlp=True,
    act_offload=False, grad_ckpt=True, kernels="liger",
)  # fmt: skip
TWO_NODES = NODE.but(sp=16, num_gpus=16)


def describe(c) -> tuple:
    return (c.inputs.ring, c.inputs.offload_optimizer, checkpointing_kind(c.inputs))


def variant(seq: int, offload: bool, kind: str, ring: int = 1, base: PlanInputs = NODE, hw=HW, doc=None):
    from longctx.memory_plan.mesh_choice import CHECKPOINTING

    inputs = base.but(seq_len=seq, ring=ring, offload_optimizer=offload, **CHECKPOINTING[kind])
    return candidate(CONFIG, inputs, hw, doc)


def test_the_choice_is_the_fastest_that_fits_with_its_runner_up():
    found = ranked(CONFIG, NODE.but(seq_len=256 * K), HW, LIMIT)
    assert found and all(c.gpu_gib <= LIMIT for c in found)
    assert [c.time.step_s for c in found] == sorted(c.time.step_s for c in found)
    lines = choice_lines(found[-1], found)
    slower = found[1].time.step_s / found[0].time.step_s - 1
    assert found[0].label in lines[0] and f"{slower:+.1%}" in lines[1] and found[1].label in lines[1]


def test_offload_is_chosen_where_it_costs_less_than_recompute_and_dropped_where_it_stops_paying():
    at = {seq: describe(ranked(CONFIG, NODE.but(seq_len=seq), HW, LIMIT)[0]) for seq in (512 * K, 768 * K, 1024 * K)}
    assert at[512 * K] == (1, False, "selective checkpointing")
    # 768K: the optimizer on the GPU with selective checkpointing does not fit; of the two ways to save memory the
    # model prices offload (PCIe and CPU Adam) below full checkpointing's recompute of the attention
    assert variant(768 * K, False, "selective checkpointing").gpu_gib > LIMIT
    offload = variant(768 * K, True, "selective checkpointing")
    recompute = variant(768 * K, False, "full checkpointing")
    offload_cost = offload.time.components["optimizer_offload"]
    recompute_cost = recompute.time.components["recompute"] - offload.time.components["recompute"]
    assert offload.gpu_gib <= LIMIT and recompute.gpu_gib <= LIMIT and offload_cost < recompute_cost
    assert at[768 * K] == (1, True, "selective checkpointing")
    # 1M: selective no longer fits even offloaded; full checkpointing fits without offload, which would only cost
    assert variant(1024 * K, True, "selective checkpointing").gpu_gib > LIMIT
    on_gpu, offloaded = variant(1024 * K, False, "full checkpointing"), variant(1024 * K, True, "full checkpointing")
    assert on_gpu.gpu_gib <= LIMIT and offloaded.time.step_s > on_gpu.time.step_s
    assert at[1024 * K] == (1, False, "full checkpointing")


@pytest.mark.parametrize("seq", [128 * K, 1024 * K])
def test_a_ring_split_in_a_node_is_slower_and_saves_no_memory(seq):
    for kind in ("full checkpointing", "selective checkpointing"):
        ulysses = variant(seq, False, kind)
        for ring in (2, 4, 8):
            split = variant(seq, False, kind, ring)
            assert split.time.step_s > ulysses.time.step_s and split.gpu_gib >= ulysses.gpu_gib, (kind, ring)
    assert ranked(CONFIG, NODE.but(seq_len=seq), HW, 1000.0)[0].inputs.ring == 1


def ring_choice(network_bytes_per_s: float) -> int:
    """The planner's ring size at 1M tokens of packed 16K documents on two nodes, full checkpointing kept."""
    hw = replace(HW, network_bytes_per_s=network_bytes_per_s)
    found = ranked(CONFIG, TWO_NODES.but(seq_len=1024 * K), hw, 1000.0, doc_length=16 * K)
    same = [
        c for c in found if checkpointing_kind(c.inputs) == "full checkpointing" and not c.inputs.offload_optimizer
    ]
    return same[0].inputs.ring


def test_the_rings_traffic_outweighs_its_all_to_all_saving_until_the_network_is_fast_enough():
    def pair(bandwidth: float):
        hw = replace(HW, network_bytes_per_s=bandwidth)
        return [variant(1024 * K, False, "full checkpointing", r, TWO_NODES, hw, 16 * K).time for r in (2, 16)]

    u8, u1 = pair(HW.network_bytes_per_s)
    saving = u8.components["all_to_all"] - u1.components["all_to_all"]
    assert saving > 0 and u1.components["ring_exposed"] - u8.components["ring_exposed"] > saving
    assert ring_choice(HW.network_bytes_per_s) == 2
    # the bandwidth where the two splits take equal time, by bisection on the model's own terms
    low, high = HW.network_bytes_per_s, 1000 * HW.network_bytes_per_s
    for _ in range(60):
        mid = (low * high) ** 0.5
        a, b = pair(mid)
        low, high = (mid, high) if b.step_s > a.step_s else (low, mid)
    assert ring_choice(low * 0.9) == 2 and ring_choice(high * 1.1) == 16


@pytest.mark.parametrize("recipe", ["llama8b-256k", "qwen3.5-27b-256k-2x8"])
def test_make_plan_prints_the_choice_and_its_runner_up(recipe, capsys):
    from longctx.commands.validate import main

    main(["plan", recipe, "--intended", "--gpu-memory-gb", "80"])
    out = capsys.readouterr().out
    assert "planner's choice (fastest predicted that fits): Ulysses" in out
    assert "runner-up: Ulysses" in out and "the recipe's own" in out


def test_the_planner_never_picks_a_ring_the_recipes_rules_refuse(capsys):
    """llama8b-dpo-64k with packed 8K documents: a pure ring would be predicted fastest, but DPO prefix sharing on a
    GPU ring is refused by the recipe's own rules (longctx/config/rules/trainers/preference.py), so no ring is
    offered."""
    from longctx.commands.validate import main
    from longctx.preflight.load import Machine, load_launch
    from longctx.preflight.time_plan import allowed_rings

    launch = load_launch("recipes/llama3.1-8b/dpo-64k-sp4.yaml", [], Machine())
    assert allowed_rings(launch) == {1}
    inputs = NODE.but(seq_len=64 * K, sp=4, num_gpus=4, gpus_per_node=4, tiled_mlp=False)
    assert ranked(CONFIG, inputs, HW, LIMIT, doc_length=8 * K)[0].inputs.ring > 1  # what the rule takes away
    main(["plan", "llama8b-dpo-64k", "--num-gpus", "4", "--gpu-memory-gb", "80", "--doc-length", "8192"])
    choice = next(x for x in capsys.readouterr().out.splitlines() if "planner's choice" in x)
    assert "Ulysses 4 x ring 1" in choice
