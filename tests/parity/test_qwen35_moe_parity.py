"""The SP parity gate on a miniature Qwen3.5-MoE: sp=1 == sp=2 == sp=4, router aux loss on, two negative controls.

The miniature (tests/recipes/models/tiny-qwen3.5-moe: 2 Gated DeltaNet + 2 gated softmax-attention layers, each with
a MoE block of 8 experts, top-2, and a shared expert; 4 linear key / 8 linear value heads, 4 query / 2 KV heads,
random fp32 weights) trains 4 SGD steps through the real stack (`accelerate launch` of recipes/sft.py, DeepSpeed
ZeRO-3, Ulysses over gloo) with `router_aux_loss_coef: 0.5` (tests/recipes/qwen35-moe-parity.yaml), on the Qwen3.5
gate's rows: packed rows whose document boundaries fall on both sides of every shard edge and one-document rows
(tests/parity/test_qwen35_parity.py). Two things SP would change are both in play: the Gated DeltaNet recurrence and
convolution along the sequence (longctx/training/layers/linear_attention.py makes them exact) and the router's
load-balancing loss, a product of two means over the whole micro-batch (longctx/training/layers/router_aux.py sums
the SP group's router statistics). Per-step loss, grad norm, the logged aux loss and the trained weights must equal
sp=1's at the tolerances of tests/parity/test_sp_parity.py and tests/parity/test_moe_router_parity.py. Negative
controls (`slow`): transformers' own Gated DeltaNet under SP (tests/helpers/controls/stock_linear_attention.py) and
each rank's own shard aux (tests/helpers/controls/shard_router_aux.py) must each fail the gate. In the quick tier:
sp=1 and sp=2, and in-process that the family's router is the one the exact aux loss records and that the probe and the
rehearsal build the snapshot in miniature (the stock Gated DeltaNet's leak in-process is in
tests/attention/test_linear_attention_sp.py); the leak probe on this recipe at sp=1 and 2 is `slow`.
"""

import json

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe

from longctx.config.paths import ARCHITECTURES_DIR
from longctx.training.layers.router_aux import recorded_router_logits, router_class, router_sums
from tests.helpers.launching.run_cache import run_cache
from tests.parity.test_moe_router_parity import aux_mismatches
from tests.parity.test_qwen35_parity import write_rows
from tests.parity.test_sp_parity import mismatches, train

RECIPE = "tests/recipes/qwen35-moe-parity.yaml"
MODEL = "tests/recipes/models/tiny-qwen3.5-moe"
STEPS = 4


def moe_run(tmp, data, sp: int, script: str = "recipes/sft.py"):
    return train(tmp, data, sp, script, recipe=RECIPE, steps=STEPS)


runs = run_cache("qwen35-moe", write_rows, moe_run)


def test_the_exact_aux_loss_records_this_familys_router():
    """What makes the SP aux loss exact for this family: the router the model itself records as `router_logits`
    (Qwen3_5MoeTopKRouter) is the one hooked, once per MoE layer, and its statistics over two halves of a
    sequence add up to transformers' own aux loss on the whole, which the mean of the halves' aux losses does not."""
    config = AutoConfig.from_pretrained(MODEL)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    assert router_class(model) == (modeling_qwen3_5_moe.Qwen3_5MoeTopKRouter, 0)
    ids = torch.randint(0, config.vocab_size, (1, 64), generator=torch.Generator().manual_seed(1))
    with recorded_router_logits(model) as logits:
        outputs = model(input_ids=ids, output_router_logits=True)
    assert len(logits) == config.num_hidden_layers
    assert all(torch.equal(a, b) for a, b in zip(logits, outputs.router_logits, strict=True))
    experts, top_k = config.num_experts, config.num_experts_per_tok
    halves = [router_sums([g[s] for g in logits], experts, top_k, None) for s in (slice(0, 32), slice(32, 64))]
    counts, probs, rows = (a + b for a, b in zip(*halves, strict=True))
    whole = modeling_qwen3_5_moe.load_balancing_loss_func(outputs.router_logits, experts, top_k)
    assert torch.allclose(experts * torch.sum(counts / rows * probs / rows), whole, rtol=1e-6)
    per_half = [experts * torch.sum(c / r * p / r) for c, p, r in halves]
    assert abs(sum(per_half) / 2 - whole) > 1e-4  # a shard's own aux is another number


