"""Which hardware a launch is checked against: the flags, the recipe's intended topology, or what is visible."""

import os

from longctx.preflight.checks.host_fit import UNKNOWN_RAM_WARN_GIB
from longctx.preflight.load import Launch


def visible_gpus() -> tuple[int, float | None]:
    """(GPU count, GiB of the first GPU as torch reports it) from torch.cuda; (0, None) without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return 0, None
    return torch.cuda.device_count(), torch.cuda.get_device_properties(0).total_memory / 2**30


def host_ram_gib() -> float | None:
    """This machine's RAM (GiB) as the kernel counts it (MemTotal: the installed RAM less what the firmware and
    the kernel reserved, so a little under the sold figure); None where the OS does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return None


def resolve_machine(launch: Launch, args) -> list[str]:
    """Fill `launch.machine` and return notes on the checks that could not run for lack of hardware facts."""
    m = launch.machine
    m.this_machine = bool(args.this_machine)
    m.reads_dataset = not getattr(args, "no_dataset", False)
    m.gpu_memory_gb = args.gpu_memory_gb
    m.hardware, m.doc_length = getattr(args, "hardware", None), getattr(args, "doc_length", None)
    m.host_memory_gib = args.host_memory_gb or (host_ram_gib() if m.this_machine else None)
    if args.num_gpus is not None:
        m.gpus_per_node, m.num_nodes, m.source = args.num_gpus, args.num_nodes or 1, "flags"
    elif args.intended and launch.topo is not None:
        m.gpus_per_node, m.num_nodes, m.source = (
            launch.topo.processes_per_machine,
            launch.topo.num_machines,
            "intended",
        )
    elif launch.sft is not None and not launch.sft.use_cpu:
        count, memory = visible_gpus()
        if count or m.this_machine:
            m.gpus_per_node, m.num_nodes, m.source = count, args.num_nodes or 1, "visible"
            m.gpu_memory_gib = None if m.gpu_memory_gb else memory
    notes = []
    if launch.sft is not None and launch.sft.use_cpu:
        return notes
    if m.gpus_per_node is None:
        notes.append("GPU count unknown (none visible, no --num-gpus): the GPUs-per-node check was skipped")
    if m.gpu_memory_gb is None and m.gpu_memory_gib is None:
        notes.append("GPU memory unknown (none visible, no --gpu-memory-gb): the memory-fit check was skipped")
    if m.host_memory_gib is None:
        notes.append(
            "host memory unknown (no --host-memory-gb, no --this-machine): the host plan is not checked against a "
            f"node's RAM (a need above {UNKNOWN_RAM_WARN_GIB:.0f} GiB is warned)"
        )
    return notes
