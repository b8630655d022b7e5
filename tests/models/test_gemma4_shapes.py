"""Gemma 4's layers of different shapes, as the plan, the MFU count, the miniature and the rules read them.

Each count is held to transformers' own model: parameters to a meta-device build, FLOPs to torch's FlopCounterMode
over a real forward, the per-layer shapes to transformers' `per_layer_config`. The shapes come from the published
config.json form (`global_head_dim`, `num_global_key_value_heads`) or the form transformers 5.23 saves
(`per_layer_config`); both must read alike.
"""

import json

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from longctx.config.model.layer_shapes import layer_shapes
from longctx.config.paths import ARCHITECTURES_DIR
from longctx.config.rules.attention.head_shapes import flash_head_dim_problems, layer_type_heads, sp_head_problems
from longctx.memory_plan.arch import Arch
from longctx.miniature import miniature_config
from longctx.training.metrics.flops import FlopCounts
from tests.helpers import REPO

SNAPSHOT = ARCHITECTURES_DIR / "google" / "gemma-4-31B-it"
TINY = REPO / "tests" / "recipes" / "tiny-gemma4"  # PLE, KV sharing, experts, double-wide MLP: every extra part


def text(folder) -> dict:
    config = json.loads((folder / "config.json").read_text())
    return config.get("text_config") or config


def language_model_params(folder) -> int:
    """Parameters of what trains on text: the language model and its head (a vision tower never runs)."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder))
    decoder = sum(p.numel() for p in model.get_decoder().parameters())
    head = model.get_output_embeddings().weight
    return decoder + (0 if head is model.get_input_embeddings().weight else head.numel())


@pytest.mark.parametrize("folder", [SNAPSHOT, TINY], ids=["31B", "tiny"])
def test_plan_parameters_are_the_models(folder):
    """Every parameter, layer by layer: 512-wide global heads with keys = values, KV-sharing layers without k/v,
    experts and router beside the dense MLP, the double-wide MLP of sharing layers, PLE's table and projections."""
    assert Arch.from_config(text(folder)).params == language_model_params(folder)


def test_31b_is_its_published_size():
    arch = Arch.from_config(text(SNAPSHOT))
    assert arch.params == pytest.approx(30.7e9, rel=2e-3)  # the model card's 30.7B (a 550M vision tower besides)


@pytest.mark.parametrize("folder", [SNAPSHOT, TINY], ids=["31B", "tiny"])
def test_both_config_forms_read_alike_and_match_transformers(folder):
    """The published keys and transformers' saved per-layer overrides give the same shapes, and each layer's head
    size and KV heads are what transformers builds it with."""
    config = AutoConfig.from_pretrained(folder).get_text_config()
    published, saved = layer_shapes(text(folder)), layer_shapes(config.to_dict())
    assert published == saved
    built = [(c.num_attention_heads, c.num_key_value_heads, c.head_dim) for c in config.per_layer_config]
    assert [(a.heads, a.kv_heads, a.head_dim) for a in published.attention] == built


def test_mfu_count_is_what_the_forward_multiplies():
    """torch's FlopCounterMode over a forward of the miniature (eager attention scores every (query, key) pair of
    the T x T square, so the pair terms enter at T^2): per-token matmuls at each layer's own width, its top-2 of 4
    experts, PLE's projections and the head, plus 4 x H x d per pair at each layer's own head size."""
    from torch.utils.flop_counter import FlopCounterMode

    config = AutoConfig.from_pretrained(TINY)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager", experts_implementation="eager")
    tokens = 12  # under the 16-token window: the sliding layers' eager scores are the square too
    with FlopCounterMode(display=False) as counter:
        model(input_ids=torch.randint(0, 512, (1, tokens)))
    counts = FlopCounts.from_config(config)
    square = (counts.attention + counts.sliding) * tokens * tokens
    assert counter.get_total_flops() == tokens * (counts.layers + counts.head) + square
    assert counts.sliding == 4 * 4 * 16 * 2 and counts.attention == 4 * 4 * 32 * 2  # 2 layers each: d 16 and 32


def test_attention_working_set_is_the_widest_layers():
    """At sp=8 a 31B rank holds 4 query heads and, of the global layers, one of the 4 KV heads (replicated 2x):
    (2 x 4 + 2 x 1) x 512 = 5,120 a token, more than a sliding layer's (2 x 4 + 2 x 2) x 256 = 3,072."""
    arch = Arch.from_config(text(SNAPSHOT))
    assert arch.attention_width(8) == 5120


def test_every_layer_type_must_fit_sp():
    """Global layers with KV heads of their own that sp cannot split are refused, naming the layer type; the
    31B fits every sp that divides its 32 heads."""
    odd = {**text(TINY), "num_attention_heads": 12, "num_key_value_heads": 4, "num_global_key_value_heads": 3}
    problems = sp_head_problems(odd, 2, "accelerate_configs/cpu-sp2.yaml", "odd")
    assert len(problems) == 1 and "full_attention layers (12 query / 3 KV heads)" in problems[0].message
    assert "use an sp that fits every layer type: 1, 12" in problems[0].fix  # 3 splits neither 4 nor 3 | 3
    assert all(sp_head_problems(text(SNAPSHOT), sp, "", "") == [] for sp in (1, 2, 4, 8, 16, 32))
    assert layer_type_heads(text(SNAPSHOT)) == {"sliding_attention": (32, 16, 256), "full_attention": (32, 4, 512)}


def test_flash_attention_is_refused_for_512_wide_heads():
    assert flash_head_dim_problems(text(SNAPSHOT), "sdpa", "r.yaml", "gemma") == []
    (problem,) = flash_head_dim_problems(text(SNAPSHOT), "flash_attention_2", "r.yaml", "gemma")
    assert "stops at head_dim 256" in problem.message and "head_dim 512" in problem.message
    assert "attn_implementation: sdpa" in problem.fix


@pytest.mark.parametrize("sp", [1, 2, 4, 8])
def test_miniature_keeps_what_ulysses_splits_differently(sp):
    """The rehearsal's and the probe's miniature of the 31B: global layers twice as wide as the sliding ones, and
    their KV heads split or replicated at sp as the real run's (4 KV heads: split up to sp=4, replicated at 8)."""
    config = AutoConfig.from_pretrained(SNAPSHOT).get_text_config()
    mini = type(config).from_dict(miniature_config(config.to_dict(), sp, 256))
    layers = zip(mini.layer_types, mini.per_layer_config, strict=True)
    heads = {kind: (layer.num_key_value_heads, layer.head_dim) for kind, layer in layers}
    assert heads["full_attention"] == (min(sp, 4), 2 * heads["sliding_attention"][1])
    assert mini.attention_k_eq_v and mini.final_logit_softcapping == 30.0
