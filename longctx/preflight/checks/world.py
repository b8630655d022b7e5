"""World size: the mesh must multiply to the process count, and the process count must match the GPUs.

accelerate 1.13+ skips its own world-size check when DeepSpeed SP is on; a mismatch would surface as
DeepSpeed's "Check batch related parameters" error after the model is loaded.
"""

from pathlib import Path

from longctx.config.problems import Problem, error

PC = "parallelism_config.parallelism_config_"


def mesh_problems(topo, raw: dict, where: str) -> list[Problem]:
    problems = []
    mesh = topo.dp_replicate_size * topo.dp_shard_size * topo.sp_size
    if mesh != topo.world_size:
        rest = topo.dp_replicate_size * topo.sp_size
        fix = f"set num_processes to {mesh} (the total over all machines)"
        if topo.world_size % rest == 0:
            fix += f", or dp_shard_size to {topo.world_size // rest}"
        msg = (
            f"dp_replicate {topo.dp_replicate_size} x dp_shard {topo.dp_shard_size} x sp {topo.sp_size} = {mesh}, "
            f"but num_processes (total over {topo.num_machines} machine(s)) is {topo.world_size}"
        )
        problems.append(error(where, "num_processes", msg, fix))
    if topo.num_processes % max(topo.num_machines, 1):
        msg = f"{topo.num_processes} processes do not split evenly over {topo.num_machines} machines"
        problems.append(error(where, "num_machines", msg, "make num_processes a multiple of num_machines"))
    pc = raw.get("parallelism_config") or {}
    for size in ("cp_size", "tp_size"):
        if topo.sp_size > 1 and int(pc.get("parallelism_config_" + size, 1) or 1) != 1:
            fix = f"set parallelism_config_{size}: 1 (Ulysses SP combines with data parallelism only)"
            problems.append(error(where, PC + size, f"must be 1 with sp={topo.sp_size}", fix))
    return problems


def gpu_problems(launch, where: str) -> list[Problem]:
    """num_processes against the GPUs per node, when they are known (visible, flags or intended)."""
    topo, machine = launch.topo, launch.machine
    if launch.sft.use_cpu:
        return []
    if machine.gpus_per_node is None:
        return []  # said once by the machine note: pass --num-gpus
    need = topo.processes_per_machine
    nodes = machine.num_nodes or 1
    problems = []
    if machine.gpus_per_node == 0 and machine.this_machine:
        msg = f"needs {need} GPUs per machine x {topo.num_machines} machine(s) and this machine has none visible"
        fix = (
            "launch on a machine with the GPUs (or check CUDA_VISIBLE_DEVICES); on this machine, "
            f"`make rehearse RECIPE={launch.source}` runs the recipe in miniature on CPU, end to end and offline, "
            "and a CPU recipe (tiny-2k) trains for real"
        )
        return [error(where, "num_processes", msg, fix)]
    if machine.gpus_per_node != need:
        msg = (
            f"starts {need} processes per machine but the machine has {machine.gpus_per_node} GPUs ({machine.source})"
        )
        fix = f"set num_processes to {machine.gpus_per_node * topo.num_machines} (total) and resize the mesh"
        problems.append(error(where, "num_processes", msg, fix + meshes_that_fit(launch, machine.gpus_per_node)))
    if nodes != topo.num_machines and machine.source == "flags":
        msg = f"is {topo.num_machines} but --num-nodes says {nodes}"
        problems.append(error(where, "num_machines", msg, f"set num_machines: {nodes} and num_processes to match"))
    return problems


def check(launch) -> list[Problem]:
    from longctx.config.paths import display_path

    if launch.topo is None:
        return []
    where = display_path(Path(launch.topo.path))
    return mesh_problems(launch.topo, launch.accel_raw or {}, where) + gpu_problems(launch, where)


def meshes_that_fit(launch, gpus_per_node: int) -> str:
    """The sp x dp meshes for this many GPUs per node that the model's heads allow (an SP group stays inside a
    node), with the shipped accelerate YAMLs that have them: the resize, spelled out."""
    from longctx.config.paths import REPO_ROOT, display_path
    from longctx.config.topology import ConfigError, read_topology
    from longctx.preflight.checks.heads import model_sp_sizes

    if launch.facts is None or gpus_per_node < 1:
        return ""
    facts, nodes = launch.facts, launch.topo.num_machines
    world = gpus_per_node * nodes
    sizes = [sp for sp in model_sp_sizes(facts.config, facts.num_heads, facts.num_kv_heads) if gpus_per_node % sp == 0]
    shipped = {}
    for path in sorted((REPO_ROOT / "accelerate_configs").glob("*.yaml")):
        try:
            topo = read_topology(path)
        except ConfigError:
            continue
        if topo.world_size == world and not path.name.startswith("cpu-"):
            shipped.setdefault(topo.sp_size, display_path(path))
    options = [f"sp {sp} x dp {world // sp}" + (f" ({shipped[sp]})" if sp in shipped else "") for sp in sizes[::-1]]
    heads = f"{facts.num_heads} query / {facts.num_kv_heads} KV heads"
    return f"; meshes that fit {world} GPUs with this model's {heads}: {', '.join(options)}" if options else ""
