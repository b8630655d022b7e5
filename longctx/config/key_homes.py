"""Which file a configuration key lives in: the recipe, its accelerate YAML or the DeepSpeed JSON that YAML names.

Why: a key typed in the wrong file is the commonest unknown key (`--sp_size 6` on a recipe's command line, where
sp is the accelerate YAML's `parallelism_config_sp_size`). Nearest-spelling advice would point at an unrelated
recipe key; `key_home` names the file that holds the value instead, so the fix is where the user must look.
The lists are those preflight checks the two files against (longctx/preflight/checks/files.py); DeepSpeed's
own import costs seconds, so its keys are listed here and checked against the installed DeepSpeed by a test.
"""

import dataclasses
from pathlib import Path

ACCELERATE_DEEPSPEED_KEYS = {
    "deepspeed_config_file",
    "deepspeed_multinode_launcher",
    "deepspeed_hostfile",
    "deepspeed_exclusion_filter",
    "deepspeed_inclusion_filter",
    "deepspeed_moe_layer_cls_names",
    "zero_stage",
    "offload_optimizer_device",
    "offload_param_device",
    "offload_optimizer_nvme_path",
    "offload_param_nvme_path",
    "gradient_accumulation_steps",
    "gradient_clipping",
    "zero3_init_flag",
    "zero3_save_16bit_model",
    "mixed_precision",
}
PARALLELISM_KEYS = {
    "parallelism_config_" + k
    for k in (
        "dp_replicate_size",
        "dp_shard_size",
        "tp_size",
        "cp_size",
        "cp_backend",
        "cp_comm_strategy",
        "sp_size",
        "sp_backend",
        "sp_seq_length",
        "sp_seq_length_is_variable",
        "sp_attn_implementation",
    )
}
# Ours, not accelerate's (its launcher ignores them; the entrypoint and preflight read them from the YAML):
# R of hybrid Ulysses x ring SP (longctx/config/rules/attention/ring.py)
OUR_PARALLELISM_KEYS = {"parallelism_config_sp_ring_size"}
PARALLELISM_KEYS |= OUR_PARALLELISM_KEYS
DEEPSPEED_TOP_KEYS = {
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "steps_per_print",
    "wall_clock_breakdown", "dump_state", "optimizer", "scheduler", "fp16", "bf16", "amp", "zero_optimization",
    "gradient_clipping", "prescale_gradients", "gradient_predivide_factor", "sparse_gradients",
    "communication_data_type", "seq_parallel_communication_data_type", "activation_checkpointing",
    "flops_profiler", "tensorboard", "wandb", "csv_monitor", "comet", "checkpoint", "data_types",
    "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "memory_breakdown", "aio", "nebula",
    "compression_training", "elasticity", "data_efficiency", "curriculum_learning", "autotuning", "pipeline",
    "torch_autocast", "disable_allgather", "comms_logger", "compile", "weight_quantization", "hybrid_engine",
    "use_node_local_storage", "graph_harvesting", "tensor_parallel", "timers", "load_universal_checkpoint",
    "sequence_parallel_size", "eigenvalue", "progressive_layer_drop", "dataloader_drop_last",
}  # fmt: skip
DEEPSPEED_ZERO_KEYS = {
    "stage", "contiguous_gradients", "reduce_scatter", "reduce_bucket_size", "use_multi_rank_bucket_allreduce",
    "allgather_partitions", "allgather_bucket_size", "overlap_comm", "load_from_fp32_weights", "elastic_checkpoint",
    "offload_param", "offload_optimizer", "sub_group_size", "cpu_offload_param", "cpu_offload_use_pin_memory",
    "cpu_offload", "prefetch_bucket_size", "stage3_prefetch_bucket_size", "param_persistence_threshold",
    "stage3_param_persistence_threshold", "model_persistence_threshold", "stage3_model_persistence_threshold",
    "max_live_parameters", "stage3_max_live_parameters", "max_reuse_distance", "stage3_max_reuse_distance",
    "gather_16bit_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save",
    "stage3_gather_fp16_weights_on_model_save", "module_granularity_threshold",
    "stage3_module_granularity_threshold", "use_all_reduce_for_fetch_params",
    "stage3_use_all_reduce_for_fetch_params", "allgather_sequential", "stage3_allgather_sequential",
    "ignore_unused_parameters", "legacy_stage1", "round_robin_gradients", "zero_hpz_partition_size",
    "zero_quantized_weights", "zero_quantized_nontrainable_weights", "zero_quantized_gradients", "zenflow",
    "mics_shard_size", "mics_hierarchical_params_gather", "memory_efficient_linear", "pipeline_loading_checkpoint",
    "override_module_apply", "log_trace_cache_warnings", "enable_sanity_checks", "leaf_module",
    "parameter_alignment", "compute_grad_norm", "save_muon_momentum_buffer_in_memory",
}  # fmt: skip


