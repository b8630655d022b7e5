"""`python -m longctx plan RECIPE`: the resolved mesh, tokens per rank and step, and the memory table.

Needs no GPU: the memory plan is analytic (longctx/memory_plan/estimate.py), and the largest max_length is solved
from it for the GPU given by --gpu-memory-gb (or the visible one; 80 GB when neither is known).
"""

from longctx.memory_plan.estimate import estimate, max_seq_len
from longctx.preflight.facts import position_range
from longctx.preflight.options import gpu_gib, plan_options

DEFAULT_GB = 80.0
SHOW_GROUPS = 4


def sp_groups(world: int, sp: int) -> list[list[int]]:
    """DeepSpeed forms each SP group from `sp` consecutive global ranks."""
    return [list(range(start, start + sp)) for start in range(0, world, sp)]


def mesh_lines(launch) -> list[str]:
    topo, sft = launch.topo, launch.sft
    groups = sp_groups(topo.world_size, topo.sp_size)
    shown = "; ".join(f"sp group {i}: ranks {g}" for i, g in enumerate(groups[:SHOW_GROUPS]))
    more = f"; ... ({len(groups)} groups)" if len(groups) > SHOW_GROUPS else ""
    max_length = sft.max_length or 0
    step_tokens = max_length * sft.per_device_train_batch_size * sft.gradient_accumulation_steps * len(groups)
    return [
        (
            f"mesh: {topo.num_machines} machine(s) x {topo.processes_per_machine} processes = "
            f"world {topo.world_size}: dp_replicate {topo.dp_replicate_size} x dp_shard {topo.dp_shard_size} "
            f"x sp {topo.sp_size}"
        ),
        f"ranks sharing one sequence: {shown}{more}",
        f"tokens per rank: {max_length // topo.sp_size} of max_length {max_length}",
        (
            f"global batch per optimizer step: up to {step_tokens:,} tokens ({len(groups)} sequence(s) in "
            f"parallel x micro batch {sft.per_device_train_batch_size} x accumulation "
            f"{sft.gradient_accumulation_steps})"
        ),
    ]


def heads_line(launch) -> str:
    """The sp sizes this model allows, and whether its KV heads are replicated at this sp."""
    from longctx.preflight.checks.heads import kv_note, valid_sp_sizes

    facts, sp = launch.facts, launch.topo.sp_size
    valid = ", ".join(map(str, valid_sp_sizes(facts.num_heads, facts.num_kv_heads)))
    note = kv_note(facts.num_kv_heads, sp)
    return f"heads: {facts.num_heads} query, {facts.num_kv_heads} KV; valid sp sizes: {valid}" + (
        f"; {note}" if note else ""
    )


def plan_dict(launch) -> dict | None:
    """The memory plan as data (for --json), or None without a model config or max_length."""
    if launch.facts is None or launch.topo is None or not launch.sft.max_length:
        return None
    options = plan_options(launch)
    plan = estimate(launch.facts.config, seq_len=launch.sft.max_length, sp=launch.topo.sp_size, **options)
    gib = gpu_gib(launch) or DEFAULT_GB * 1e9 / 2**30
    fit = max_seq_len(launch.facts.config, gib, sp=launch.topo.sp_size, **options)
    return {
        "components_gib": dict(plan.rows()),
        "total_gib": plan.total_gib,
        "host_per_node_gib": plan.host_per_node,
        "gpu_gib": gib,
        "gpu_memory_assumed": gpu_gib(launch) is None,
        "max_length_that_fits": fit,
        "options": options,
    }


def plan_lines(launch) -> list[str]:
    if launch.topo is None or launch.sft is None:
        return ["plan: unavailable (the recipe or its accelerate YAML could not be read; see the errors)"]
    lines = mesh_lines(launch) + ([heads_line(launch)] if launch.facts is not None else [])
    data = plan_dict(launch)
    if data is None:
        return lines + ["memory: unavailable (no model config or no max_length)"]
    on = [k for k, v in data["options"].items() if v is True]
    lines += [f"memory per rank (GiB), {launch.facts.source}, features on: {', '.join(on) or 'none'}"]
    lines += [f"  {name:<16} {value:8.2f}" for name, value in data["components_gib"].items()]
    lines += [f"  {'total':<16} {data['total_gib']:8.2f}   of {data['gpu_gib']:.1f} GiB per GPU"]
    lines += [f"  {'host per node':<16} {data['host_per_node_gib']:8.2f}   (offloaded optimizer/params/activations)"]
    if launch.sft.use_cpu:
        return lines + ["CPU recipe: these figures are host RAM per process; there is no GPU to fit"]
    assumed = f" (assumed {DEFAULT_GB:.0f} GB GPU: pass --gpu-memory-gb)" if data["gpu_memory_assumed"] else ""
    lines.append(f"largest max_length that fits this topology and GPU: {data['max_length_that_fits']:,}{assumed}")
    reach = position_range(launch.facts)
    if reach and data["max_length_that_fits"] > reach:
        lines.append(f"  (the model's positions, with the recipe's rope settings, reach {reach:,})")
    return lines
