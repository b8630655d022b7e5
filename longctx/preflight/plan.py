"""`python -m longctx plan RECIPE`: the resolved mesh, tokens per rank and step, and the memory table.

Needs no GPU: the memory plan is analytic (longctx/memory_plan/estimate.py), and the largest max_length is solved
from it for the GPU given by --gpu-memory-gb (or the visible one; 80 GB when neither is known).
"""

from longctx.memory_plan.estimate import estimate, max_seq_len, shown
from longctx.memory_plan.gpus import torch_gib
from longctx.preflight.facts import position_range
from longctx.preflight.options import gpu_gib, plan_inputs
from longctx.preflight.rollout import is_grpo, planned_length, rollout_lines
from longctx.preflight.time_plan import own_and_ranked, time_dict, time_lines

DEFAULT_GB = 80.0
GRPO_NOT_TIMED = (
    "step time: not predicted for GRPO (a step is generation then training; the step-time model has no generation "
    "term, and its training share alone would understate the step)"
)
SHOW_GROUPS = 4


def sp_groups(world: int, sp: int) -> list[list[int]]:
    """DeepSpeed forms each SP group from `sp` consecutive global ranks."""
    return [list(range(start, start + sp)) for start in range(0, world, sp)]


def mesh_lines(launch) -> list[str]:
    topo, sft = launch.topo, launch.sft
    groups = sp_groups(topo.world_size, topo.sp_size)
    shown = "; ".join(f"sp group {i}: ranks {g}" for i, g in enumerate(groups[:SHOW_GROUPS]))
    more = f"; ... ({len(groups)} groups)" if len(groups) > SHOW_GROUPS else ""
    max_length = planned_length(launch) or 0  # GRPO: a micro-step's row (preflight/rollout.py)
    micro = 1 if is_grpo(launch) else sft.per_device_train_batch_size
    what = "a training row" if is_grpo(launch) else "max_length"
    step_tokens = max_length * micro * sft.gradient_accumulation_steps * len(groups)
    return [
        (
            f"mesh: {topo.num_machines} machine(s) x {topo.processes_per_machine} processes = "
            f"world {topo.world_size}: dp_replicate {topo.dp_replicate_size} x dp_shard {topo.dp_shard_size} "
            f"x sp {topo.sp_size}"
        ),
        f"ranks sharing one sequence: {shown}{more}",
        f"tokens per rank: {max_length // topo.sp_size} of {what} {max_length}",
        (
            f"global batch per optimizer step: up to {step_tokens:,} tokens ({len(groups)} sequence(s) in "
            f"parallel x micro batch {micro} x accumulation "
            f"{sft.gradient_accumulation_steps})"
        ),
    ]


def heads_line(launch) -> str:
    """The sp sizes this model allows, and whether its KV heads are replicated at this sp."""
    from longctx.config.rules.attention.head_shapes import layer_type_heads
    from longctx.preflight.checks.heads import kv_note, model_sp_sizes

    facts, ulysses = launch.facts, launch.topo.sp_ulysses_size  # the ranks heads split over: sp without a ring
    valid = ", ".join(map(str, model_sp_sizes(facts.config, facts.num_heads, facts.num_kv_heads)))
    note = kv_note(facts.num_kv_heads, ulysses)
    linear = facts.config.get("linear_num_key_heads")
    linear = f", {linear} linear-attention key / {facts.config['linear_num_value_heads']} value" if linear else ""
    kinds = layer_type_heads(facts.config)  # Gemma 4: layer types with heads of their own, each split by its own
    linear += "".join(f"; {kind}: {heads} query / {kv} KV of {dim}" for kind, (heads, kv, dim) in kinds.items())
    return f"heads: {facts.num_heads} query, {facts.num_kv_heads} KV{linear}; valid sp sizes: {valid}" + (
        f"; {note}" if note else ""
    )


