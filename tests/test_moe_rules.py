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
