"""DeepSpeed: a ZeRO stage SP supports, precision and batch sizes that agree with the recipe."""

from longctx.config.problems import Problem, error, warning
from longctx.config.rules.attention.isolation import is_packed


def is_auto(value) -> bool:
    return value == "auto" or value is None


def stage_and_precision(launch, ds: dict) -> list[Problem]:
    where, sft, problems = launch.ds_path, launch.sft, []
    bf16 = (ds.get("bf16") or {}).get("enabled", "auto")
    if not is_auto(bf16) and bool(bf16) != bool(sft.bf16):
        msg = f"bf16.enabled is {bf16} but the recipe's bf16 is {sft.bf16}"
        problems.append(error(where, "bf16.enabled", msg, 'set it to "auto" so the Trainer fills it from the recipe'))
    return problems + reduction_dtype_problems(launch, ds)


def reduction_dtype_problems(launch, ds: dict) -> list[Problem]:
    """`seq_parallel_communication_data_type` against the training precision, saying what the key really does.

    With sp > 1 DeepSpeed's engine replaces `communication_data_type` by this key (deepspeed/runtime/engine.py), so it
    is the dtype of every ZeRO gradient reduction of the run (ZeRO-3's reduce-scatter over all sp x dp ranks, across
    nodes), not of the SP group's traffic alone; the attention all-to-alls run in the model's dtype either way.
    """
    sft, key = launch.sft, "seq_parallel_communication_data_type"
    comm = ds.get(key, "fp32")
    if launch.topo.sp_size == 1 or sft.use_cpu:
        return []
    scope = (
        "with sp > 1 it sets the dtype of every gradient reduction (the ZeRO reduce-scatter over all sp x dp ranks)"
    )
    if sft.bf16 and comm == "fp32":
        msg = f"is fp32: {scope}, so bf16 gradients are upcast: an fp32 bucket (about 4 GB more per GPU with 5e8 "
        msg += "buckets) and twice the bytes on the wire"
        return [warning(launch.ds_path, key, msg, 'set it to "bf16", the training precision')]
    if sft.bf16 and comm == "fp16":
        msg = f"is fp16: {scope}, in fp16's narrower range than the bf16 gradients'"
        return [warning(launch.ds_path, key, msg, 'set it to "bf16", the training precision')]
    if not sft.bf16 and comm != "fp32":
        msg = f"is {comm} but the recipe trains in fp32: {scope}, rounding every gradient to 16 bits"
        return [warning(launch.ds_path, key, msg, 'set it to "fp32"')]
    return []


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
    # GRPO: per_device_train_batch_size counts completions (TRL's meaning); the trainer lays out its group rows
    grpo = getattr(launch.recipe, "trainer", "sft") == "grpo"
    if is_packed(launch.recipe, launch.sft) and sft.per_device_train_batch_size != 1 and not grpo:
        msg = f"is {sft.per_device_train_batch_size} with packed data; packed rows are one sequence each"
        problems.append(error(launch.source, "per_device_train_batch_size", msg, "set it to 1"))
    return problems


def check(launch) -> list[Problem]:
    if launch.ds is None or launch.topo is None or not isinstance(launch.ds, dict):
        return []
    return stage_and_precision(launch, launch.ds) + batch_problems(launch, launch.ds)
