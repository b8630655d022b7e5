"""One JSON line per logged training step (`step_record: PATH`), what the GPU step benchmark reads.

Why a record of its own: the logged metrics (throughput.py) reset the GPU's peak at each log and say nothing of the
memory reserved (what an out-of-memory is about) or of the host (what the OOM killer is about under offload). A
benchmark row needs both, per step, with nothing an earlier step left behind counted in.

Each line: the step, its loss, its tokens and documents (a document starts wherever position_ids do not step by
+1, read once per forward: one host sync a forward, only while recording), `step_s` from the step's begin to its
end (the device synchronised), the trainer's own `tokens_per_s_per_gpu`, `model_tflops_per_gpu`, `mfu` and `hfu`
as it logs them (throughput.py: causal pairs per document, the recompute of checkpointing), the GPU's peak
allocated and reserved GiB, the process's peak and current RSS, the node's used memory (MemTotal - MemAvailable)
at the step's end and torch's pinned host memory, and `optimizer_step` (on_step_end follows the optimizer's step).

With `step_record_components: true` each recorded step also runs under torch.profiler, and the line gains `comm_s`:
the seconds of the step's communication by the kind the step-time plan predicts (longctx/memory_plan/step_time.py
`traffic`): `all_to_all` (Ulysses' head exchanges, and the Gated DeltaNet layers'), `p2p` (point-to-point: the ring's
query swaps), `all_gather` (ZeRO-3's gathers, and the ring's K/V gathers: the profiler does not say which group),
`reduce` (ZeRO's reduce-scatters and all-reduces, the ring's K/V gradients), and on CUDA `pcie` (the step's host
copies: offload). Read from the collectives' own profiler ranges (`nccl:*` with their kernels' device time on CUDA,
`gloo:*` CPU time on CPU, which includes waiting for the slowest rank) and the memcpy activities; the profiler slows
the step it records (compare `step_s` of runs recorded the same way).

Before each step the CUDA caching allocator's free blocks are released (`empty_cache`), its peaks reset, and the
kernel's RSS high-water mark reset (`/proc/self/clear_refs`): reserved memory then counts only the blocks this step
needed, not those a longer step before it left cached. The allocator re-maps memory every step for it: a setting
for measuring, not for training. The trainer should log every step (`logging_steps: 1`): a line is written per log,
by the first rank, with its own tokens (all of a row's at sp=1).
"""

import json
import time
from pathlib import Path

import torch
from transformers import TrainerCallback

GIB = 2**30
TRAINER_METRICS = ("tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu", "hfu")
# (kind, profiler range substrings) of the collectives, matched in order on `nccl:` and `gloo:` ranges
COMM_KINDS = (
    ("all_to_all", ("all_to_all", "alltoall")),
    ("p2p", ("send", "recv", "batch_isend_irecv")),
    ("all_gather", ("all_gather", "allgather")),
    ("reduce", ("reduce_scatter", "all_reduce", "allreduce", "reduce")),
)


def comm_seconds(events, cuda: bool) -> dict:
    """Seconds by kind (COMM_KINDS, and `pcie` on CUDA) of profiler averages: (key, cpu_time_total, device_time_total)
    in microseconds, as `key_averages()` gives them."""
    out = dict.fromkeys([kind for kind, _ in COMM_KINDS] + (["pcie"] if cuda else []), 0.0)
    for key, cpu_us, device_us in events:
        name = key.lower()
        if cuda and name.startswith("memcpy") and ("htod" in name or "dtoh" in name):
            out["pcie"] += device_us / 1e6
            continue
        if not name.startswith("nccl:" if cuda else "gloo:"):
            continue
        kind = next((k for k, words in COMM_KINDS if any(w in name for w in words)), None)
        if kind:
            out[kind] += (device_us if cuda else cpu_us) / 1e6
    return {k: round(v, 6) for k, v in out.items()}


