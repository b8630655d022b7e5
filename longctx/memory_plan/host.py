"""Host memory of one node, term by term, each from the upstream code that allocates it (bytes).

Why a model of its own: under ZeRO-3 offload the host, not the GPU, runs out first. An 8B model on one GPU with
the optimizer offloaded needs about 140 GiB of host memory (below), which a 128 GiB node cannot give; the launch
would be killed at its first optimizer step, after a GPU-only plan had passed it.

Sources (DeepSpeed 0.19.8, torch 2.11-2.13, this repository):
- `master_weights`: `DeepSpeedZeroOptimizer_Stage3._create_fp32_partitions` (deepspeed/runtime/zero/stage3.py)
  keeps each sub-group's fp32 copy of the weight partition on the offload device (`.to(cpu, fp32).clone()`),
  4 bytes a parameter, in ordinary (not pinned) memory.
- `optimizer_states`: DeepSpeedCPUAdam.step (deepspeed/ops/adam/cpu_adam.py) creates `exp_avg` and
  `exp_avg_sq` in fp32 beside each fp32 partition on the first step: 8 bytes a parameter, not pinned.
- `fp32_gradients`: `initialize_optimizer_states` gives each sub-group (`sub_group_size` elements, 1e9 by
  default) an fp32 gradient buffer on the offload device, pinned when `offload_optimizer.pin_memory`.
- Partial offload (`offload_optimizer.ratio` below 1, ZeRO-3 only): `_create_fp32_partitions` puts the first
  `int((1 - ratio) x sub-groups)` sub-groups on the GPU (their master weights, fp32 gradients and, from the first
  step, the Adam states of the `backup_optimizer`, torch's AdamW), the rest on the host; the bf16 gradient
  partitions stay whole on the host. `optimizer_split` below; the GPU side is terms.model_states.
- `bf16_gradients`: `_setup_for_real_optimizer` keeps `grad_partitions_flat_buffer`, every gradient partition
  in the gradient-accumulation dtype (the model's bf16 unless `data_types.grad_accum_dtype` says otherwise),
  on the offload device, pinned likewise: where reduced gradients land before the step. The GPU keeps none.
- `offloaded_params`: with `offload_param`, `_create_param_groups_fp16_flat_cpu_memory` holds every bf16
  weight partition in one pinned buffer per parameter group.
- `offloaded_checkpoints`: activation-checkpoint offload (longctx/training/memory/alst.py `HostOffload.pack`) copies
  each checkpointed layer input (s x h bf16) into a freshly allocated pinned tensor: L of them per step.
- `runtime`: each rank's own process (Python, torch, transformers, DeepSpeed imported): 0.52 GiB measured on
  this repository's CPU stack (`ru_maxrss` after the imports), counted as 1 GiB; a CUDA context adds more,
  not measured here.

Pinned buffers: torch's pinned host allocator (`CachingHostAllocator::allocate`, aten/src/ATen/core/
CachingHostAllocator.h) rounds every allocation up to a power of two (torch 2.13 can switch that off above a
size with `pinned_max_round_threshold_mb` in the allocator config; torch 2.11 cannot, and no launch here sets
it), so a 15 GiB flat buffer takes 16 GiB and a 0.8 GiB checkpoint 1 GiB: up to 2x.
"""

import math

from longctx.memory_plan.arch import Arch

FP32, BF16 = 4, 2
ADAM_STATES = 2 * FP32
RUNTIME_PER_RANK = 2**30  # see the module docstring: 0.52 GiB measured on CPU, rounded up
DEFAULT_SUB_GROUP = 1e9  # DeepSpeed's zero_optimization.sub_group_size


def pinned(nbytes: float) -> float:
    """What torch's pinned host allocator takes for one allocation of `nbytes`: the next power of two."""
    return float(2 ** math.ceil(math.log2(nbytes))) if nbytes > 0 else 0.0


