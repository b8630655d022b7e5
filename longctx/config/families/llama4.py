"""Llama 4 (Scout, Maverick): refused under SP. Its RoPE layers attend within fixed chunks of
`attention_chunk_size` tokens (transformers 5.23's `chunked_attention` layer type); its NoPE layers attend over
everything with a position-dependent query temperature."""

from longctx.config.families.schema import Family, LayerType

TRAIN_AT_SP1 = "Train it at sp=1 (an accelerate config without SP)"

LLAMA4 = Family(
    name="Llama 4",
    model_types=("llama4", "llama4_text"),
    layer_types=(
        LayerType(
            name="chunked_attention",
            mixer="softmax",
            under_sp="not exact: the chunk is carried only by the attention mask",
            refused="its chunks (`attention_chunk_size` tokens) exist only in the attention mask: under Ulysses SP, "
            "sdpa gets no mask (DeepSpeed's adapter discards 4D masks) and flex's block mask is causal only, so every "
            "chunked layer would attend over the whole sequence; and its decoder layer does not hand position_ids to "
            "the attention, which DeepSpeed 0.19.8's Ulysses asserts at the first forward, after the weights are "
            f"loaded. {TRAIN_AT_SP1}",
        ),
        LayerType(
            name="full_attention",
            mixer="softmax",
            under_sp="not proven: NoPE layers with a position-dependent query temperature",
            refused="no parity test proves its NoPE layers (attention temperature from position_ids) under SP, and "
            f"the model's chunked layers cannot run under it. {TRAIN_AT_SP1}",
        ),
    ),
)
