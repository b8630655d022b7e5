"""A predicted step time, component by component, on a named hardware profile: what `make plan` prints beside memory.

Each micro-step a rank computes its share of the layers' matmuls and of the causal attention (plus what
checkpointing recomputes), exchanges heads in Ulysses' all-to-alls (on the critical path: the attention waits for
them), all-gathers K/V over the ring one KV head at a time (each head's gather but the first hides behind the
attention of the head before; the causal balance's query swaps do not hide), gathers and reduce-scatters ZeRO's
partitions (prefetched beside the compute: only what exceeds the micro-step's compute is exposed) and, with offload,
moves gradients and checkpoints over PCIe (on the compute stream: exposed). Each optimizer step adds the Adam
update, on the host's DRAM for the offloaded share
(DeepSpeed's CPU Adam) and on the GPU's HBM for the rest, and the updated weights back over PCIe.

Every figure is a prediction from the profile's datasheet figures and assumed efficiencies
(longctx/training/metrics/hardware.py), never a measurement; `python -m longctx.memory_plan.fit` calibrates the
efficiencies from measured steps, holding some out to report the model's error.
"""

from dataclasses import dataclass

from longctx.memory_plan import time_terms
from longctx.memory_plan.arch import Arch
from longctx.memory_plan.inputs import PlanInputs
from longctx.training.metrics.flops import FlopCounts
from longctx.training.metrics.hardware import HardwareProfile

COMPONENTS = (
    "linear", "attention", "recompute", "all_to_all", "ring_exposed", "zero_exposed", "optimizer_offload",
    "checkpoint_offload", "optimizer_step",
)  # fmt: skip


@dataclass(frozen=True)
class StepTime:
    """Seconds per optimizer step by component (COMPONENTS, summed), the overlapped totals behind the exposed ones,
    and the derived rates. `profile`: the hardware profile's name; every figure is predicted."""

    components: dict
    overlapped: dict  # the ring's and ZeRO's whole traffic time, of which `*_exposed` is what compute does not hide
    traffic: dict  # seconds on the links by the kinds a step record measures (`traffic`), per optimizer step
    tokens_per_step: float
    model_flops_per_gpu: float  # per optimizer step, MFU's numerator (flops.FlopCounts.model)
    num_gpus: int
    profile: HardwareProfile
    doc_length: int

    @property
    def step_s(self) -> float:
        return sum(self.components.values())

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_step / self.step_s / self.num_gpus

    @property
    def mfu(self) -> float:
        return self.model_flops_per_gpu / self.step_s / self.profile.peak_flops

    @property
    def bound(self) -> str:
        """The component that takes the most of the step."""
        return max(self.components, key=self.components.get)

    def line(self) -> str:
        """One line: seconds, tokens/s per GPU, MFU and the bounding component, marked predicted."""
        share = self.components[self.bound] / self.step_s
        return (
            f"{self.step_s:,.1f} s/step, {self.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, MFU {self.mfu:.1%}, "
            f"bound by {self.bound} ({share:.0%})"
        )


def link(profile: HardwareProfile, ranks: int, node_gpus: int) -> float:
    """Bytes/s a collective over `ranks` consecutive ranks reaches: NVLink inside a node, the network across."""
    if ranks <= node_gpus:
        return profile.nvlink_bytes_per_s * profile.nvlink_efficiency
    return profile.network_bytes_per_s * profile.network_efficiency


def micro_step(arch: Arch, counts: FlopCounts, i: PlanInputs, hw: HardwareProfile, doc: int) -> tuple[dict, dict]:
    """(exposed seconds by component, overlapped totals) of one micro-step of one rank."""
    f = time_terms.step_flops(counts, i, doc)
    attention_rate = hw.flops("attention") * (hw.ring_efficiency if i.ring > 1 else 1.0)
    linear = (f["linear"] + f.get("reference_linear", 0.0)) / hw.flops("matmul")
    attention = (f["attention"] + f.get("reference_attention", 0.0)) / attention_rate
    recompute = f["recompute_linear"] / hw.flops("matmul") + f["recompute_attention"] / attention_rate
    compute = linear + attention + recompute
    node = i.node_gpus
    gathered, reduced, swapped = time_terms.ring_bytes(arch, i, doc)
    gather, swap = (gathered + reduced) / link(hw, i.sp, node), swapped / link(hw, i.sp, node)
    ring_compute = attention + f["recompute_attention"] / attention_rate
    strides = time_terms.ring_strides(arch, i)  # the first stride's gather is exposed, each next one hides
    ring_exposed = gather / strides + (strides - 1) / strides * max(0.0, gather - ring_compute) + swap
    gathered, reduced = time_terms.zero_bytes(arch, i)
    zero_total = (gathered + reduced) / link(hw, i.num_gpus, node)
    pcie = time_terms.pcie_bytes(arch, i)
    pcie_rate = hw.pcie_bytes_per_s * hw.pcie_efficiency
    exposed = {
        "linear": linear,
        "attention": attention,
        "recompute": recompute,
        "all_to_all": time_terms.all_to_all_bytes(arch, i) / link(hw, i.ulysses, node),
        "ring_exposed": ring_exposed if i.ring > 1 else 0.0,
        "zero_exposed": max(0.0, zero_total - compute),
        "optimizer_offload": pcie["optimizer_micro"] / pcie_rate,
        "checkpoint_offload": pcie["checkpoints"] / pcie_rate,
    }
    return exposed, {"ring": gather + swap, "zero": zero_total}


