"""Qwen3.5 (and Qwen3-Next): three Gated DeltaNet layers for every gated softmax-attention layer."""

from longctx.config.families.common import FULL_ATTENTION
from longctx.config.families.schema import SDPA, Family, LayerType, StandInTokens

GATED_DELTANET = LayerType(
    name="linear_attention",
    mixer="linear",
    under_sp="the layer's own Ulysses split by linear key heads around the convolution and the recurrence, both "
    "restarted at every packed document (longctx/training/layers/linear_attention.py)",
    proven=(SDPA,),  # the softmax layers' implementation beside it; the linear layers run their own kernels
)
QWEN3_5_TOKENS = StandInTokens(  # Qwen3's chat tokens, plus the vision markers its template can emit
    bos=None,
    eos="<|im_end|>",
    pad="<|endoftext|>",
    extra=("<|im_start|>", "<think>", "</think>", "<tool_call>", "</tool_call>", "<|vision_start|>"),
)

QWEN3_5 = Family(
    name="Qwen3.5",
    model_types=("qwen3_5", "qwen3_5_text"),
    layer_types=(GATED_DELTANET, FULL_ATTENTION),
    snapshots=("Qwen/Qwen3.5-27B",),
    recipes=(
        ("qwen3.5-27b-256k", "qwen3.5-27b/sft-256k-sp8"),
        ("qwen3.5-27b-256k-2x8", "qwen3.5-27b/sft-256k-2x8-u8r2"),
        ("qwen3.5-27b-lora-256k", "qwen3.5-27b/lora-256k-sp8"),
    ),
    training_template="recipes/assets/chat_templates/qwen3.5-training.jinja",
    stand_in_tokens=QWEN3_5_TOKENS,
    gated_attention=True,
    linear_attention_class="transformers.models.qwen3_5.modeling_qwen3_5.Qwen3_5GatedDeltaNet",
    runtime_patches=("transformers.models.qwen3_5.modeling_qwen3_5.Qwen3_5GatedDeltaNet.forward",),
    parity_tests=("tests/parity/test_qwen35_parity.py",),
)

QWEN3_NEXT = Family(
    name="Qwen3-Next",
    model_types=("qwen3_next",),
    layer_types=(GATED_DELTANET, FULL_ATTENTION),
    gated_attention=True,
    linear_attention_class="transformers.models.qwen3_next.modeling_qwen3_next.Qwen3NextGatedDeltaNet",
    runtime_patches=("transformers.models.qwen3_next.modeling_qwen3_next.Qwen3NextGatedDeltaNet.forward",),
)

QWEN3_5_MOE = Family(  # Qwen3.5's layers with a routed MoE block (and a shared expert) in place of every MLP
    name="Qwen3.5-MoE",
    model_types=("qwen3_5_moe", "qwen3_5_moe_text"),
    layer_types=(GATED_DELTANET, FULL_ATTENTION),
    snapshots=("Qwen/Qwen3.5-35B-A3B",),
    recipes=(("qwen3.5-35b-a3b-256k", "qwen3.5-35b-a3b/sft-256k-sp8"),),
    training_template="recipes/assets/chat_templates/qwen3.5-training.jinja",  # the Qwen3.5 release's one template
    stand_in_tokens=QWEN3_5_TOKENS,
    gated_attention=True,
    linear_attention_class="transformers.models.qwen3_5_moe.modeling_qwen3_5_moe.Qwen3_5MoeGatedDeltaNet",
    runtime_patches=("transformers.models.qwen3_5_moe.modeling_qwen3_5_moe.Qwen3_5MoeGatedDeltaNet.forward",),
    parity_tests=("tests/parity/test_qwen35_moe_parity.py",),
)
