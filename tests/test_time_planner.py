"""The planner chooses by predicted time among the variants that fit, and its choice flips where the model says.

Llama-3.1-8B at sp=16 over two nodes of 8 (the ring crosses the network there): Ulysses U x ring R with U in 8, 4, 2,
1. A smaller U sends fewer bytes in Ulysses' all-to-all (fewer heads exchanged, no KV replication), and a larger R
more K/V around the ring, over InfiniBand. At short rows a pure ring's traffic outweighs that saving (it is exposed:
a hop takes longer than a chunk's attention), at long rows compute hides it and the pure ring's smaller all-to-all
wins. The pure ring also gathers the most K/V (the memory plan's ring buffers): where the GPU cannot hold it, the
planner takes the next split even where the pure ring would be faster. All figures predicted (H100 SXM profile).
"""

import pytest

from longctx.memory_plan.calibration import LLAMA_8B, arch_config
from longctx.memory_plan.inputs import PlanInputs
from longctx.memory_plan.mesh_choice import candidate, checkpointing_kind, choice_lines, ranked
from longctx.training.metrics.hardware import PROFILES

K = 1024
HW = PROFILES["h100-sxm"]
CONFIG = arch_config(LLAMA_8B)
BASE = PlanInputs(
    seq_len=0, sp=16, num_gpus=16, gpus_per_node=8, offload_optimizer=False, offload_params=False, tiled_mlp=True,
    act_offload=False, grad_ckpt=True, kernels="liger",
)  # fmt: skip
PLENTY = 1000.0  # GiB: every variant fits
RINGS = (2, 4, 8, 16)  # R of U x R = 16 (U = 16 / R divides 32 heads and a node's 8 GPUs)


def by_split(seq: int) -> dict:
    """The launch at `seq` tokens a row for each ring size, the other settings the launch's."""
    return {r: candidate(CONFIG, BASE.but(seq_len=seq, ring=r), HW, None) for r in RINGS}


def planner(seq: int, limit: float):
    """The planner's ranking at `seq` tokens, of the variants with the launch's checkpointing and optimizer (the
    splits: what this test is about)."""
    found = ranked(CONFIG, BASE.but(seq_len=seq), HW, limit)
    return [
        c for c in found if checkpointing_kind(c.inputs) == "full checkpointing" and not c.inputs.offload_optimizer
    ]


def model_prefers_pure_ring(seq: int) -> bool:
    """What the terms say: the pure ring (U1 x R16) wins when its exposed ring traffic is below what it saves in the
    all-to-all against the best other split, the rest of the step being alike (same FLOPs, same ZeRO traffic)."""
    c = by_split(seq)
    pure = c[16].time.components
    best_other = min((c[r] for r in (2, 4, 8)), key=lambda x: x.time.step_s).time.components
    saving = best_other["all_to_all"] - pure["all_to_all"]
    extra = pure["ring_exposed"] - best_other["ring_exposed"] + pure["zero_exposed"] - best_other["zero_exposed"]
    extra += pure["attention"] + pure["recompute"] - best_other["attention"] - best_other["recompute"]
    return extra < saving


def test_the_choice_is_the_fastest_that_fits():
    found = ranked(CONFIG, BASE.but(seq_len=256 * K), HW, 30.0)
    assert found and all(c.gpu_gib <= 30.0 for c in found)
    assert [c.time.step_s for c in found] == sorted(c.time.step_s for c in found)
    lines = choice_lines(found[-1], found)
    slower = found[1].time.step_s / found[0].time.step_s - 1
    assert found[0].label in lines[0] and f"{slower:+.1%}" in lines[1] and found[1].label in lines[1]


def test_the_pure_rings_traffic_is_exposed_at_short_rows_and_hidden_at_long_ones():
    short, long = by_split(32 * K)[16].time, by_split(256 * K)[16].time
    assert short.components["ring_exposed"] > 0 and short.overlapped["ring"] > short.components["ring_exposed"]
    assert long.components["ring_exposed"] == 0 and long.overlapped["ring"] > 0


def test_the_choice_flips_where_the_model_says():
    """Over lengths from 24K to 160K, the planner takes the pure ring exactly where its terms say it is faster, and
    the flip happens inside the range (below it the ring's traffic outweighs its all-to-all saving)."""
    chosen, said = [], []
    for seq in range(24 * K, 160 * K + 1, 8 * K):
        chosen.append(planner(seq, PLENTY)[0].inputs.ring == 16)
        said.append(model_prefers_pure_ring(seq))
    assert chosen == said
    assert not chosen[0] and chosen[-1], "the flip should lie inside 24K-160K"
    flip = chosen.index(True)
    assert all(chosen[flip:]) and not any(chosen[:flip])  # one flip, from split to pure ring


def test_memory_takes_the_pure_ring_away_where_it_would_be_fastest():
    seq = 512 * K
    c = by_split(seq)
    assert planner(seq, PLENTY)[0].inputs.ring == 16
    limit = (c[16].gpu_gib + c[8].gpu_gib) / 2  # U2 x R8 fits, U1 x R16 does not
    assert c[8].gpu_gib < limit < c[16].gpu_gib
    found = planner(seq, limit)
    assert found[0].inputs.ring == 8 and all(f.inputs.ring != 16 for f in found)


@pytest.mark.parametrize("recipe", ["llama8b-256k", "qwen3.5-27b-256k-2x8"])
def test_make_plan_prints_the_choice_and_its_runner_up(recipe, capsys):
    from longctx.commands.validate import main

    main(["plan", recipe, "--intended", "--gpu-memory-gb", "80"])
    out = capsys.readouterr().out
    assert "planner's choice (fastest predicted that fits): Ulysses" in out
    assert "runner-up: Ulysses" in out and "the recipe's own" in out
