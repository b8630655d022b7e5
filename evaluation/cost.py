"""What a retrieval grid costs on a recipe's mesh, before anything runs (`python -m evaluation RECIPE --dry-run`).

Memory: the eval is one forward of each example through the training mesh, so memory_plan's estimate of a
training step at the same length is an upper bound per rank (a forward keeps no gradients, no optimizer work
and no activation checkpoints; the LM head runs on the answer positions only, so no [sequence, vocab] logits).

Time: forward FLOPs per example of S tokens, with training/metrics.py's coefficients (which count
forward + backward as 3 forwards): F = 2 * P * S + 4 * L * H * d * S^2 (the full S^2: causal kernels skip about
half, so this is an upper bound on the work). The grid's FLOPs over (world size x peak x an assumed MFU)
give the wall time; the MFU is an assumption, not a measurement, and is printed with the estimate.
"""

from types import SimpleNamespace

ASSUMED_MFU = 0.35
DEFAULT_PEAK = 989e12  # dense bf16 of an H100/H200 (training/metrics.py); the recipes' GPU catalog targets these


def forward_flops(config: dict, seq_len: int) -> float:
    """One forward over one example of `seq_len` tokens, causal attention counted (training/flops.py)."""
    from training.flops import FlopCounts

    counts = FlopCounts.from_config(SimpleNamespace(**config.get("text_config", config)))
    return seq_len * (counts.layers + counts.head) + counts.attention * seq_len * (seq_len + 1) / 2


def grid_cost(recipe: str, overrides: list[str], lengths: list[int], per_length: int) -> dict | None:
    """{'examples', 'pflop', 'hours', 'plan_gib', 'world', 'mfu'}, or None where the model config is unreadable."""
    from preflight.load import Machine, load_launch
    from preflight.plan import plan_dict

    launch = load_launch(recipe, overrides, Machine(source="intended"))
    if launch.facts is None or launch.topo is None or launch.sft is None:
        return None
    flops = sum(per_length * forward_flops(launch.facts.config, n) for n in lengths)
    world = launch.topo.world_size
    plan = plan_dict(launch)
    seconds = flops / (world * DEFAULT_PEAK * ASSUMED_MFU)
    return {
        "examples": per_length * len(lengths),
        "pflop": flops / 1e15,
        "hours": seconds / 3600,
        "plan_gib": plan["total_gib"] if plan else None,
        "world": world,
        "mfu": ASSUMED_MFU,
    }


def cost_line(cost: dict | None) -> str:
    if cost is None:
        return "[eval] cost: unavailable (no offline model config for this recipe)"
    memory = f"<= {cost['plan_gib']:.1f} GiB per rank (the training step's plan)" if cost["plan_gib"] else "n/a"
    return (
        f"[eval] cost estimate: {cost['examples']} forwards, {cost['pflop']:,.0f} PFLOP; at an assumed "
        f"{cost['mfu']:.0%} MFU of {DEFAULT_PEAK / 1e12:.0f} TFLOP/s on {cost['world']} GPUs: "
        f"{cost['hours'] * 60:,.1f} min; memory {memory}"
    )
