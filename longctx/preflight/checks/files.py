"""Files: every referenced file exists and parses, and unknown keys are errors with the nearest valid key.

Known keys come from the installed libraries where that is cheap (TRL's dataclasses, accelerate's
`ClusterConfig`); DeepSpeed's import costs seconds, so its keys are a list checked against the installed
DeepSpeed by a test (tests/test_preflight_files.py).
"""

import dataclasses
from pathlib import Path

from longctx.config.keys import nearest_key_problems
from longctx.config.problems import Problem, error, warning

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
# R of hybrid Ulysses x ring SP (longctx/config/rules/ring.py)
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


def accelerate_key_problems(data: dict, where: str) -> list[Problem]:
    from accelerate.commands.config.config_args import ClusterConfig

    known = {f.name for f in dataclasses.fields(ClusterConfig)}
    problems = nearest_key_problems(data, known, where, "remove it (see `accelerate config --help`)")
    for section, keys in (("deepspeed_config", ACCELERATE_DEEPSPEED_KEYS), ("parallelism_config", PARALLELISM_KEYS)):
        if isinstance(data.get(section), dict):
            problems += nearest_key_problems(data[section], keys, where, "remove it", prefix=f"{section}.")
    return problems


def deepspeed_key_problems(data, where: str) -> list[Problem]:
    if not isinstance(data, dict):
        return [error(where, "(file)", "must hold a JSON object", "wrap the settings in { }")]
    otherwise = "remove it (see the DeepSpeed config JSON reference)"
    problems = nearest_key_problems(data, DEEPSPEED_TOP_KEYS, where, otherwise)
    if isinstance(data.get("zero_optimization"), dict):
        zero = data["zero_optimization"]
        problems += nearest_key_problems(zero, DEEPSPEED_ZERO_KEYS, where, otherwise, prefix="zero_optimization.")
    return problems


def looks_local(name: str) -> bool:
    """A dataset or model name that is a filesystem path rather than a Hub id (`org/name`)."""
    from longctx.config.paths import REPO_ROOT

    first = Path(name).parts[0] if Path(name).parts else ""
    return name.startswith((".", "/", "~")) or (REPO_ROOT / first).is_dir() or name.count("/") > 1


def check(launch) -> list[Problem]:
    """Local dataset and model paths must exist (Hub ids are left to the download). Checked for the intended
    topology (`--intended`: the recipe against its target cluster, not this machine), a dataset folder that a
    recipe stages before `make data` (the DPO recipes' LongReward pairs, data_prep/longreward.py) may be absent here:
    a warning there, an error wherever the launch is checked for this machine."""
    from longctx.config.paths import repo_path

    problems = []
    for key, value in (
        ("dataset_name", launch.recipe.dataset_name),
        ("model_name_or_path", launch.model.model_name_or_path),
    ):
        if isinstance(value, str) and value and looks_local(value) and not repo_path(value).exists():
            fix = "fix the path (relative to the repository root), or name a Hub id as `org/name`"
            staged = key == "dataset_name" and launch.machine.source == "intended"
            fix = "stage it before `make data`, as the recipe's header says" if staged else fix
            problems.append(
                (warning if staged else error)(launch.source, key, f"{value}: no such file or folder", fix)
            )
    return problems