def accelerate_top_keys() -> set[str]:
    from accelerate.commands.config.config_args import ClusterConfig

    return {f.name for f in dataclasses.fields(ClusterConfig)}


def _bare(key: str) -> str:
    for prefix in ("parallelism_config.", "deepspeed_config.", "zero_optimization.", "parallelism_config_"):
        key = key.removeprefix(prefix)
    return key


def key_home(key: str, accelerate_yaml: str | None) -> str | None:
    """Where a key that is not a recipe key lives, as the fix to print; None when it is not another file's key."""
    from longctx.config.paths import repo_path

    bare = _bare(key)
    yaml_name = accelerate_yaml or "the recipe's accelerate YAML (`accelerate_config`)"
    if "parallelism_config_" + bare in PARALLELISM_KEYS:
        return (
            f"{bare} is the mesh, set in {yaml_name} as `parallelism_config.parallelism_config_{bare}`: run with "
            "another accelerate YAML (`--accelerate_config accelerate_configs/<mesh>.yaml`) or edit that one"
        )
    json_name = _deepspeed_json(repo_path(accelerate_yaml)) if accelerate_yaml else None
    in_json = JSON_NAME_OF.get(bare, bare)
    if json_name and bare in ACCELERATE_DEEPSPEED_KEYS and in_json in DEEPSPEED_TOP_KEYS | DEEPSPEED_ZERO_KEYS:
        return (
            f"`{bare}` is a DeepSpeed setting, set in {json_name} as `{in_json}` (named by {yaml_name}): edit it there"
        )
    if bare in accelerate_top_keys() or bare in ACCELERATE_DEEPSPEED_KEYS:
        return f"`{bare}` is set in {yaml_name}, not in the recipe: edit it there (or pick another YAML)"
    if bare in DEEPSPEED_TOP_KEYS or bare in DEEPSPEED_ZERO_KEYS:
        where = json_name or "the DeepSpeed JSON the accelerate YAML names (`deepspeed_config_file`)"
        return f"`{bare}` is a DeepSpeed setting, set in {where}: edit it there"
    return None


# accelerate's name for a DeepSpeed setting -> the DeepSpeed JSON's (where a YAML names a JSON, the JSON holds it)
JSON_NAME_OF = {"zero_stage": "stage", "offload_optimizer_device": "offload_optimizer"}
JSON_NAME_OF |= {"offload_param_device": "offload_param", "gradient_clipping": "gradient_clipping"}


def _deepspeed_json(path: Path) -> str | None:
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    return ((data.get("deepspeed_config") or {}) if isinstance(data, dict) else {}).get("deepspeed_config_file")


NOT_A_KEY = "not a recipe key (`python recipes/sft.py --help` lists them all)"


def unknown_keys(values: dict, cli: list[str], source: str, known: set[str]) -> list:
    """The recipe's and the command line's unknown keys, each with where its value lives when it is another
    file's key, else the nearest recipe key (the recipe's own accelerate YAML, as overridden, names the files)."""
    from longctx.config.keys import cli_keys, nearest_key_problems, override_pairs

    accel = next((v for k, v in override_pairs(cli) if k == "accelerate_config"), values.get("accelerate_config"))

    def home(key):
        return key_home(key, accel if isinstance(accel, str) else None)

    problems = nearest_key_problems(values, known, source, f"remove it: {NOT_A_KEY}", home=home)
    return problems + nearest_key_problems(cli_keys(cli), known, "command line", NOT_A_KEY, home=home)
