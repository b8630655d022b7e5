"""Llama 3.x (and the repository's tiny Llama, and SmolLM2-135M of the tiny GRPO recipe): dense, full attention on
every layer."""

from longctx.config.families.common import FULL_ATTENTION
from longctx.config.families.schema import Family, StandInTokens

LLAMA = Family(
    name="Llama 3.x",
    model_types=("llama",),
    layer_types=(FULL_ATTENTION,),
    snapshots=("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-70B-Instruct"),
    recipes=(
        ("tiny-2k", "tiny-llama/sft-2k-cpu-sp2"),
        ("tiny-dpo-2k", "tiny-llama/dpo-2k-cpu-sp2"),
        ("tiny-grpo", "smollm2-135m/grpo-passkey-cpu-sp3"),
        ("llama8b-grpo-64k", "llama3.1-8b/grpo-64k-sp4"),
        ("llama8b-grpo-128k", "llama3.1-8b/grpo-128k-sp8"),
        ("llama8b-dpo-64k", "llama3.1-8b/dpo-64k-sp4"),
        ("llama8b-dpo-lora-64k", "llama3.1-8b/dpo-lora-64k-sp4"),
        ("llama8b-dpo-128k", "llama3.1-8b/dpo-128k-sp8"),
        ("llama8b-dpo-lora-128k", "llama3.1-8b/dpo-lora-128k-sp8"),
        ("llama8b-32k", "llama3.1-8b/sft-32k-1gpu-offload"),
        ("llama8b-h200-192k", "llama3.1-8b/sft-192k-1gpu-h200"),
        ("llama8b-h100-256k", "llama3.1-8b/sft-256k-1gpu-h100"),
        ("llama8b-128k", "llama3.1-8b/sft-128k-sp4"),
        ("llama8b-256k", "llama3.1-8b/sft-256k-sp8"),
        ("llama8b-lora-256k", "llama3.1-8b/lora-256k-sp8"),
        ("llama8b-1m", "llama3.1-8b/sft-1m-4x8-sp8-dp4"),
        ("llama8b-2m", "llama3.1-8b/sft-2m-4x8-u8r4"),
        ("llama70b-128k", "llama3.1-70b/sft-128k-2x8-sp8-dp2"),
    ),
    training_template="recipes/assets/chat_templates/llama3.1-instruct-training.jinja",
    stand_in_tokens=StandInTokens(
        bos="<|begin_of_text|>",
        eos="<|eot_id|>",
        pad=None,  # Llama 3.1 has no pad token: the collators fall back to EOS, which is what runs for real
        extra=("<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|python_tag|>"),
    ),
    parity_tests=("tests/parity/test_sp_parity.py",),
)
