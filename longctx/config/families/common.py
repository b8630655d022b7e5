"""Layer types several families share, so each is described (and proven) once."""

from longctx.config.families.schema import FLASH_ATTENTION_2, SDPA, LayerType

FULL_ATTENTION = LayerType(
    name="full_attention",
    mixer="softmax",
    under_sp="Ulysses all-to-all by heads; packed documents kept apart by the isolated sdpa (CPU and GPU varlen) "
    "or flash-attn's varlen path from position_ids",
    proven=(SDPA, FLASH_ATTENTION_2),
)
SLIDING_ATTENTION = LayerType(
    name="sliding_attention",
    mixer="softmax",
    under_sp="Ulysses by heads; the window applied per document by the sdpa kernels of longctx/training/attention/"
    "(never by a 4D mask, which DeepSpeed's Ulysses adapter discards)",
    proven=(SDPA,),
)

# DeepSeek's sparse attention (DSA: DeepSeek-V3.2, GLM-5's glm_moe_dsa): a "lightning indexer" scores every key for
# every query and keeps the top-k, then the attention runs under that selection as a mask.
INDEXED_ATTENTION = LayerType(
    name="indexed_attention",
    mixer="softmax",
    under_sp="not exact: the indexer runs in the attention module before the attention function Ulysses wraps",
    refused="its indexer scores keys along the sequence outside the attention function DeepSpeed's Ulysses wraps, "
    "so each rank would select its top-k keys from its own shard only, and the selection reaches the kernel as a "
    "4D mask, which Ulysses' adapter discards: the layer would train as dense attention, silently. Train it at "
    "sp=1 (an accelerate config without SP)",
)