def traffic(arch: Arch, i: PlanInputs, hw: HardwareProfile, doc: int) -> dict:
    """Seconds on the links per micro-step, overlapped or not, by the kinds a step record measures
    (longctx/training/metrics/step_record.py `comm_s`): what `fit` compares with measured steps."""
    node, pcie_rate = i.node_gpus, hw.pcie_bytes_per_s * hw.pcie_efficiency
    ring_link, zero_link = link(hw, i.sp, node), link(hw, i.num_gpus, node)
    ring_gathered, ring_reduced, swapped = time_terms.ring_bytes(arch, i, doc)
    zero_gathered, zero_reduced = time_terms.zero_bytes(arch, i)
    pcie = time_terms.pcie_bytes(arch, i)
    return {
        "all_to_all": time_terms.all_to_all_bytes(arch, i) / link(hw, i.ulysses, node),
        "p2p": swapped / ring_link,
        "all_gather": ring_gathered / ring_link + zero_gathered / zero_link,
        "reduce": ring_reduced / ring_link + zero_reduced / zero_link,
        "pcie": (pcie["optimizer_micro"] + pcie["checkpoints"]) / pcie_rate,
    }


def optimizer_step(arch: Arch, i: PlanInputs, hw: HardwareProfile) -> dict:
    """Seconds of the optimizer step itself: Adam on the host (offloaded share) and on the GPU, the weights back over
    PCIe, and under ZeRO-2 the all-gather of the updated weights."""
    host, gpu = time_terms.optimizer_bytes(arch, i)
    back = time_terms.pcie_bytes(arch, i)["optimizer_step"] / (hw.pcie_bytes_per_s * hw.pcie_efficiency)
    adam_host = host / (hw.host_memory_bytes_per_s * hw.host_efficiency)
    gathered = arch.params * time_terms.BF16 * (i.num_gpus - 1) / i.num_gpus if i.zero_stage == 2 else 0.0
    adam_gpu = gpu / (hw.hbm_bytes_per_s * hw.hbm_efficiency)
    return {
        "optimizer_offload": adam_host + back,
        "optimizer_step": adam_gpu + gathered / link(hw, i.num_gpus, i.node_gpus),
    }


def predict(
    arch_config: dict, inputs: PlanInputs, profile: HardwareProfile, doc_length: int | None = None
) -> StepTime:
    """The predicted optimizer step of `inputs` on `profile`, rows of documents of `doc_length` tokens (default: one
    document a row, attention's most costly case)."""
    arch, counts = Arch.from_config(arch_config), FlopCounts.from_config(arch_config)
    doc = min(doc_length or inputs.seq_len, inputs.seq_len)
    micro, overlapped = micro_step(arch, counts, inputs, profile, doc)
    steps = inputs.accumulation
    components = dict.fromkeys(COMPONENTS, 0.0)
    for name, value in micro.items():
        components[name] += value * steps
    for name, value in optimizer_step(arch, inputs, profile).items():
        components[name] += value
    model = time_terms.step_flops(counts, inputs, doc)["model"] * steps
    dp = inputs.num_gpus // inputs.sp
    links = {k: v * steps for k, v in traffic(arch, inputs, profile, doc).items()}
    links["pcie"] += time_terms.pcie_bytes(arch, inputs)["optimizer_step"] / (
        profile.pcie_bytes_per_s * profile.pcie_efficiency
    )
    return StepTime(
        components=components,
        overlapped={k: v * steps for k, v in overlapped.items()},
        traffic=links,
        tokens_per_step=inputs.micro_batch * inputs.seq_len * steps * dp,
        model_flops_per_gpu=model,
        num_gpus=inputs.num_gpus,
        profile=profile,
        doc_length=doc,
    )
