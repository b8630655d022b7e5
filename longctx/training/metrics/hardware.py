"""The hardware the step-time plan and MFU are figured on: peak FLOP/s, links and their sources, in one place.

Why one home: MFU (longctx/training/metrics/throughput.py) divides by the device's dense bf16 peak, the step-time
plan (longctx/memory_plan/step_time.py) by the same peak times what a kernel reaches of it, and the row balancer
(longctx/training/data/balance.py) weighs attention against matmul work by the same two efficiencies. A profile is
a figure per field with the source of each: a datasheet (what the part is sold as), a measurement (and where it
was made), or an assumption (said to be one, to be replaced by `python -m longctx.memory_plan.fit`, which writes a
profile of its own as JSON: `--hardware PATH` loads it). No GPU of this project has measured any of the efficiencies
below except the H200's matmul one; every figure the plan prints from them is marked predicted.
"""

import json
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

# Dense bf16 peak per device, for MFU/HFU (device names as torch reports them; the first match wins, so the PCIe
# H100's lower clock is listed before the SXM part). A device not listed gets no MFU (everything else still logs).
PEAK_BF16_FLOPS = {
    "H100 PCIe": 756e12,  # NVIDIA H100 datasheet, PCIe card: 1,513 TFLOPS bf16 with sparsity, half of it dense
    "H200": 989e12,  # NVIDIA H200 datasheet: 1,979 TFLOPS bf16 with sparsity, 989 dense (the H100 SXM's GH100 SMs)
    "H100": 989e12,  # NVIDIA H100 datasheet, SXM5: 1,979 TFLOPS bf16 with sparsity, 989.4 dense
    "A100": 312e12,  # NVIDIA A100 datasheet: 312 TFLOPS bf16 dense
    "B200": 2250e12,  # NVIDIA HGX B200 specifications: 4.5 PFLOPS bf16 with sparsity, 2.25 dense
    "L40S": 362e12,  # NVIDIA L40S datasheet: 362 TFLOPS bf16 dense
}

NVLINK4 = "NVLink 4: 900 GB/s per GPU, both directions together (H100 SXM5 and H200 datasheets): 450 GB/s each way"
NDR = "one 400 Gb/s NDR InfiniBand port (ConnectX-7) per GPU, DGX H100/H200 reference design: 50 GB/s each way"
PCIE5 = "PCIe Gen5 x16: 128 GB/s both directions (H100 SXM5 and H200 datasheets): 64 GB/s each way"
DDR5_NODE = "DGX H100/H200 host: 2 Xeon Platinum 8480C, 8 DDR5-4800 channels each: 2 x 8 x 38.4 GB/s = 614 GB/s"
FA2_H100 = (
    "assumed: FlashAttention-3 paper (Shah et al. 2024, arXiv 2407.08608), H100 SXM5, head dim 128: "
    "FlashAttention-2's causal forward reaches 333-335 TFLOP/s at 8K-16K, its backward less; 0.30 of the dense peak "
    "(297 TFLOP/s) for forward and backward together. torch's varlen kernel (what the isolated sdpa runs on a GPU) "
    "is FlashAttention-2's"
)
RING = (
    "ring-flash-attention's own benchmark (../shared/reference/anchors.md): its zigzag ring forward+backward at 85.9% "
    "of FlashAttention; assumed for the llama3 functions this repository runs (ring_gpu.py), not measured"
)
LINKS = "assumed: what NCCL collectives reach of a link's bandwidth (0.75); not measured here"
HOST = "assumed: what DeepSpeed's CPU Adam reaches of the node's DRAM bandwidth (0.5); not measured here"
HBM = "assumed: what the GPU optimizer's elementwise kernels reach of HBM bandwidth (0.7); not measured here"


@dataclass(frozen=True)
class HardwareProfile:
    """One node type. Bandwidths in bytes/s per GPU and direction; efficiencies are what is reached of the figure
    before them (`fit` calibrates exactly those, FITTED)."""

    name: str
    peak_flops: float  # dense bf16 FLOP/s per GPU
    matmul_efficiency: float  # of the peak, on the decoder's matmuls (large GEMMs)
    attention_efficiency: float  # of the peak, on the causal attention kernel's forward + backward
    ring_efficiency: float  # of the attention kernel's rate, when the ring splits it into R hops
    nvlink_bytes_per_s: float  # inside a node
    network_bytes_per_s: float  # across nodes
    pcie_bytes_per_s: float  # GPU <-> host
    hbm_bytes_per_s: float  # GPU memory (the GPU optimizer step is bound by it)
    host_memory_bytes_per_s: float  # one node's DRAM (CPU Adam is bound by it)
    nvlink_efficiency: float = 0.75
    network_efficiency: float = 0.75
    pcie_efficiency: float = 0.75
    hbm_efficiency: float = 0.7
    host_efficiency: float = 0.5
    sources: dict = field(default_factory=dict, compare=False)

    def flops(self, kind: str) -> float:
        """FLOP/s reached on `matmul` or `attention` work."""
        return self.peak_flops * (self.matmul_efficiency if kind == "matmul" else self.attention_efficiency)

    def with_values(self, source: str, **values) -> "HardwareProfile":
        """This profile with `values` replaced, each field's source now `source`."""
        return replace(self, **values, sources={**self.sources, **dict.fromkeys(values, source)})

    def to_json(self) -> dict:
        return asdict(self)


