"""DeepSeek-V3.2 (sparse attention through a lightning indexer) and DeepSeek-V4 (compressed and sparse attention,
eager only in transformers 5.23): both refused under SP."""

from longctx.config.families.common import INDEXED_ATTENTION
from longctx.config.families.schema import Family, LayerType

DEEPSEEK_V3_2 = Family(
    name="DeepSeek-V3.2",
    model_types=("deepseek_v32",),
    layer_types=(INDEXED_ATTENTION,),
    default_layer_type="indexed_attention",
)

# transformers 5.23's DeepseekV4PreTrainedModel: _supports_sdpa, _supports_flash_attn and _supports_flex_attn all
# False, so the model runs `eager`, which DeepSpeed's Ulysses refuses (it wraps sdpa and flash only); and its
# compressed branches pool keys along the sequence inside the attention module, where a rank holds its shard only.
EAGER_ONLY = (
    "DeepSeek-V4 runs only `eager` attention in transformers 5.23 (no sdpa or flash support), which DeepSpeed's "
    "Ulysses refuses, and only after the model is built (after the weights are downloaded)"
)
TRAIN_AT_SP1 = "Train it at sp=1 (an accelerate config without SP) with attn_implementation: eager"

DEEPSEEK_V4 = Family(
    name="DeepSeek-V4",
    model_types=("deepseek_v4",),
    layer_types=(
        LayerType(
            name="sliding_attention",
            mixer="softmax",
            under_sp="not exact: eager only",
            refused=f"{EAGER_ONLY}; its window and sinks would need the sink-aware sdpa. {TRAIN_AT_SP1}",
        ),
        LayerType(
            name="compressed_sparse_attention",
            mixer="softmax",
            under_sp="not exact: keys compressed along the sequence and selected by an indexer",
            refused=f"{EAGER_ONLY}; its compressor pools every 4 keys along the sequence and its indexer selects "
            f"among them, both outside the attention function, so a rank would see its shard only. {TRAIN_AT_SP1}",
        ),
        LayerType(
            name="heavily_compressed_attention",
            mixer="softmax",
            under_sp="not exact: keys compressed along the sequence",
            refused=f"{EAGER_ONLY}; its compressor pools every 128 keys along the sequence outside the attention "
            f"function, so a rank would pool its shard only. {TRAIN_AT_SP1}",
        ),
    ),
    default_layer_type="heavily_compressed_attention",
)
