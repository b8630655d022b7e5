"""The memory-relevant settings of a launch, read from the recipe, its accelerate YAML and DeepSpeed JSON."""

GB = 1e9  # GPU sizes are sold in GB (H100 80GB); the plan computes in GiB


def offloaded(launch, what: str) -> bool:
    """DeepSpeed offload of `optimizer` or `param`, set in the JSON or in the accelerate YAML."""
    zero = (launch.ds or {}).get("zero_optimization") or {}
    device = (zero.get(f"offload_{what}") or {}).get("device", "none")
    accel = ((launch.accel_raw or {}).get("deepspeed_config") or {}).get(f"offload_{what}_device", "none")
    return device in ("cpu", "nvme") or accel in ("cpu", "nvme")


def plan_options(launch) -> dict:
    """Keyword arguments of `memory_plan.memory.estimate` (less seq_len and sp) for this launch."""
    sft, recipe, topo, ds = launch.sft, launch.recipe, launch.topo, launch.ds or {}
    machine = launch.machine
    return {
        "num_gpus": topo.world_size,
        "zero_stage": int((ds.get("zero_optimization") or {}).get("stage", 3)),
        "offload_optimizer": offloaded(launch, "optimizer"),
        "offload_params": offloaded(launch, "param"),
        "liger": bool(sft.use_liger_kernel),
        "tiled_mlp": bool(getattr(recipe, "tiled_mlp", False)),
        "tiled_mlp_shards": getattr(recipe, "tiled_mlp_shards", None),
        "act_offload": bool(getattr(recipe, "activation_checkpoint_offload", False)),
        "grad_ckpt": bool(sft.gradient_checkpointing),
        "lora": bool(launch.model.use_peft),
        "micro_batch": int(sft.per_device_train_batch_size),
        "comm_fp32": topo.sp_size > 1 and ds.get("seq_parallel_communication_data_type", "fp32") != "bf16",
        "gpus_per_node": machine.gpus_per_node or topo.processes_per_machine,
    }


def gpu_gib(launch) -> float | None:
    gb = launch.machine.gpu_memory_gb
    return gb * GB / 2**30 if gb else None
