"""DeepSpeed: a ZeRO stage SP supports, precision and batch sizes that agree with the recipe."""

from longctx.config.problems import Problem, error, warning
from longctx.config.rules.isolation import is_packed


def is_auto(value) -> bool:
    return value == "auto" or value is None


def stage_and_precision(launch, ds: dict) -> list[Problem]:
    where, sft, problems = launch.ds_path, launch.sft, []
    bf16 = (ds.get("bf16") or {}).get("enabled", "auto")
    if not is_auto(bf16) and bool(bf16) != bool(sft.bf16):
        msg = f"bf16.enabled is {bf16} but the recipe's bf16 is {sft.bf16}"
        problems.append(error(where, "bf16.enabled", msg, 'set it to "auto" so the Trainer fills it from the recipe'))
    comm = ds.get("seq_parallel_communication_data_type", "fp32")
    if launch.topo.sp_size > 1 and comm != "bf16" and not sft.use_cpu:
        msg = f"is {comm}: SP gradients are reduced in fp32 (about 4 GB more per GPU with 5e8 buckets)"
        problems.append(warning(where, "seq_parallel_communication_data_type", msg, 'set it to "bf16"'))
    return problems


def batch_problems(launch, ds: dict) -> list[Problem]:
    where, sft, problems = launch.ds_path, launch.sft, []
    pairs = (
        ("train_micro_batch_size_per_gpu", "per_device_train_batch_size", sft.per_device_train_batch_size),
        ("gradient_accumulation_steps", "gradient_accumulation_steps", sft.gradient_accumulation_steps),
    )
    for ds_key, recipe_key, value in pairs:
        if not is_auto(ds.get(ds_key)) and ds.get(ds_key) != value:
            msg = f"is {ds.get(ds_key)} but the recipe's {recipe_key} is {value}"
            problems.append(error(where, ds_key, msg, f'set it to "auto" (or {value})'))
    if is_packed(launch.recipe, launch.sft) and sft.per_device_train_batch_size != 1:
        msg = f"is {sft.per_device_train_batch_size} with packed data; packed rows are one sequence each"
        problems.append(error(launch.source, "per_device_train_batch_size", msg, "set it to 1"))
    return problems


def check(launch) -> list[Problem]:
    if launch.ds is None or launch.topo is None or not isinstance(launch.ds, dict):
        return []
    return stage_and_precision(launch, launch.ds) + batch_problems(launch, launch.ds)