def test_the_probe_and_the_rehearsal_build_the_snapshot_in_miniature():
    """Qwen3.5-35B-A3B has no dense MLP width (`intermediate_size`), a shared expert and 256 experts: the miniature
    the probe and the rehearsal build (longctx/miniature.py) keeps the 3:1 layer pattern, 8 experts with half of them
    routed, and the shared expert's width equal to a routed expert's as in the real model; transformers builds it."""
    from longctx.miniature import miniature_config

    config = json.loads((ARCHITECTURES_DIR / "Qwen/Qwen3.5-35B-A3B/config.json").read_text())
    mini = miniature_config(config, 2, 256)
    assert mini["model_type"] == "qwen3_5_moe_text" and "intermediate_size" not in mini
    assert mini["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
    assert (mini["num_experts"], mini["num_experts_per_tok"]) == (8, 4)
    assert mini["shared_expert_intermediate_size"] == mini["moe_intermediate_size"]
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**mini))
    assert type(model) is modeling_qwen3_5_moe.Qwen3_5MoeForCausalLM


# slow (not in `make test-quick`): in the quick tier the Gated DeltaNet layers are checked by the probe's parity
# (tests/attention/test_isolation_probe.py) and the exact aux loss by gpt-oss's gate and the unit tests above
@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize("sp", [2, 4])
def test_qwen35_moe_sp_matches_sp1(runs, sp):
    trained = runs(sp)
    assert f"[linear-attention] 2 Gated DeltaNet layers: heads split across sp={sp}" in trained[2]
    assert mismatches(runs(1), trained) + aux_mismatches(runs(1), trained) == []


@pytest.mark.distributed
@pytest.mark.slow
def test_losses_and_aux_are_real_training(runs):
    """The gate compares something: finite losses and aux losses that change step to step, gradients well above 0."""
    history, _, _ = runs(1)
    losses, aux = [row["loss"] for row in history], [row["aux_loss"] for row in history]
    assert all(0 < loss < 20 for loss in losses) and len(set(losses)) == STEPS
    assert all(a > 1.0 for a in aux) and len(set(aux)) == STEPS  # E x sum f_e P_e: 1 balanced, top-2 counts twice
    assert all(row["grad_norm"] > 0.1 for row in history)


@pytest.mark.distributed
@pytest.mark.slow
def test_gate_catches_the_stock_linear_attention_at_sp2(runs):
    """Negative control: transformers' own Gated DeltaNet under Ulysses (each rank restarts the state at its shard,
    packed documents run into each other) fails the gate, the exact router aux loss still on."""
    stock = runs(2, "tests/helpers/controls/stock_linear_attention.py")
    assert "[linear-attention] switched OFF" in stock[2]
    assert mismatches(runs(1), stock), "the stock Gated DeltaNet under SP went unnoticed"


@pytest.mark.distributed
@pytest.mark.slow
def test_gate_catches_per_shard_router_aux_at_sp2(runs):
    """Negative control: each rank adds its own shard's aux loss (the stock behaviour), the Gated DeltaNet layers
    exact: the gate fails on the loss and on the logged aux."""
    stock = runs(2, "tests/helpers/controls/shard_router_aux.py")
    assert "[linear-attention] 2 Gated DeltaNet layers: heads split across sp=2" in stock[2]
    assert mismatches(runs(1), stock), "each rank's own shard aux loss went unnoticed"


def probe(tmp_path, *flags) -> tuple[int, dict]:
    """The leak probe on the parity recipe's model (its miniature: a Gated DeltaNet and a softmax layer, each with a
    MoE block), with parity and the stock comparison."""
    from longctx.commands.probe import main

    out = tmp_path / "probe.json"
    code = main([RECIPE, "--json", str(out), "--parity", "--compare-stock", *flags])
    return code, json.loads(out.read_text())


@pytest.mark.slow  # ~2x the Qwen3.5 probe's time in the unit lane; in-process isolation: test_linear_attention_sp.py
def test_probe_at_sp1_isolates_and_the_stock_layers_leak(tmp_path):
    """In-process at sp=1: no packed document moves another's logits, packed loss and gradients equal the documents
    one by one; transformers' own Gated DeltaNet (stock) carries state from one packed document into the next."""
    code, report = probe(tmp_path)
    assert "[linear-attention] 1 Gated DeltaNet layers" in report["linear_attention"]
    assert code == 0 and report["leaks"] == [] and report["parity"] == []
    assert report["stock_leaks"] and any("stock packed sp=1" in f for f in report["stock_parity"])


@pytest.mark.distributed
@pytest.mark.slow  # `python -m longctx probe tests/recipes/qwen35-moe-parity.yaml --sp 2 --compare-stock`
def test_probe_at_sp2_isolates_and_the_stock_layers_leak(tmp_path):
    code, report = probe(tmp_path, "--sp", "2")
    assert report["sp"] == 2 and "across sp=2" in report["linear_attention"]
    assert code == 0 and report["leaks"] == [] and report["parity"] == [], report["leaks"] + report["parity"]
    assert report["stock_leaks"]
    assert any(f.startswith("stock unpacked sp=2 vs unpacked sp=1: loss") for f in report["stock_parity"])
