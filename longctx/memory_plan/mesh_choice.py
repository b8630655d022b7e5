"""The planner's choice by predicted time: among the ways to run a launch's sp x dp that fit the GPU (and the host),
the one whose predicted step is shortest, with the runner-up and by how much.

What varies: the split sp = Ulysses U x ring R (U divides the query heads, the KV heads divide U or U them, U divides
a node's GPUs; R > 1 only for a model the ring computes: no sinks, no sliding windows:
longctx/config/rules/attention/ring.py),
DeepSpeed's optimizer offload, and the checkpointing kind (none, full, selective, full with the checkpoints offloaded
to the host). What stays: sp, the world, the length, the micro-batch and accumulation, TiledMLP, LoRA, the kernels.
Why by time: a mesh that fits is not a mesh that is fast. The ring hides its K/V traffic behind attention only once a
chunk's attention outlasts a hop, offload trades GPU memory for PCIe and CPU Adam, recompute trades it for FLOPs;
the memory plan says which fit (longctx/memory_plan/estimate.py), the step-time plan which is fastest
(longctx/memory_plan/step_time.py). Every time here is predicted.
"""

from dataclasses import dataclass

from longctx.config.rules.attention.ring import attention_features, ulysses_fits
from longctx.memory_plan.estimate import estimate
from longctx.memory_plan.inputs import PlanInputs
from longctx.memory_plan.step_time import StepTime, predict
from longctx.training.metrics.hardware import HardwareProfile

CHECKPOINTING = {  # kind -> the inputs it sets
    "no checkpointing": {"grad_ckpt": False, "selective_ckpt": False, "act_offload": False},
    "full checkpointing": {"grad_ckpt": True, "selective_ckpt": False, "act_offload": False},
    "selective checkpointing": {"grad_ckpt": True, "selective_ckpt": True, "act_offload": False},
    "checkpoints offloaded": {"grad_ckpt": True, "selective_ckpt": False, "act_offload": True},
}


@dataclass(frozen=True)
class Candidate:
    inputs: PlanInputs
    gpu_gib: float
    host_gib: float
    time: StepTime

    @property
    def label(self) -> str:
        i = self.inputs
        offload = "optimizer offload" if i.offload_optimizer else "optimizer on the GPU"
        return f"Ulysses {i.ulysses} x ring {i.ring}, {offload}, {checkpointing_kind(i)}"


def checkpointing_kind(i: PlanInputs) -> str:
    return next(kind for kind, sets in CHECKPOINTING.items() if all(getattr(i, k) == v for k, v in sets.items()))


def splits(config: dict, i: PlanInputs, rings: set[int] | None = None) -> list[tuple[int, int]]:
    """Every (U, R) of sp this model and node allow (longctx/config/rules/attention/ring.py's rules), of the ring
    sizes `rings`
    the launch's own rules allow when given (a recipe can refuse a ring: DPO prefix sharing on a GPU)."""
    text = config.get("text_config") or config
    heads, kv = int(text["num_attention_heads"]), int(text.get("num_key_value_heads") or text["num_attention_heads"])
    ring_ok = not attention_features(config)
    found = []
    for u in range(i.sp, 0, -1):
        if i.sp % u or i.node_gpus % u or not ulysses_fits(heads, kv, u) or (u < i.sp and not ring_ok):
            continue
        if rings is None or i.sp // u in rings:
            found.append((u, i.sp // u))
    return found


def variants(config: dict, i: PlanInputs, rings: set[int] | None = None) -> list[PlanInputs]:
    """The launch's own inputs varied by split, optimizer offload and checkpointing kind (module docstring)."""
    out = []
    for _, ring in splits(config, i, rings):
        for offload in (False, True):
            for kind, sets in CHECKPOINTING.items():
                if kind == "selective checkpointing" and i.lora and i.zero_stage == 3:
                    continue  # TRL forces reentrant checkpointing there (longctx/config/rules/alst.py refuses it)
                out.append(i.but(ring=ring, offload_optimizer=offload, **sets))
    return out


def candidate(config: dict, i: PlanInputs, profile: HardwareProfile, doc_length: int | None) -> Candidate:
    plan = estimate(config, i)
    return Candidate(i, plan.total_gib, plan.host_per_node, predict(config, i, profile, doc_length))


def ranked(config: dict, i: PlanInputs, profile: HardwareProfile, gpu_limit_gib: float,
           host_limit_gib: float | None = None, doc_length: int | None = None,
           rings: set[int] | None = None) -> list[Candidate]:  # fmt: skip
    """The variants that fit `gpu_limit_gib` per GPU (and `host_limit_gib` per node, when known), of the ring sizes
    `rings` when given, fastest first (ties: the less GPU memory)."""
    found = [candidate(config, v, profile, doc_length) for v in variants(config, i, rings)]
    fit = [c for c in found if c.gpu_gib <= gpu_limit_gib and (host_limit_gib is None or c.host_gib <= host_limit_gib)]
    return sorted(fit, key=lambda c: (c.time.step_s, c.gpu_gib))


def choice_lines(own: Candidate, found: list[Candidate]) -> list[str]:
    """The planner's choice, its runner-up and by how much, and where the launch's own settings stand."""
    if not found:
        return ["planner: no variant of this launch fits (see the memory plan)"]
    best = found[0]
    lines = [f"planner's choice (fastest predicted that fits): {best.label}: {best.time.line()}"]
    if len(found) > 1:
        second = found[1]
        slower = second.time.step_s / best.time.step_s - 1
        lines.append(f"  runner-up: {second.label}: {second.time.step_s:,.1f} s/step, {slower:+.1%}")
    if own.inputs == best.inputs:
        lines.append("  the recipe's own settings are the choice")
    else:
        behind = own.time.step_s / best.time.step_s - 1
        own_line = f"{own.time.step_s:,.1f} s/step, {behind:+.1%} against the choice"
        fits = "" if any(c.inputs == own.inputs for c in found) else " (over the memory line: not among the fits)"
        lines.append(f"  the recipe's own ({own.label}): {own_line}{fits}")
    return lines
