"""What a retrieval grid costs on a recipe's mesh: estimated before anything runs (`--dry-run`), measured after.

Memory: the eval is one forward of each example through the training mesh, so memory_plan's estimate of a
training step at the same length is an upper bound per rank (a forward keeps no gradients, no optimizer work
and no activation checkpoints; the LM head runs on the answer positions only, so no [sequence, vocab] logits).

Time: forward FLOPs per example of S tokens with longctx/training/metrics/flops.py's coefficients, F = S * 2 *
P_layers +
4 * L * H * d * S (S + 1) / 2 (causal attention over one document; the LM head, which runs on a handful of
answer positions, is left out). The grid's FLOPs over (world size x peak x an assumed MFU) give the wall
time; the MFU is an assumption, printed with the estimate. A real run records each example's seconds and
(on a GPU) peak memory, and `measured_cost` turns them into the achieved FLOP rate per GPU for each length,
so the assumption can be checked against the recipe's own hardware.
"""

import statistics
from types import SimpleNamespace

ASSUMED_MFU = 0.35
DEFAULT_PEAK = 989e12  # dense bf16 of an H100/H200 (longctx/training/metrics/throughput.py); the GPU catalog's target


def forward_flops(config: dict, seq_len: int) -> float:
    """One eval forward of `seq_len` tokens: decoder layers and causal attention
    (longctx/training/metrics/flops.py)."""
    from longctx.training.metrics.flops import FlopCounts

    counts = FlopCounts.from_config(SimpleNamespace(**(config.get("text_config") or config)))
    # sliding layers (gpt-oss): a query scores at most `window` keys
    window = min(counts.window or seq_len, seq_len)
    windowed = window * (window + 1) / 2 + (seq_len - window) * window
    return seq_len * counts.layers + counts.attention * seq_len * (seq_len + 1) / 2 + counts.sliding * windowed


def grid_cost(recipe: str, overrides: list[str], lengths: list[int], per_length: int) -> dict | None:
    """{'examples', 'pflop', 'hours', 'plan_gib', 'world', 'mfu'}, or None where the model config is unreadable."""
    from longctx.preflight.load import Machine, load_launch
    from longctx.preflight.plan import plan_dict

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
        "device": "cpu" if launch.sft.use_cpu else "gpu",  # the recipe's own device, as the run uses it
    }


def cost_line(cost: dict | None) -> str:
    if cost is None:
        return "[eval] cost: unavailable (no offline model config for this recipe)"
    memory = f"<= {cost['plan_gib']:.1f} GiB per rank (the training step's plan)" if cost["plan_gib"] else "n/a"
    if cost.get("device") == "cpu":  # no peak FLOP rate to assume for a CPU; the run measures its own time
        return (
            f"[eval] cost estimate: {cost['examples']} forwards, {cost['pflop'] * 1e3:,.3g} TFLOP on "
            f"{cost['world']} CPU processes (the recipe's device; no time estimate: a run prints its measured "
            f"seconds per example); memory {memory.replace('per rank', 'of RAM per process')}"
        )
    return (
        f"[eval] cost estimate: {cost['examples']} forwards, {cost['pflop']:,.0f} PFLOP; at an assumed "
        f"{cost['mfu']:.0%} MFU of {DEFAULT_PEAK / 1e12:.0f} TFLOP/s on {cost['world']} GPUs: "
        f"{cost['hours'] * 60:,.1f} min; memory {memory}"
    )


def measured_cost(results: list[dict], config: dict, sp: int) -> list[dict]:
    """Per length: examples, median seconds per example, the largest peak GiB on a rank (GPU only, else None) and
    the achieved TFLOP/s per GPU (forward FLOPs of the example over its median seconds, shared by the sp ranks
    that ran it). The median keeps the first example's warm-up (kernel selection, first ZeRO gathers) out."""
    out = []
    for length in sorted({r["length"] for r in results}):
        rows = [r for r in results if r["length"] == length and r.get("seconds")]
        if not rows:
            continue
        seconds = statistics.median(r["seconds"] for r in rows)
        peaks = [r["peak_gib"] for r in rows if r.get("peak_gib") is not None]
        out.append(
            {
                "length": length,
                "examples": len(rows),
                "median_seconds": seconds,
                "peak_gib": max(peaks) if peaks else None,
                "tflops_per_gpu": forward_flops(config, length) / seconds / sp / 1e12,
            }
        )
    return out


def measured_lines(measured: list[dict]) -> list[str]:
    """One line per length for the terminal (MFU against DEFAULT_PEAK only where a GPU's peak memory was read)."""
    lines = []
    for m in measured:
        line = f"[eval] measured at {m['length']} tokens: {m['median_seconds']:.3g} s per example (median of "
        line += f"{m['examples']}), {m['tflops_per_gpu']:.3g} TFLOP/s per GPU"
        if m["peak_gib"] is not None:
            line += f" ({m['tflops_per_gpu'] * 1e12 / DEFAULT_PEAK:.0%} of {DEFAULT_PEAK / 1e12:.0f}), peak "
            line += f"{m['peak_gib']:.1f} GiB allocated on a rank"
        lines.append(line)
    return lines