def split_line(launch) -> str | None:
    """How sp splits into Ulysses U x ring R: the accelerate YAML's split, its groups, and the planner's choice."""
    from longctx.config.rules.attention.ring import plan_split, why_split

    topo, facts = launch.topo, launch.facts
    if topo.sp_size == 1:
        return None
    u, ring = topo.sp_ulysses_size, topo.sp_ring_size
    ulysses_groups = " ".join(str(list(range(g * u, g * u + u))) for g in range(min(ring, SHOW_GROUPS)))
    ring_groups = " ".join(str(list(range(i, topo.sp_size, u))) for i in range(min(u, SHOW_GROUPS)))
    shape = (facts.num_heads, facts.num_kv_heads, topo.sp_size, topo.processes_per_machine)
    if (u, ring) == plan_split(*shape) == (topo.sp_size, 1):
        return f"sp split: Ulysses {u} x ring 1 (plain Ulysses), the planner's choice"
    line = f"sp split: Ulysses {u} x ring {ring} (parallelism_config_sp_ring_size: {ring})"
    line += f"; planner: {why_split(*shape)}"
    if ring == 1:
        return line
    return (
        f"{line}; Ulysses groups (of sp group 0): {ulysses_groups}; ring groups: {ring_groups}; attention per rank: "
        f"{launch.sft.max_length // ring if launch.sft.max_length else '?'} tokens of {facts.num_heads // u} query "
        "heads, K/V of the whole sequence gathered over the ring"
    )


def attention_line(launch) -> str | None:
    """Which layers slide (their window applies inside each packed document) and whether heads carry sinks."""
    facts = launch.facts
    sliding = facts.sliding_layers
    if not sliding and not facts.has_sinks:
        return None
    layers = int(facts.config["num_hidden_layers"])
    shown = ", ".join(map(str, sliding[:6])) + (", ..." if len(sliding) > 6 else "")
    line = f"attention layers: {layers - len(sliding)} full"
    if sliding:
        line += f", {len(sliding)} sliding (window {facts.config.get('sliding_window')}, per document; layers {shown})"
    if facts.has_sinks:
        per_rank = facts.num_heads // launch.topo.sp_size
        line += f"; one sink per query head, {per_rank} heads' sinks on each rank at sp={launch.topo.sp_size}"
    return line


def cannot_run(launch) -> str | None:
    """Why this launch's DeepSpeed config cannot train (longctx/config/rules/zero.py), so nothing is planned for it."""
    from longctx.config.rules.zero import unsupported

    found = unsupported(launch.ds, launch.topo.sp_size) if isinstance(launch.ds, dict) else None
    return f"`{found[0]}` {found[1]}" if found else None


def plan_dict(launch) -> dict | None:
    """The memory plan as data (for --json), or None without a model config or max_length, or for a launch
    whose ZeRO configuration is refused (the plan covers only what can run)."""
    if launch.facts is None or launch.topo is None or not planned_length(launch) or cannot_run(launch):
        return None
    inputs = plan_inputs(launch)
    plan = estimate(launch.facts.config, inputs)
    gib = gpu_gib(launch) or torch_gib(DEFAULT_GB)
    fit = max_seq_len(launch.facts.config, gib, inputs)
    # GRPO: a step is generation plus training; the step-time model has no generation term, so it predicts nothing
    timed = None if launch.sft.use_cpu or is_grpo(launch) else own_and_ranked(launch, gib)
    return {
        "step_time": time_dict(*timed) if timed else None,
        "timed": timed,
        "components_gib": dict(plan.rows()),
        "zero_rows": plan.zero_reasons(),
        "total_gib": plan.total_gib,
        "host_per_node_gib": plan.host_per_node,
        "host_terms_gib": dict(plan.host_rows),
        "host_memory_gib": launch.machine.host_memory_gib,
        "gpu_gib": gib,
        "gpu_memory_assumed": gpu_gib(launch) is None,
        "max_length_that_fits": fit,
        "options": inputs.options(),
    }


def host_lines(data: dict) -> list[str]:
    """The host terms of one node (longctx/memory_plan/host.py), and the node's RAM where it is known."""
    ram = data["host_memory_gib"]
    of = f" of {ram:.1f} GiB RAM" if ram else " (pass --host-memory-gb to check it against the RAM)"
    lines = [f"host memory per node (GiB){of}:"]
    lines += [f"  {name:<22} {value:8.2f}" for name, value in data["host_terms_gib"].items() if value]
    return lines + [f"  {'host total':<22} {data['host_per_node_gib']:8.2f}"]


