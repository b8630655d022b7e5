"""The memory plan and the MFU count of hybrid (Qwen3.5) models, held to what the models really have and allocate.

Parameters against the models transformers builds (Qwen3.5-27B on the meta device, a miniature with PEFT's LoRA
adapters); a Gated DeltaNet layer's working set against the peak of allocated bytes of its recompute + backward on
CPU (longctx/memory_plan/measure.py, the reference kernel, bf16, Qwen3.5's head dims); the FLOPs' matmul part
against the model's own linear layers, and the softmax pair term over the softmax layers only.
"""

import json

import pytest
import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, Qwen3_5TextConfig
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5GatedDeltaNet

from longctx.config.model.linear_layers import LinearAttention
from longctx.config.paths import ARCHITECTURES_DIR
from longctx.memory_plan import linear_attention
from longctx.memory_plan.arch import Arch
from longctx.memory_plan.measure import peak_bytes
from longctx.training.layers.linear_attention import ShardedRows, convert_layers
from longctx.training.metrics.flops import FlopCounts

QWEN35 = ARCHITECTURES_DIR / "Qwen/Qwen3.5-27B"


def miniature(**changes) -> Qwen3_5TextConfig:
    base = {
        "vocab_size": 128, "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 6,
        "linear_key_head_dim": 16, "linear_value_head_dim": 16, "num_hidden_layers": 4,
        "layer_types": ["linear_attention"] * 3 + ["full_attention"], "use_cache": False,
    }  # fmt: skip
    return Qwen3_5TextConfig(**{**base, **changes})


def test_parameters_of_qwen35_27b_are_the_models():
    """Every parameter transformers builds for the language model, bar the 2 x 16 q/k norm vectors of head_dim."""
    config = AutoConfig.from_pretrained(QWEN35)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    built = sum(p.numel() for p in model.parameters())
    arch = Arch.from_config(json.loads((QWEN35 / "config.json").read_text()))
    assert arch.linear_layers == 48 and arch.attention_gate
    assert built - arch.params == 16 * 2 * 256  # q_norm and k_norm of the 16 softmax layers


def test_lora_parameters_are_peft_all_linear():
    from peft import LoraConfig, get_peft_model

    config = miniature()
    model = get_peft_model(AutoModelForCausalLM.from_config(config), LoraConfig(r=4, target_modules="all-linear"))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert Arch.from_config(config.to_dict()).lora_params(4) == trainable


def layer_peak(tokens: int, heads=(2, 6), dim: int = 128) -> float:
    """Peak bytes of one converted Gated DeltaNet layer's forward + backward on CPU in bf16 (the reference kernel)."""
    config = miniature(
        hidden_size=256, linear_num_key_heads=heads[0], linear_num_value_heads=heads[1], linear_key_head_dim=dim,
        linear_value_head_dim=dim,
    )  # fmt: skip
    torch.manual_seed(0)
    holder = nn.Module()
    holder.layers = nn.ModuleList([Qwen3_5GatedDeltaNet(config, 0).to(torch.bfloat16)])
    rows = ShardedRows()
    convert_layers(holder, rows)
    rows.update(None, (1, tokens), "cpu", None)
    x = torch.randn(1, tokens, 256, dtype=torch.bfloat16, requires_grad=True)

    def run():
        out = holder.layers[0](x)
        out.backward(torch.ones_like(out))

    peak, _ = peak_bytes(run)
    return peak - sum(p.numel() * p.element_size() for p in holder.parameters())


@pytest.mark.parametrize("tokens", [512, pytest.param(2048, marks=pytest.mark.slow)])
def test_linear_attention_working_set(tokens):
    """Qwen3.5's head dims (dk = dv = 128) and value/key ratio (3); linear in the sequence, no S^2 term."""
    lin = LinearAttention.from_config(miniature(linear_num_key_heads=2, linear_num_value_heads=6).to_dict())
    lin = LinearAttention(1, 2, 6, 128, 128, lin.conv_kernel)
    planned = linear_attention.working_set(lin, tokens, 1, "reference")
    measured = layer_peak(tokens)
    assert abs(measured / planned - 1) <= 0.10, f"measured {measured / 2**20:.1f} MiB, planned {planned / 2**20:.1f}"


def test_flops_count_the_models_linear_layers_and_softmax_pairs_only():
    config = miniature()
    model = AutoModelForCausalLM.from_config(config)
    weights = sum(m.weight.numel() for m in model.model.layers.modules() if isinstance(m, nn.Linear))
    counts = FlopCounts.from_config(config)
    lin = LinearAttention.from_config(config.to_dict())
    recurrence = 3 * lin.forward_flops_per_token()  # three linear layers: recurrence and convolution, per token
    assert counts.layers == pytest.approx(2 * weights + recurrence, rel=1e-12)
    assert counts.attention == 4 * 1 * 4 * 16  # one softmax layer, 4 query heads of 16: pairs count there only
    assert counts.head == 2 * 128 * 64
