"""Sequence: every batch must split evenly across the SP group, ideally into shards that are multiples of 256."""

from pathlib import Path

from config.problems import Problem, error, warning

PC = "parallelism_config.parallelism_config_"


def length_problems(source: str, sft, sp: int) -> list[Problem]:
    problems, max_length, pad = [], sft.max_length, sft.pad_to_multiple_of
    if max_length and max_length % sp:
        fix = f"use max_length: {max(max_length // sp, 1) * sp}"
        problems.append(error(source, "max_length", f"{max_length} is not a multiple of sp={sp}", fix))
    if pad is not None and pad % sp:
        fix = f"use pad_to_multiple_of: {sp} (or leave it unset: the entrypoint pads to a multiple of sp)"
        problems.append(error(source, "pad_to_multiple_of", f"{pad} is not a multiple of sp={sp}", fix))
    if sp > 1 and sft.use_cpu and max_length and pad != max_length:
        msg = f"must equal max_length ({max_length}) for sp>1 on CPU: gloo needs equal batch shapes on every rank"
        problems.append(error(source, "pad_to_multiple_of", msg, f"set pad_to_multiple_of: {max_length}"))
    if sp > 1 and max_length and not max_length % sp and (max_length // sp) % 256 and not sft.use_cpu:
        per_rank = max_length // sp
        better = max(round(per_rank / 256), 1) * 256 * sp
        msg = f"gives {per_rank} tokens per rank, not a multiple of 256 (slower attention kernels)"
        problems.append(warning(source, "max_length", msg, f"use max_length: {better}"))
    return problems


def fixed_length_problems(launch, where: str) -> list[Problem]:
    """With `sp_seq_length_is_variable: false` every batch must have exactly sp_seq_length tokens."""
    topo, sft = launch.topo, launch.sft
    if topo.sp_size == 1 or topo.sp_seq_length_is_variable:
        return []
    key = PC + "sp_seq_length"
    if topo.sp_seq_length is None:
        fix = f"set it to {sft.max_length} (and pad every batch to it), or set sp_seq_length_is_variable: true"
        return [error(where, key, "is unset while sp_seq_length_is_variable is false", fix)]
    problems = []
    if topo.sp_seq_length != sft.max_length:
        msg = f"is {topo.sp_seq_length} but the recipe's max_length is {sft.max_length}"
        problems.append(error(where, key, msg, f"set it to {sft.max_length}, or sp_seq_length_is_variable: true"))
    if sft.pad_to_multiple_of != sft.max_length and not sft.packing:
        msg = f"fixed at {topo.sp_seq_length}, but batches are padded only to multiples of {sft.pad_to_multiple_of}"
        fix = f"set pad_to_multiple_of: {sft.max_length} in the recipe, or sp_seq_length_is_variable: true"
        problems.append(error(where, key, msg, fix))
    return problems


def check(launch) -> list[Problem]:
    from config.paths import display_path

    if launch.topo is None:
        return []
    where = display_path(Path(launch.topo.path))
    return length_problems(launch.source, launch.sft, launch.topo.sp_size) + fixed_length_problems(launch, where)
