"""Published memory points the plan (memory_plan/memory.py) is calibrated against; tests hold it to them.

Sources (shared/reference/anchors.md): the ALST paper and ArcticTraining recipes for Llama-3.1-8B
(ZeRO-3 with CPU optimizer offload, bf16 SP communication, FlashAttention, micro batch 1) and the Hugging
Face blog "Ulysses Sequence Parallelism" for Qwen3-4B on H100s. A max-length point compares the longest
sequence the plan fits with the published one; a peak point compares the plan's total with the
published peak; an OOM point must not fit.

Tolerance: 15% (the issue's bar); a max-length point may also be over by up to 20% when the published
length fits the plan (the correct side of fit/OOM: "about 32K" was the largest power of two tried). The
1xH200 points (FlashAttention 3, parameter offload; anchors.md only) hold to 20%: the plan's attention and
gradient terms are FlashAttention-2 sized.

The blog says ZeRO-3 with optimizer offload, but its 1-GPU 8K peak (76.4 GB for a 4B model) is only
reachable with the optimizer states on the GPU; its points are modelled without offload.
"""

import json
from dataclasses import dataclass, field

from config.paths import ARCHITECTURES_DIR as ARCH
from memory_plan.memory import estimate, max_seq_len

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
QWEN_4B = "Qwen/Qwen3-4B"
H100_GB, H200_GB = 80.0, 141.0
GIB_PER_GB = 1e9 / 2**30
ALST = {"offload_optimizer": True, "offload_params": False, "grad_ckpt": True, "liger": False}
ALL_ON = {"liger": True, "tiled_mlp": True, "act_offload": True}


@dataclass(frozen=True)
class Point:
    """One published measurement: `max_length` (longest that fit), `peak_gb` (measured), or `oom`."""

    name: str
    model: str
    sp: int
    num_gpus: int
    gpu_gb: float
    options: dict = field(default_factory=dict)
    max_length: int | None = None
    seq_len: int | None = None
    peak_gb: float | None = None
    oom: bool = False
    tolerance: float = 0.15

    def kwargs(self) -> dict:
        base = {**ALST, "tiled_mlp": False, "act_offload": False}
        return {**base, **self.options, "num_gpus": self.num_gpus}


POINTS = (
    Point("ALST 8xH100 plain HF", LLAMA_8B, 1, 8, H100_GB, max_length=32_000),
    Point("ALST 8xH100 Liger", LLAMA_8B, 1, 8, H100_GB, {"liger": True}, max_length=160_000),
    Point("ALST 8xH100 Liger sp=8", LLAMA_8B, 8, 8, H100_GB, {"liger": True}, max_length=1_100_000),
    Point("ALST 8xH100 Liger+TiledMLP sp=8", LLAMA_8B, 8, 8, H100_GB, {"liger": True, "tiled_mlp": True}, 1_200_000),
    Point(
        "ALST 8xH100 Liger+act offload sp=8", LLAMA_8B, 8, 8, H100_GB, {"liger": True, "act_offload": True}, 2_400_000
    ),
    Point("ALST 8xH100 everything sp=8", LLAMA_8B, 8, 8, H100_GB, ALL_ON, max_length=3_700_000),
    Point("ALST 1xH100 everything", LLAMA_8B, 1, 1, H100_GB, {**ALL_ON, "offload_params": True}, max_length=500_000),
    Point("ALST 1xH200 baseline", LLAMA_8B, 1, 1, H200_GB, {"offload_params": True}, max_length=65_000),
    Point(
        "ALST 1xH200 Liger",
        LLAMA_8B,
        1,
        1,
        H200_GB,
        {"offload_params": True, "liger": True},
        max_length=300_000,
        tolerance=0.2,
    ),
    Point(
        "ALST 1xH200 Liger+act offload",
        LLAMA_8B,
        1,
        1,
        H200_GB,
        {"offload_params": True, "liger": True, "act_offload": True},
        max_length=650_000,
        tolerance=0.2,
    ),
    Point(
        "ALST 1xH200 everything",
        LLAMA_8B,
        1,
        1,
        H200_GB,
        {**ALL_ON, "offload_params": True},
        max_length=1_200_000,
        tolerance=0.2,
    ),
    Point(
        "HF blog Qwen3-4B 1 GPU 8K", QWEN_4B, 1, 1, H100_GB, {"offload_optimizer": False}, seq_len=8192, peak_gb=76.4
    ),
    *(
        Point(f"HF blog Qwen3-4B sp=4 {s // 1024}K", QWEN_4B, 4, 4, H100_GB, {"offload_optimizer": False}, None, s, gb)
        for s, gb in ((8192, 23.4), (32768, 35.0), (65536, 50.5), (98304, 66.0))
    ),
    Point(
        "HF blog Qwen3-4B sp=4 128K", QWEN_4B, 4, 4, H100_GB, {"offload_optimizer": False}, seq_len=131072, oom=True
    ),
)


def arch_config(model: str) -> dict:
    return json.loads((ARCH / model / "config.json").read_text())


def ratio(point: Point) -> float:
    """Plan over published: the solved max length, or the planned peak; for an OOM point, plan over GPU."""
    config, gpu_gib = arch_config(point.model), point.gpu_gb * GIB_PER_GB
    if point.max_length is not None:
        return max_seq_len(config, gpu_gib, sp=point.sp, **point.kwargs()) / point.max_length
    planned = estimate(config, seq_len=point.seq_len, sp=point.sp, **point.kwargs()).total_gib
    return planned / (point.peak_gb * GIB_PER_GB if point.peak_gb else gpu_gib)


def within(point: Point) -> bool:
    """The calibration bar for one point (see the module docstring)."""
    r = ratio(point)
    if point.oom:
        return r > 1
    return abs(r - 1) <= point.tolerance or (point.max_length is not None and 1 <= r <= 1.2)


if __name__ == "__main__":
    for p in POINTS:
        print(f"{p.name:<40} plan/published {ratio(p):.2f} {'ok' if within(p) else 'OUT OF TOLERANCE'}")
