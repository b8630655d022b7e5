"""Heads: Ulysses splits attention heads across the SP group, so the head counts bound the valid sp sizes."""

from pathlib import Path

from longctx.config.problems import Problem, error


def valid_sp_sizes(num_heads: int, num_kv_heads: int, limit: int = 64) -> list[int]:
    """sp sizes DeepSpeed accepts: sp divides the query heads, and the KV heads divide sp or sp divides them."""
    return [
        sp
        for sp in range(1, min(num_heads, limit) + 1)
        if num_heads % sp == 0 and (num_kv_heads % sp == 0 or sp % num_kv_heads == 0)
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
    if sp in valid_sp_sizes(heads, kv, limit=max(sp, 64)):
        return []
    where = display_path(Path(launch.topo.path))
    valid = ", ".join(map(str, valid_sp_sizes(heads, kv)))
    what = f"sp={sp} does not fit {launch.facts.source}: {heads} attention heads, {kv} KV heads"
    why = "num_attention_heads must be divisible by sp, and KV heads must divide sp or be divisible by it"
    return [error(where, "parallelism_config.parallelism_config_sp_size", f"{what} ({why})", f"use one of: {valid}")]
