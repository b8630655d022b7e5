"""ALST memory features (longctx/training/memory/alst.py): same numbers with and without them, and their guards.

In-process tests compare loss and every gradient of the tiny Llama with each feature on and off; a
two-process gloo test checks the ZeRO-3 deadlock guard (every rank runs the same number of tiles); the
distributed test in tests/parity/test_sp_parity.py trains through the real launch (accelerate, DeepSpeed ZeRO-3,
Ulysses sp=2) with both features on against the gate's sp=2 run with both off (one launch more).
"""

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from longctx.config.rules.alst import alst_problems
from longctx.training.memory import alst
from tests.helpers.launching.ranks import spawn_ranks

TINY = "recipes/assets/tiny-llama"


def tiny_model():
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(TINY), attn_implementation="sdpa")
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model.train()


def loss_and_grads(model, seqlen: int = 100):
    ids = torch.randint(0, 512, (1, seqlen), generator=torch.Generator().manual_seed(1))
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


def assert_same(base, other, atol=1e-7):
    (l0, g0), (l1, g1) = base, other
    assert abs(l0 - l1) <= 1e-6 * abs(l0)
    worst = max((g0[k] - g1[k]).abs().max().item() for k in g0)
    assert worst <= atol, f"gradients differ by up to {worst:.2e}"


@pytest.mark.parametrize("shards", [None, 3, 7])
def test_tiled_mlp_same_loss_and_grads(shards):
    """100 tokens in 3 or 7 tiles do not divide: the padded last tile must not change anything."""
    base = loss_and_grads(tiny_model())
    model = tiny_model()
    assert alst.enable_tiled_mlp(model, shards) == 2
    assert_same(base, loss_and_grads(model))


def test_tiles_are_equal_and_as_many_as_agreed():
    """torch.chunk(5 rows, 4) gives 3 chunks; the padding guard makes it 4, so ZeRO-3 gathers match the count."""
    model = tiny_model()
    mlp = model.model.layers[0].mlp
    calls = []
    mlp.gate_proj.register_forward_pre_hook(lambda m, args: calls.append(args[0].shape[-2]))
    alst.enable_tiled_mlp(model, 4)
    x = torch.randn(1, 5, 64, requires_grad=True)
    mlp(x).sum().backward()
    assert calls == [2, 2, 2, 2] * 2, "forward and backward must each run exactly 4 equal tiles"


def test_offload_same_loss_and_grads_and_offloads_layer_inputs():
    base = loss_and_grads(tiny_model())
    model = tiny_model()
    hooks = alst.enable_activation_checkpoint_offload(model)
    assert_same(base, loss_and_grads(model), atol=0.0)
    assert hooks.offloaded == 2, "exactly one saved input per checkpointed layer goes to host memory"


def test_offload_without_checkpointing_is_refused():
    from types import SimpleNamespace

    recipe = SimpleNamespace(
        tiled_mlp=False,
        tiled_mlp_shards=None,
        activation_checkpoint_offload=True,
        model_config_source=None,
        model_config_overrides=None,
    )
    sft = SimpleNamespace(activation_checkpointing=False, gradient_checkpointing=False, use_liger_kernel=False)
    problems = alst_problems(recipe, sft, None, None, "r.yaml")
    assert problems and "gradient_checkpointing: true" in str(problems[0])


@pytest.mark.distributed
def test_shard_count_is_max_reduced_across_ranks(tmp_path):
    # Rank 0 holds a short shard (2 tiles of 64 tokens), rank 1 a long one (5 tiles): both must run 5.
    ranks = spawn_ranks("tests.helpers.workers.agree_shards", 2, tmp_path, timeout=120, args=("64", "128", "300"))
    assert [r["shards"] for r in ranks] == [5, 5]


def lora_model(reentrant: bool):
    """The tiny Llama with LoRA on every linear layer, checkpointed the way TRL does for PEFT + ZeRO-3."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(TINY), attn_implementation="sdpa")
    base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    base.enable_input_require_grads()
    config = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)
    return get_peft_model(base, config).train()


@pytest.mark.parametrize("reentrant", [True, False])
def test_features_with_lora_same_loss_and_grads(reentrant):
    """lora-256k-sp8: both features on LoRA layers (adapter weights in the tiles), both checkpoint kinds."""
    base = loss_and_grads(lora_model(reentrant))
    model = lora_model(reentrant)
    alst.enable_tiled_mlp(model, 3)
    hooks = alst.enable_activation_checkpoint_offload(model)
    on = loss_and_grads(model)
    assert set(on[1]) == set(base[1]) and any("lora_A" in name for name in on[1])
    assert_same(base, on)
    assert hooks.offloaded == 2