def proc_kib(path: str, key: str) -> float | None:
    """A `Key:   N kB` line of a /proc file, in KiB; None where the OS has no such file."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key + ":"):
                return float(line.split()[1])
    except OSError:
        return None
    return None


def host_memory() -> dict:
    """The process's peak and current RSS and the node's used memory, GiB."""
    peak, now = proc_kib("/proc/self/status", "VmHWM"), proc_kib("/proc/self/status", "VmRSS")
    total, free = proc_kib("/proc/meminfo", "MemTotal"), proc_kib("/proc/meminfo", "MemAvailable")
    out = {"rss_peak_gib": peak, "rss_gib": now, "node_used_gib": total - free if total and free else None}
    return {k: round(v / 2**20, 2) if v is not None else None for k, v in out.items()}


def pinned_memory() -> dict:
    """torch's pinned host allocator's byte counters (CUDA builds), GiB."""
    try:
        stats = torch.cuda.host_memory_stats()
    except (AttributeError, RuntimeError):
        return {}
    return {k: round(v / GIB, 2) for k, v in stats.items() if "bytes" in k}


def reset_rss_peak() -> None:
    """Reset the kernel's RSS high-water mark of this process (Linux: write 5 to clear_refs); ignored elsewhere."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def start_profiler(cuda: bool):
    """torch.profiler over one step: CPU ranges (the collectives' names), and CUDA activity (their kernels, copies)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    profiler = profile(activities=activities)
    profiler.start()
    return profiler


def documents(position_ids: torch.Tensor) -> int:
    """Documents in a [batch, length] block: each row's start and every position that does not step by +1."""
    steps = position_ids[:, 1:] - position_ids[:, :-1] != 1
    return int(steps.sum()) + position_ids.shape[0]


class StepRecord(TrainerCallback):
    """Writes the module docstring's line for every logged step to `path` (appended, flushed)."""

    def __init__(self, trainer, path: str, components: bool = False):
        self.path, self.components, self.profiler = Path(path), components, None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.device = torch.device(trainer.accelerator.device)
        self.cuda = self.device.type == "cuda"
        self.shape = {"tokens": 0, "documents": 0}
        self.pending: dict | None = None
        self.start = 0.0
        trainer.model.register_forward_pre_hook(self._count, with_kwargs=True)

    def _count(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None or not module.training:
            return
        pos = kwargs.get("position_ids")
        self.shape["tokens"] += ids.numel()
        self.shape["documents"] += documents(pos.expand_as(ids)) if pos is not None else ids.shape[0]

    def on_step_begin(self, args, state, control, **kwargs):
        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
        reset_rss_peak()
        self.shape = {"tokens": 0, "documents": 0}
        if self.components:
            self.profiler = start_profiler(self.cuda)
        self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if self.cuda:
            torch.cuda.synchronize(self.device)
        row = {"step": state.global_step, **self.shape, "step_s": round(time.perf_counter() - self.start, 3)}
        if self.profiler is not None:
            self.profiler.stop()
            events = [(e.key, e.cpu_time_total, e.device_time_total) for e in self.profiler.key_averages()]
            row["comm_s"], self.profiler = comm_seconds(events, self.cuda), None
        if self.cuda:  # read here: the throughput callback resets the peaks when it logs
            row["peak_alloc_gib"] = round(torch.cuda.max_memory_allocated(self.device) / GIB, 2)
            row["peak_reserved_gib"] = round(torch.cuda.max_memory_reserved(self.device) / GIB, 2)
        self.pending = row | host_memory() | {"pinned": pinned_memory(), "optimizer_step": True}

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.pending is None or not logs or "loss" not in logs or not state.is_world_process_zero:
            return
        line = self.pending | {"loss": logs["loss"]} | {k: logs[k] for k in TRAINER_METRICS if k in logs}
        with self.path.open("a") as out:
            out.write(json.dumps(line) + "\n")
            out.flush()
        self.pending = None
