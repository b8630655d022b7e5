"""Gemma 4: refused under SP until its row is written exactly (the model-family work adds it; replace this module).

Why refused: its global layers' head dim (`global_head_dim`, 512 by default) is more than FlashAttention takes, so
transformers runs them through SDPA, where the sliding layers' window is a 4D mask that DeepSpeed's Ulysses adapter
discards; and nothing here proves its KV-shared layers under SP."""

from longctx.config.families.schema import Family, LayerType

WHY = (
    "Gemma 4 is not proven under SP here yet: its sliding window would reach sdpa as a 4D mask, which DeepSpeed's "
    "Ulysses adapter discards (its 512-wide global heads rule out FlashAttention), and its KV-shared layers have no "
    "parity test. Train it at sp=1 (an accelerate config without SP)"
)

GEMMA4 = Family(
    name="Gemma 4",
    model_types=("gemma4", "gemma4_text"),
    layer_types=(
        LayerType(name="sliding_attention", mixer="softmax", under_sp="not proven", refused=WHY),
        LayerType(name="full_attention", mixer="softmax", under_sp="not proven", refused=WHY),
    ),
)
