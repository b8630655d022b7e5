"""The memory-relevant settings of a launch, read from the recipe, its accelerate YAML and DeepSpeed JSON."""

from longctx.memory_plan.gpus import torch_gib
from longctx.memory_plan.host import DEFAULT_SUB_GROUP
from longctx.memory_plan.inputs import PlanInputs


def offloaded(launch, what: str) -> bool:
    """DeepSpeed offload of `optimizer` or `param`, set in the JSON or in the accelerate YAML."""
    zero = (launch.ds or {}).get("zero_optimization") or {}
    device = (zero.get(f"offload_{what}") or {}).get("device", "none")
    accel = ((launch.accel_raw or {}).get("deepspeed_config") or {}).get(f"offload_{what}_device", "none")
    return device in ("cpu", "nvme") or accel in ("cpu", "nvme")


def offload_setting(launch, key: str, default):
    """`offload_optimizer.<key>` (pin_memory, ratio) or `zero_optimization.<key>` (sub_group_size) from the DeepSpeed
    JSON: the settings the host terms depend on (longctx/memory_plan/host.py)."""
    zero = (launch.ds or {}).get("zero_optimization") or {}
    value = (zero.get("offload_optimizer") or {}).get(key, zero.get(key, default))
    return default if value == "auto" else value


def bucket(ds: dict, key: str, hidden: int | None, auto_factor: float, default: float) -> float:
    """A DeepSpeed bucket size in elements: the JSON's number, accelerate's fill for "auto" (a factor of
    hidden_size squared: 1.0 for reduce_bucket_size, 0.9 for stage3_prefetch_bucket_size), or DeepSpeed's default."""
    value = (ds.get("zero_optimization") or {}).get(key)
    if value == "auto":
        return auto_factor * hidden * hidden if hidden else default
    return float(value) if value is not None else default


def plan_inputs(launch) -> PlanInputs:
    """The memory (and step-time) plan's inputs for this launch, at its max_length (0 when it sets none).

    The loss head is always TRL's fused head (TRL 1.16 patches every SFTTrainer model with it; full logits
    never exist); `use_liger_kernel` selects Liger's layer kernels, its fused cross-entropy being forced off.
    """
    from longctx.config.rules.attention.isolation import is_packed
    from longctx.preflight.rollout import plan_overrides, planned_length

    sft, recipe, topo = launch.sft, launch.recipe, launch.topo
    hidden = (
        (launch.facts.config.get("text_config") or launch.facts.config).get("hidden_size") if launch.facts else None
    )
    attn = launch.model.attn_implementation or "sdpa"
    stock_mask = attn == "sdpa" and is_packed(recipe, sft) and getattr(recipe, "allow_cross_document_attention", False)
    inputs = PlanInputs(
        **deepspeed_inputs(launch, hidden),
        seq_len=int(planned_length(launch) or 0),  # a GRPO recipe: one micro-step's group row (preflight/rollout.py)
        sp=topo.sp_size,
        num_gpus=topo.world_size,
        head="trl",
        kernels="liger" if sft.use_liger_kernel else "hf",
        attention="flash" if attn.startswith("flash") else "sdpa",
        packed_mask=bool(stock_mask),
        lora_rank=int(getattr(launch.model, "lora_r", None) or 16),
        tiled_mlp=bool(getattr(recipe, "tiled_mlp", False)),
        tiled_mlp_shards=getattr(recipe, "tiled_mlp_shards", None),
        act_offload=bool(getattr(recipe, "activation_checkpoint_offload", False)),
        grad_ckpt=bool(sft.gradient_checkpointing),
        selective_ckpt=isinstance(sft.gradient_checkpointing_kwargs, dict)
        and bool(sft.gradient_checkpointing_kwargs.get("selective")),
        lora=bool(launch.model.use_peft),
        micro_batch=int(sft.per_device_train_batch_size),
        gpus_per_node=launch.machine.gpus_per_node or topo.processes_per_machine,
        ring=topo.sp_ring_size,  # hybrid Ulysses x ring: the ring's gathered K/V (terms.ring_buffers)
        reference=getattr(sft, "reference_log_probs", "none"),  # DPO recipes: where the reference comes from
        accumulation=int(sft.gradient_accumulation_steps or 1),
    )
    return inputs.but(**plan_overrides(launch))  # GRPO: one row a micro-step, the KL term's frozen copy


def deepspeed_inputs(launch, hidden: int | None) -> dict:
    """The plan inputs the DeepSpeed JSON (and the accelerate YAML's offload keys) decide."""
    ds, sp = launch.ds or {}, launch.topo.sp_size
    return {
        "zero_stage": int((ds.get("zero_optimization") or {}).get("stage", 0)),  # DeepSpeed's default
        "offload_optimizer": offloaded(launch, "optimizer"),
        "offload_params": offloaded(launch, "param"),
        "reduce_bucket": bucket(ds, "reduce_bucket_size", hidden, 1.0, 5e8),
        "prefetch_bucket": bucket(ds, "stage3_prefetch_bucket_size", hidden, 0.9, 5e7),
        "comm_fp32": sp > 1 and ds.get("seq_parallel_communication_data_type", "fp32") != "bf16",
        "pin_memory": bool(offload_setting(launch, "pin_memory", True)),
        "sub_group_size": float(offload_setting(launch, "sub_group_size", DEFAULT_SUB_GROUP)),
        "offload_ratio": float(offload_setting(launch, "ratio", 1.0)),
    }


def gpu_gib(launch) -> float | None:
    """The GPU's memory as torch reports it (GiB): read from the GPU, or the figure for a GPU sold as `--gpu-memory-gb`
    (an "80 GB" H100 is 79.2 GiB to torch, not 80e9 bytes; longctx/memory_plan/gpus.py)."""
    machine = launch.machine
    if machine.gpu_memory_gib:
        return machine.gpu_memory_gib
    return torch_gib(machine.gpu_memory_gb) if machine.gpu_memory_gb else None


def zero_refused(launch) -> bool:
    """Whether this launch's DeepSpeed JSON is one the rules refuse (longctx/config/rules/zero.py): nothing is
    planned for it (the plan models ZeRO 2 and 3 only), the rule's error says what to change."""
    from longctx.config.rules.zero import unsupported

    ds, topo = getattr(launch, "ds", None), getattr(launch, "topo", None)
    return isinstance(ds, dict) and topo is not None and bool(unsupported(ds, topo.sp_size))
