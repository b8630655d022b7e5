"""Mixture-of-experts sizes and rules: the memory plan counts every expert in model states and the active ones in
activations (longctx/memory_plan/arch.py); TiledMLP is refused on MoE (longctx/config/rules/alst.py)."""

import json
from types import SimpleNamespace

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from longctx.config.paths import ARCHITECTURES_DIR
from longctx.config.rules.alst import alst_problems, routed_experts
from longctx.memory_plan.arch import Arch

SFT = SimpleNamespace(activation_checkpointing=True, gradient_checkpointing=True, use_liger_kernel=False)


def recipe(config_source: str, tiled: bool = True):
    return SimpleNamespace(
        tiled_mlp=tiled,
        tiled_mlp_shards=None,
        activation_checkpoint_offload=False,
        model_init="random",
        model_config_source=config_source,
        model_config_overrides=None,
    )


def test_tiled_mlp_on_moe_is_refused_with_the_fix():
    model = SimpleNamespace(model_name_or_path="recipes/assets/tiny-llama")
    problems = alst_problems(recipe("tests/recipes/models/tiny-qwen3-moe"), SFT, model, None, "r.yaml")
    assert [p.key for p in problems] == ["tiled_mlp"]
    assert "8 experts" in problems[0].message and "tiled_mlp: false" in problems[0].fix


def test_tiled_mlp_on_dense_and_moe_without_it_pass():
    model = SimpleNamespace(model_name_or_path="recipes/assets/tiny-llama")
    assert alst_problems(recipe(None), SFT, model, None, "r.yaml") == []
    assert alst_problems(recipe("tests/recipes/models/tiny-qwen3-moe", False), SFT, model, None, "r.yaml") == []


def test_routed_experts_reads_the_shipped_snapshot():
    assert routed_experts("Qwen/Qwen3-30B-A3B", None) == 128
    assert routed_experts("Qwen/Qwen3-8B", None) == 0


def test_memory_plan_counts_every_expert_in_states_and_the_active_ones_in_activations():
    snapshot = ARCHITECTURES_DIR / "Qwen/Qwen3-30B-A3B"
    arch = Arch.from_config(json.loads((snapshot / "config.json").read_text()))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(snapshot))
    # 30.5B: all 128 experts of 48 layers (Arch leaves out Qwen3's q/k norms, 256 weights a layer)
    assert arch.params == sum(p.numel() for p in model.parameters()) - 48 * 256
    assert arch.active_intermediate == 8 * 768  # a token runs 8 experts of width 768 (the dense size is 6144)


def test_dense_layers_of_a_moe_model_keep_their_mlp():
    """Qwen3-MoE's `mlp_only_layers` and `decoder_sparse_step` leave some layers dense: the plan counts their MLP,
    and the MoE layers' experts (all in states, top-k of them active), against the model built on the meta device."""
    from transformers import Qwen3MoeConfig

    sizes = {"hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32, "vocab_size": 100}
    heads = {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "tie_word_embeddings": False}
    moe = {"num_experts": 4, "num_experts_per_tok": 2, "mlp_only_layers": [1], "decoder_sparse_step": 2}
    config = {"model_type": "qwen3_moe", "num_hidden_layers": 4, **sizes, **heads, **moe}
    arch = Arch.from_config(config)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(Qwen3MoeConfig(**config))
    assert arch.moe_layers == 1  # layer 3: 0 and 2 are off the step, 1 is in mlp_only_layers
    total = sum(p.numel() for p in model.parameters()) - 4 * 2 * 16  # less Qwen3's q/k norms (head_dim each)
    assert arch.params == total
    experts = sum(p.numel() for n, p in model.named_parameters() if ".mlp.experts." in n)
    assert arch.active_params == total - experts // 2  # 2 of 4 experts idle per token


def test_memory_plan_counts_qwen35_moes_shared_expert_as_always_active():
    """Qwen3.5-35B-A3B (a multimodal checkpoint: its language model) on the meta device: 256 routed experts, top-8,
    and a shared expert with a one-output gate beside them in each of the 40 layers. States count every parameter
    (Arch leaves out the q/k norms of the 10 softmax layers, head_dim each), active parameters all but the 248 idle
    routed experts; the shared expert stays active, in parameters and in the activations' intermediate width."""
    snapshot = ARCHITECTURES_DIR / "Qwen/Qwen3.5-35B-A3B"
    arch = Arch.from_config(json.loads((snapshot / "config.json").read_text()))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(snapshot))
    built = sum(p.numel() for p in model.parameters()) - 10 * 2 * 256
    routed = sum(p.numel() for n, p in model.named_parameters() if ".mlp.experts." in n)
    assert arch.params == built  # 34.66B
    assert arch.active_params == built - routed * (256 - 8) // 256  # 3.45B
    assert arch.active_intermediate == 8 * 512 + 512  # eight experts of width 512 and the shared expert of 512