FITTED = ("matmul_efficiency", "attention_efficiency", "nvlink_efficiency", "network_efficiency", "pcie_efficiency",
          "host_efficiency")  # fmt: skip
COMMON_SOURCES = {
    "ring_efficiency": RING, "nvlink_bytes_per_s": NVLINK4, "network_bytes_per_s": NDR, "pcie_bytes_per_s": PCIE5,
    "host_memory_bytes_per_s": DDR5_NODE, "attention_efficiency": FA2_H100, "nvlink_efficiency": LINKS,
    "network_efficiency": LINKS, "pcie_efficiency": LINKS, "hbm_efficiency": HBM, "host_efficiency": HOST,
}  # fmt: skip
COMMON = {"ring_efficiency": 0.859, "nvlink_bytes_per_s": 450e9, "network_bytes_per_s": 50e9, "pcie_bytes_per_s": 64e9}
COMMON |= {"host_memory_bytes_per_s": 614e9, "attention_efficiency": 0.30}
H200_GEMM = "measured: a bf16 8192^3 matmul at 769-798 TFLOP/s on this project's H200 (../shared/gpu/README.md): 0.79"

PROFILES = {
    "h100-sxm": HardwareProfile(
        name="h100-sxm",
        peak_flops=PEAK_BF16_FLOPS["H100"],
        matmul_efficiency=0.79,
        hbm_bytes_per_s=3.35e12,
        **COMMON,
        sources={
            **COMMON_SOURCES,
            "peak_flops": "NVIDIA H100 datasheet, SXM5: 989.4 TFLOPS bf16 dense",
            "matmul_efficiency": "assumed: the H200's measured 0.79 (the same GH100 SMs); no H100 measured here",
            "hbm_bytes_per_s": "NVIDIA H100 datasheet, SXM5: 3.35 TB/s HBM3",
        },
    ),
    "h200": HardwareProfile(
        name="h200",
        peak_flops=PEAK_BF16_FLOPS["H200"],
        matmul_efficiency=0.79,
        hbm_bytes_per_s=4.8e12,
        **COMMON,
        sources={
            **COMMON_SOURCES,
            "peak_flops": "NVIDIA H200 datasheet: 989 TFLOPS bf16 dense",
            "matmul_efficiency": H200_GEMM,
            "hbm_bytes_per_s": "NVIDIA H200 datasheet: 4.8 TB/s HBM3e",
        },
    ),
}
DEFAULT_PROFILE = "h100-sxm"  # the catalog's target GPU (recipes/README.md: 80 GB GPUs)


def profile(name_or_path: str | None = None) -> HardwareProfile:
    """A named profile (PROFILES), or one a fit wrote (a JSON path); the default without either."""
    key = name_or_path or DEFAULT_PROFILE
    if key in PROFILES:
        return PROFILES[key]
    path = Path(key)
    if not path.is_file():
        raise ValueError(f"no hardware profile {key!r}: one of {', '.join(PROFILES)}, or a JSON file `fit` wrote")
    data = json.loads(path.read_text())
    known = {f.name for f in fields(HardwareProfile)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{path}: not hardware profile fields: {', '.join(unknown)}")
    return HardwareProfile(**data)


def profile_for_gpu(gpu_gb: float | None) -> str:
    """The named profile of a GPU given by its memory (`--gpu-memory-gb`): 141 is an H200, anything else the
    catalog's H100 SXM."""
    return "h200" if gpu_gb and gpu_gb >= 141 else DEFAULT_PROFILE


def profile_for_device(device_name: str | None) -> HardwareProfile:
    """The profile of a CUDA device by its name (the row balancer's weights); the default elsewhere."""
    return PROFILES["h200"] if device_name and "H200" in device_name else PROFILES[DEFAULT_PROFILE]
