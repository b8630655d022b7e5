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
