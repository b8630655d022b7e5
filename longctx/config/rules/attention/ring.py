"""Hybrid Ulysses x ring SP: the split sp = U x R a model and a machine allow, the planner's choice, the refusals.

Ulysses (DeepSpeed's all-to-all) splits attention heads across U ranks, so U must divide the query heads, and the KV
heads must divide U or be divisible by it (DeepSpeed replicates them beyond their count). The ring
(longctx/training/sequence_parallel/) has no such bound: R = sp / U chunks of the sequence. The planner takes the
largest U that fits the heads and a node's GPUs (a Ulysses group is U consecutive ranks, and its all-to-all moves
every layer's q, k, v and output, so it belongs on the node's fast links) and passes the ring across the rest.
U = sp is plain Ulysses (no ring key needed); U = 1 a pure ring.

The split is set in the accelerate YAML, beside the sp size it splits: `parallelism_config_sp_ring_size: R`.
Pure data and rules: nothing here imports torch.
"""

from pathlib import Path

from longctx.config.families.registry import family_of
from longctx.config.model.linear_layers import text_config
from longctx.config.paths import display_path
from longctx.config.problems import Problem, error

RING_KEY = "parallelism_config.parallelism_config_sp_ring_size"


def ulysses_fits(num_heads: int, num_kv_heads: int, ulysses: int) -> bool:
    """DeepSpeed's Ulysses rule for a group of `ulysses` ranks: it divides the query heads, and the KV heads
    divide it or are divisible by it."""
    return num_heads % ulysses == 0 and (num_kv_heads % ulysses == 0 or ulysses % num_kv_heads == 0)


def plan_split(num_heads: int, num_kv_heads: int, sp: int, gpus_per_node: int) -> tuple[int, int]:
    """(U, R): the largest U dividing sp that fits the heads (`ulysses_fits`) and the node (divides its GPUs);
    U = 1 (a pure ring) always fits."""
    for ulysses in range(sp, 0, -1):
        if sp % ulysses == 0 and gpus_per_node % ulysses == 0 and ulysses_fits(num_heads, num_kv_heads, ulysses):
            return ulysses, sp // ulysses
    return 1, sp


def why_split(num_heads: int, num_kv_heads: int, sp: int, gpus_per_node: int) -> str:
    """One line: the planner's U x R and why (what bounded U)."""
    ulysses, ring = plan_split(num_heads, num_kv_heads, sp, gpus_per_node)
    bounds = []
    larger = [u for u in range(ulysses + 1, sp + 1) if sp % u == 0]
    if any(gpus_per_node % u for u in larger):
        bounds.append(f"a node's {gpus_per_node} GPUs")
    if any(not ulysses_fits(num_heads, num_kv_heads, u) for u in larger):
        bounds.append(f"{num_heads} query / {num_kv_heads} KV heads")
    bound = f", the largest that fits {' and '.join(bounds)}" if bounds else " (plain Ulysses: no ring)"
    return f"sp={sp} = Ulysses {ulysses} x ring {ring}: U={ulysses}{bound}"


def attention_features(config: dict) -> list[str]:
    """The attention features the ring does not compute: sinks (gpt-oss), sliding windows."""
    text = text_config(config)
    found = []
    family = family_of(config)
    if family is not None and family.sinks:
        found.append("attention sinks (one learned logit per head)")
    types = text.get("layer_types") or []
    if "sliding_attention" in types or (
        not types and text.get("sliding_window") and text.get("use_sliding_window", True)
    ):
        found.append(f"sliding-window layers (window {text.get('sliding_window')})")
    return found


def ring_problems(config: dict, topo, where: str, model: str) -> list[Problem]:
    """Every reason the accelerate YAML's U x R cannot run this model on this machine, each with the fix."""
    sp, ring = topo.sp_size, topo.sp_ring_size
    if ring == 1:
        return []
    text = text_config(config)
    heads, kv = int(text["num_attention_heads"]), int(text.get("num_key_value_heads") or text["num_attention_heads"])
    if ring < 1 or sp % ring:
        return []  # sp_topology_problems (a recipe rule: the entrypoint refuses it too)
    planned = plan_split(heads, kv, sp, topo.processes_per_machine)[1]
    fix = f"set parallelism_config_sp_ring_size: {planned} ({why_split(heads, kv, sp, topo.processes_per_machine)})"
    problems = []
    u = sp // ring
    if not ulysses_fits(heads, kv, u):
        msg = (
            f"gives Ulysses groups of U={u} (sp={sp} / R={ring}), which do not fit {model}: {heads} query heads, "
            f"{kv} KV heads (U must divide the query heads; the KV heads must divide U or be divisible by it)"
        )
        problems.append(error(where, RING_KEY, msg, fix))
    if topo.processes_per_machine % u:
        msg = f"gives Ulysses groups of U={u}, which cross the {topo.processes_per_machine} processes of a machine"
        problems.append(error(where, RING_KEY, msg, fix))
    for feature in attention_features(config):
        msg = f"{model} has {feature}, which the ring does not compute"
        problems.append(error(where, RING_KEY, msg, "train it with plain Ulysses: parallelism_config_sp_ring_size: 1"))
    return problems


def sp_topology_problems(recipe, args, model, topo, source: str) -> list[Problem]:
    """The entrypoint's share (no model config needed): R divides sp."""
    ring = topo.sp_ring_size
    if ring == 1 or (ring >= 1 and topo.sp_size % ring == 0):
        return []
    msg = f"is {ring}, which does not divide sp={topo.sp_size} (sp = Ulysses U x ring R)"
    fix = "set a divisor of sp; `make plan` prints the planner's U x R for the model and the machine"
    return [error(display_path(Path(topo.path)), RING_KEY, msg, fix)]
