"""Gemma 4 (transformers 5.23's models/gemma4): five sliding-window layers for every global one, which differ in
head size and KV heads; keys = values on the global layers; KV shared across the last layers of the small models;
per-layer embeddings; routed experts beside the dense MLP (26B-A4B).

Under Ulysses SP each layer is split by its own heads
(longctx/training/sequence_parallel/per_layer_ulysses.py: DeepSpeed 0.19.8 builds one head size and KV head count
for every layer, and transformers refuses to give it one), and the
sliding window is applied per document by the sdpa kernels from position_ids, never by the 4D mask DeepSpeed's
adapter drops. Exact at sp=1, 2 and 4 on packed rows (tests/parity/test_gemma4_parity.py). FlashAttention is refused
(longctx/config/rules/attention/head_shapes.py): its kernels stop at head_dim 256 and the global layers' is 512.
"""

from longctx.config.families.schema import SDPA, Family, LayerType, StandInTokens

# the chat template's markers (its `eot_token` is <turn|>, which ends every turn)
TURN_TOKENS = ("<|turn>", "<turn|>", "<|channel>", "<channel|>", "<|think|>", "<|tool_call>", "<tool_call|>")
TURN_TOKENS += ("<|tool_response>", "<tool_response|>", "<|tool>", "<tool|>", '<|"|>', "<|image|>")
PER_LAYER_HEADS = "Ulysses by this layer's own heads (longctx/training/sequence_parallel/per_layer_ulysses.py)"

GEMMA4 = Family(
    name="Gemma 4",
    model_types=("gemma4", "gemma4_text"),
    layer_types=(
        LayerType(
            name="sliding_attention",
            mixer="softmax",
            under_sp=PER_LAYER_HEADS + "; the window applied per document by the sdpa kernels of "
            "longctx/training/attention/ (never by a 4D mask, which DeepSpeed's Ulysses adapter discards)",
            proven=(SDPA,),
        ),
        LayerType(
            name="full_attention",
            mixer="softmax",
            under_sp=PER_LAYER_HEADS + " (global_head_dim, num_global_key_value_heads, keys = values); packed "
            "documents kept apart by the isolated sdpa, per document on a GPU where head_dim passes the varlen "
            "kernel's 256",
            proven=(SDPA,),
        ),
    ),
    snapshots=("google/gemma-4-31B-it",),
    recipes=(("gemma4-31b-128k", "gemma-4-31b/sft-128k-sp8"),),
    training_template="recipes/assets/chat_templates/gemma4-training.jinja",
    stand_in_tokens=StandInTokens(  # google/gemma-4-*-it tokenizer_config.json: <bos> 2, <eos> 1, <pad> 0
        bos="<bos>",  # the tokenizer prepends it; the template renders it, and apply_chat_template adds no second
        eos="<eos>",
        pad="<pad>",
        extra=TURN_TOKENS,
    ),
    runtime_patches=(
        "deepspeed.runtime.sequence_parallel.ulysses_sp.UlyssesSPAttentionHF.register_with_transformers",
        "deepspeed.runtime.sequence_parallel.ulysses_sp.UlyssesSPAttentionHF.forward",
    ),
    parity_tests=("tests/parity/test_gemma4_parity.py",),
)
