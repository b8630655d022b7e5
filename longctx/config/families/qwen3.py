"""Qwen3 dense and Qwen3-MoE (Qwen3-30B-A3B): full attention, optional sliding windows; routed experts."""

from longctx.config.families.common import FULL_ATTENTION, SLIDING_ATTENTION
from longctx.config.families.schema import Family, StandInTokens

QWEN3_TOKENS = StandInTokens(
    bos=None,  # Qwen3 adds no BOS
    eos="<|im_end|>",
    pad="<|endoftext|>",
    extra=("<|im_start|>", "<think>", "</think>", "<tool_call>", "</tool_call>"),
)
QWEN3_TEMPLATE = "recipes/assets/chat_templates/qwen3-training.jinja"

QWEN3 = Family(
    name="Qwen3",
    model_types=("qwen3",),
    layer_types=(FULL_ATTENTION, SLIDING_ATTENTION),
    snapshots=("Qwen/Qwen3-4B", "Qwen/Qwen3-8B", "Qwen/Qwen3-32B"),
    recipes=(
        ("qwen8b-128k", "qwen3-8b/sft-128k-sp4"),
        ("qwen8b-dpo-128k", "qwen3-8b/dpo-128k-sp8"),
        ("qwen8b-grpo-64k", "qwen3-8b/grpo-64k-sp4"),
        ("qwen8b-grpo-128k", "qwen3-8b/grpo-128k-sp8"),
        ("qwen32b-256k", "qwen3-32b/sft-256k-2x8-sp8-dp2"),
    ),
    training_template=QWEN3_TEMPLATE,
    stand_in_tokens=QWEN3_TOKENS,
    parity_tests=("tests/parity/test_sp_parity.py",),
)

QWEN3_MOE = Family(
    name="Qwen3-MoE",
    model_types=("qwen3_moe",),
    layer_types=(FULL_ATTENTION, SLIDING_ATTENTION),
    snapshots=("Qwen/Qwen3-30B-A3B",),
    recipes=(("qwen30b-a3b-256k", "qwen3-30b-a3b/sft-256k-sp8-offload-optimizer"),),
    training_template=QWEN3_TEMPLATE,  # Qwen3-30B-A3B: the Qwen3 tokenizer and chat template
    stand_in_tokens=QWEN3_TOKENS,
    parity_tests=("tests/parity/test_moe_router_parity.py",),
)