def sub_groups(tensors: list[float], sub_group_size: float) -> list[float]:
    """DeepSpeed's sub-groups of one rank's partition, as `_create_fp16_sub_groups` (deepspeed/runtime/zero/
    stage3.py) cuts them: tensors in order are added to a group until it reaches `sub_group_size` elements, the
    last group takes what is left; one group when the whole partition is not larger than `sub_group_size`."""
    total = sum(tensors)
    if total <= 0:
        return []
    if total <= sub_group_size:
        return [total]
    groups, current = [], 0.0
    for size in tensors:
        current += size
        if current >= sub_group_size:
            groups, current = groups + [current], 0.0
    return groups + ([current] if current else [])


def optimizer_split(
    arch: Arch, num_gpus: int, lora_rank: int | None, sub_group_size: float, ratio: float = 1.0
) -> tuple[list[float], list[float]]:
    """(sub-groups whose optimizer runs on the GPU, sub-groups on the host), in elements of one rank's partition.

    Each tensor's partition is ceil(elements / ranks) (ZeRO-3 `partition_numel`); LoRA adapters are modelled as
    one block (they are far below a sub-group). `ratio` is `offload_optimizer.ratio`: the first
    `int((1 - ratio) x groups)` groups stay on the GPU (`_create_fp32_partitions`), all of them at ratio 1."""
    if lora_rank:
        tensors = [arch.lora_params(lora_rank) / num_gpus]
    else:
        tensors = [float(math.ceil(size / num_gpus)) for size in arch.tensor_sizes()]
    groups = sub_groups(tensors, sub_group_size)
    on_gpu = int((1 - ratio) * len(groups))  # DeepSpeed's own expression, float for float
    return groups[:on_gpu], groups[on_gpu:]


def ratio_keeping(on_gpu: int, groups: int) -> float:
    """An `offload_optimizer.ratio` for which DeepSpeed keeps exactly `on_gpu` of `groups` sub-groups on the GPU: the
    round value 1 - on_gpu / groups where float arithmetic gives it, else one halfway to the next group."""
    for ratio in (round(1 - on_gpu / groups, 3), round(1 - (on_gpu + 0.5) / groups, 3)):
        if int((1 - ratio) * groups) == on_gpu:
            return ratio
    raise ValueError(f"no ratio keeps {on_gpu} of {groups} sub-groups on the GPU")


def host_terms(
    arch: Arch,
    s: int,
    num_gpus: int,
    *,
    offload_optimizer: bool,
    offload_params: bool,
    act_offload: bool,
    lora_rank: int | None = None,
    pin_memory: bool = True,
    sub_group_size: float = DEFAULT_SUB_GROUP,
    offload_ratio: float = 1.0,
) -> dict[str, float]:
    """Host bytes one rank holds at its peak (the first optimizer step, checkpoints of one step offloaded)."""
    keep = pinned if pin_memory else float
    trainable = arch.lora_params(lora_rank) if lora_rank else arch.params
    share = trainable / num_gpus
    terms = dict.fromkeys(
        ("master_weights", "optimizer_states", "fp32_gradients", "bf16_gradients", "offloaded_params"), 0.0
    )
    if offload_optimizer:
        _, on_host = optimizer_split(arch, num_gpus, lora_rank, sub_group_size, offload_ratio)
        terms["master_weights"] = FP32 * sum(on_host)
        terms["optimizer_states"] = ADAM_STATES * sum(on_host)
        terms["fp32_gradients"] = sum(keep(FP32 * group) for group in on_host)
        terms["bf16_gradients"] = keep(BF16 * share)
    if offload_params:
        frozen = (arch.params / num_gpus) if lora_rank else 0.0  # frozen partitions: off the pinned flat buffer
        terms["offloaded_params"] = keep(BF16 * share) + BF16 * frozen
    terms["offloaded_checkpoints"] = arch.layers * pinned(BF16 * s * arch.hidden) if act_offload else 0.0
    terms["runtime"] = float(RUNTIME_PER_RANK)
    return terms
