"""Layer types of different head shapes (Gemma 4): what Ulysses SP and the attention kernels accept of each.

Gemma 4's global layers have their own head size (`global_head_dim` 512; the sliding-window layers 256) and KV heads
(`num_global_key_value_heads`), read per layer by longctx/config/model/layer_shapes.py. Two rules follow:

- Ulysses splits each layer by its own heads (longctx/training/sequence_parallel/per_layer_ulysses.py), so sp must fit
  every layer type: divide its query heads, and its KV heads divide sp or be divisible by it. The uniform check
  (longctx/preflight/checks/heads.py) reads only the config's top-level head counts.
- FlashAttention 2 and 3 (flash-attn, and transformers' `flash_attention_*` on it) stop at head_dim 256: a model
  with a wider layer fails at that layer's first forward ("FlashAttention forward only supports head dimension at
  most 256"). Refused here with the fix, `sdpa`, whose kernels take any head size (longctx/training/attention/:
  on a GPU the packed-row varlen kernel, FlashAttention too, runs the layers up to 256 and per-document sdpa the
  wider ones).

Pure data and rules: nothing here imports torch.
"""

from longctx.config.model.layer_shapes import layer_shapes
from longctx.config.model.linear_layers import text_config
from longctx.config.problems import Problem, error

FLASH_MAX_HEAD_DIM = 256  # flash-attn 2/3 and torch's varlen FlashAttention kernels
FLASH = ("flash_attention_2", "flash_attention_3")
SP_KEY = "parallelism_config.parallelism_config_sp_size"


def layer_type_heads(config: dict) -> dict[str, tuple[int, int, int]]:
    """layer type -> (query heads, KV heads, head_dim) for models whose layer types differ in them; {} otherwise."""
    shapes = layer_shapes(text_config(config))
    if shapes is None:
        return {}
    return {layer.kind: (layer.heads, layer.kv_heads, layer.head_dim) for layer in shapes.attention}


def fits(heads: int, kv_heads: int, sp: int) -> bool:
    return heads % sp == 0 and (kv_heads % sp == 0 or sp % kv_heads == 0)


def sp_head_problems(config: dict, sp: int, where: str, model: str) -> list[Problem]:
    """Every layer type's heads against sp (Ulysses splits each layer by its own)."""
    kinds = layer_type_heads(config)
    problems = []
    for kind, (heads, kv_heads, _) in sorted(kinds.items()):
        if not fits(heads, kv_heads, sp):
            valid = ", ".join(str(n) for n in range(1, heads + 1) if all(fits(h, k, n) for h, k, _ in kinds.values()))
            msg = (
                f"sp={sp} does not fit {model}'s {kind} layers ({heads} query / {kv_heads} KV heads): Ulysses splits "
                "every layer by its own heads, so sp must divide the query heads and the KV heads divide sp or be "
                "divisible by it"
            )
            problems.append(error(where, SP_KEY, msg, f"use an sp that fits every layer type: {valid}"))
    return problems


def flash_head_dim_problems(config: dict, attn_implementation: str | None, where: str, model: str) -> list[Problem]:
    """A layer wider than the FlashAttention kernels take, under `flash_attention_*`."""
    widest = max((d for _, _, d in layer_type_heads(config).values()), default=0)
    if attn_implementation not in FLASH or widest <= FLASH_MAX_HEAD_DIM:
        return []
    msg = (
        f"{attn_implementation} stops at head_dim {FLASH_MAX_HEAD_DIM} and {model} has layers of head_dim {widest} "
        "(its global layers): they would fail at their first forward"
    )
    fix = "set `attn_implementation: sdpa` (any head size; sliding windows applied per document)"
    return [error(where, "attn_implementation", msg, fix)]
