"""Heads: Ulysses splits attention heads across the SP group, so the head counts bound the valid sp sizes.

Linear-attention layers (Qwen3.5's Gated DeltaNet) are split by their own key heads, and a recurrent layer type
this repository does not make sequence-parallel is refused under sp > 1
(longctx/config/rules/attention/linear_attention.py).
"""

from pathlib import Path

from longctx.config.problems import Problem, error
from longctx.config.rules.attention.head_shapes import sp_head_problems
from longctx.config.rules.attention.linear_attention import linear_attention_problems
from longctx.config.rules.attention.ring import plan_split, ring_problems, why_split


def valid_sp_sizes(num_heads: int, num_kv_heads: int, limit: int = 64) -> list[int]:
    """sp sizes DeepSpeed accepts: sp divides the query heads, and the KV heads divide sp or sp divides them."""
    return [
        sp
        for sp in range(1, min(num_heads, limit) + 1)
        if num_heads % sp == 0 and (num_kv_heads % sp == 0 or sp % num_kv_heads == 0)
    ]


def model_sp_sizes(config: dict, num_heads: int, num_kv_heads: int) -> list[int]:
    """valid_sp_sizes, less those a linear-attention layer, or a layer type with its own heads, cannot split
    (longctx/config/rules/)."""
    return [
        n
        for n in valid_sp_sizes(num_heads, num_kv_heads)
        if not linear_attention_problems(config, n, "", "") and not sp_head_problems(config, n, "", "")
    ]


def kv_note(num_kv_heads: int, sp: int) -> str:
    if sp > num_kv_heads and sp % num_kv_heads == 0:
        return f"{num_kv_heads} KV heads are replicated {sp // num_kv_heads}x so each of the {sp} ranks holds one"
    return ""


def check(launch) -> list[Problem]:
    from longctx.config.paths import display_path

    if launch.topo is None or launch.facts is None:
        return []
    sp, heads, kv = launch.topo.sp_size, launch.facts.num_heads, launch.facts.num_kv_heads
    where = display_path(Path(launch.topo.path))
    config, model = launch.facts.config, launch.facts.source
    linear = linear_attention_problems(config, sp, where, model)  # linear layers split across the whole sp
    if launch.topo.sp_ring_size != 1:  # hybrid Ulysses x ring: U, not sp, splits the heads
        return ring_problems(config, launch.topo, where, model) + linear
    linear += sp_head_problems(config, sp, where, model)  # each layer type's own heads (Gemma 4)
    if sp in valid_sp_sizes(heads, kv, limit=max(sp, 64)):
        return linear
    fits = model_sp_sizes(config, heads, kv)
    what = f"sp={sp} does not fit {model}: {heads} attention heads, {kv} KV heads"
    why = "num_attention_heads must be divisible by sp, and KV heads must divide sp or be divisible by it"
    key = "parallelism_config.parallelism_config_sp_size"
    node = launch.topo.processes_per_machine
    ring = f"parallelism_config_sp_ring_size: {plan_split(heads, kv, sp, node)[1]} ({why_split(heads, kv, sp, node)})"
    fix = f"use one of: {', '.join(map(str, fits))}; or keep sp={sp} with a ring: set {ring}"
    return [error(where, key, f"{what} ({why})", fix)] + linear