def disk_lines(launch) -> list[str]:
    """What the run's checkpoints take on disk at a save's peak (longctx/memory_plan/checkpoint_size.py)."""
    from longctx.memory_plan.arch import Arch
    from longctx.memory_plan.checkpoint_size import disk_plan

    zero = int(((launch.ds or {}).get("zero_optimization") or {}).get("stage", 0))
    lora = int(getattr(launch.model, "lora_r", None) or 16) if launch.model.use_peft else None
    plan, why = disk_plan(Arch.from_config(launch.facts.config), launch.sft, zero, lora)
    return [plan.line() if plan else f"checkpoints on disk: unbounded ({why})"]


def gpu_source(launch) -> str:
    """Where the GPU memory the plan is held to comes from; when assumed, what and why."""
    machine = launch.machine
    if machine.gpu_memory_gb:
        return f" (--gpu-memory-gb {machine.gpu_memory_gb:g})"
    if machine.gpu_memory_gib:
        return " (the visible GPU)"
    return (
        f" (assumed: an {DEFAULT_GB:.0f} GB GPU, the catalog's target, as torch reports it; no GPU is visible "
        "and no --gpu-memory-gb was given, so nothing was checked against it)"
    )


def reference_line(launch) -> list[str]:
    """A DPO recipe's reference (longctx/config/trainers/preference.py): what it keeps in memory and what it costs."""
    if getattr(launch.recipe, "trainer", "sft") != "dpo":
        return []
    from longctx.config.trainers.preference import REFERENCE_SOURCES

    source = launch.sft.reference_log_probs
    shared = "; prefix sharing on (a pair's prompt once a row)" if launch.sft.prefix_sharing else ""
    return [f"reference: {source}: {REFERENCE_SOURCES[source]}{shared}"]


def plan_lines(launch) -> list[str]:
    if launch.topo is None or launch.sft is None:
        return ["plan: unavailable (the recipe or its accelerate YAML could not be read; see the errors)"]
    lines = mesh_lines(launch) + ([heads_line(launch)] if launch.facts is not None else [])
    for extra in (split_line, attention_line) if launch.facts is not None else ():
        lines += [line] if (line := extra(launch)) else []
    refused = cannot_run(launch)
    if refused:
        return lines + [f"memory: not planned, this ZeRO configuration cannot run: {refused}"]
    data = plan_dict(launch)
    if data is None:
        return lines + ["memory: unavailable (no model config or no max_length)"]
    on = [k for k, v in data["options"].items() if v is True and k != "pin_memory"]
    lines += [f"memory per rank (GiB), {launch.facts.source}, features on: {', '.join(on) or 'none'}"]
    why = data["zero_rows"]
    lines += [
        f"  {name:<16} {shown(value):>8}" + (f"   ({why[name]})" if name in why else "")
        for name, value in data["components_gib"].items()
    ]
    if launch.sft.use_cpu:
        lines += [f"  {'total':<16} {data['total_gib']:8.2f}"] + host_lines(data) + reference_line(launch)
        lines += rollout_lines(launch, None)
        return lines + ["CPU recipe: these figures are host RAM per process; there is no GPU to fit"]
    lines += [f"  {'total':<16} {data['total_gib']:8.2f}   of {data['gpu_gib']:.1f} GiB per GPU{gpu_source(launch)}"]
    lines += host_lines(data) + disk_lines(launch) + reference_line(launch) + rollout_lines(launch, data["gpu_gib"])
    assumed = f" (the assumed {DEFAULT_GB:.0f} GB GPU)" if data["gpu_memory_assumed"] else ""
    fitted = "training row (prompts + completions)" if is_grpo(launch) else "max_length"
    lines.append(f"largest {fitted} that fits this topology and GPU: {data['max_length_that_fits']:,}{assumed}")
    reach = position_range(launch.facts)
    if reach and data["max_length_that_fits"] > reach:
        lines.append(f"  (the model's positions, with the recipe's rope settings, reach {reach:,})")
    if data["timed"] is None:  # GRPO (plan_dict)
        return lines + [GRPO_NOT_TIMED]
    return lines + time_lines(*data["timed"])
