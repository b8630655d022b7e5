"""Ulysses SP rules: every batch splits evenly across the SP group, one kernel on both sides, no TRL packing.

Each rule exists here only; `recipes/sft.py` refuses what these return and preflight reports the same list.
"""

from pathlib import Path

from longctx.config.paths import display_path
from longctx.config.problems import Problem, error, warning

SP_ATTENTION = ("sdpa", "flash_attention_2", "flash_attention_3")
PC = "parallelism_config.parallelism_config_"


def attention_problems(args, model, topo, source: str, where: str) -> list[Problem]:
    sp, model_attn, sp_attn = topo.sp_size, model.attn_implementation, topo.sp_attn_implementation
    if sp == 1:
        return []
    problems = []
    supported = ", ".join(SP_ATTENTION)
    if sp_attn not in SP_ATTENTION:
        msg = f"is {sp_attn!r}; Ulysses SP supports {supported} (eager and flex are refused)"
        problems.append(error(where, PC + "sp_attn_implementation", msg, "set flash_attention_2 on GPUs, sdpa on CPU"))
    if model_attn not in SP_ATTENTION:
        msg = f"is {model_attn!r}; Ulysses SP supports {supported}"
        fix = f"set it to the accelerate YAML's kernel (sp_attn_implementation in {where})"
        problems.append(error(source, "attn_implementation", msg, fix))
    elif model_attn != sp_attn:
        msg = f"is {model_attn!r} but {where} sets `sp_attn_implementation: {sp_attn}`"
        problems.append(error(source, "attn_implementation", msg, "make the two equal"))
    return problems


def uneven_shards(max_length: int, multiple: int, of_what: str) -> tuple[str, str] | None:
    """The one rule that a sequence splits into equal SP shards: (what is wrong, the fix) when `max_length` is not
    a multiple of `multiple` (sp, or data_prep's lcm of sp and an alignment; `of_what` names it), else None."""
    if not max_length or max_length % multiple == 0:
        return None
    return (
        f"{max_length} is not a multiple of {of_what}",
        f"use max_length: {max(max_length // multiple, 1) * multiple}",
    )


def length_problems(args, topo, source: str) -> list[Problem]:
    sp, max_length, pad = topo.sp_size, args.max_length, args.pad_to_multiple_of
    problems = []
    uneven = uneven_shards(max_length, sp, f"sp={sp}")
    if uneven:
        problems.append(error(source, "max_length", *uneven))
    if pad is not None and pad % sp:
        fix = f"use pad_to_multiple_of: {sp} (or leave it unset: the entrypoint pads to a multiple of sp)"
        problems.append(error(source, "pad_to_multiple_of", f"{pad} is not a multiple of sp={sp}", fix))
    if sp > 1 and max_length and not max_length % sp and (max_length // sp) % 256 and not args.use_cpu:
        per_rank = max_length // sp
        better = max(round(per_rank / 256), 1) * 256 * sp
        msg = f"gives {per_rank} tokens per rank, not a multiple of 256 (slower attention kernels)"
        problems.append(warning(source, "max_length", msg, f"use max_length: {better}"))
    return problems


def fixed_length_problems(args, topo, where: str) -> list[Problem]:
    """With `sp_seq_length_is_variable: false` every batch must have exactly sp_seq_length tokens."""
    if topo.sp_size == 1 or topo.sp_seq_length_is_variable:
        return []
    key = PC + "sp_seq_length"
    if topo.sp_seq_length is None:
        fix = f"set it to {args.max_length} (and pad every batch to it), or set sp_seq_length_is_variable: true"
        return [error(where, key, "is unset while sp_seq_length_is_variable is false", fix)]
    problems = []
    if topo.sp_seq_length != args.max_length:
        msg = f"is {topo.sp_seq_length} but the recipe's max_length is {args.max_length}"
        problems.append(error(where, key, msg, f"set it to {args.max_length}, or sp_seq_length_is_variable: true"))
    if args.pad_to_multiple_of != args.max_length and not getattr(args, "packing", False):
        msg = f"fixed at {topo.sp_seq_length}, but batches are padded only to multiples of {args.pad_to_multiple_of}"
        fix = f"set pad_to_multiple_of: {args.max_length} in the recipe, or sp_seq_length_is_variable: true"
        problems.append(error(where, key, msg, fix))
    return problems


def trl_packing_problems(args, topo, source: str) -> list[Problem]:
    if topo.sp_size == 1 or not (getattr(args, "packing", False) or getattr(args, "padding_free", False)):
        return []
    msg = (
        "packing/padding_free use TRL's padding-free collator, whose 1-D cu_seq_lens_* tensors "
        "DeepSpeed's SP dataloader cannot shard"
    )
    return [error(source, "packing", msg, "set packing: false and padding_free: false (use `prepare_data: packed`)")]


def sequence_problems(recipe, args, model, topo, source: str) -> list[Problem]:
    where = display_path(Path(topo.path))
    problems = attention_problems(args, model, topo, source, where)
    if getattr(recipe, "trainer", "sft") != "grpo":  # a GRPO row's length is the trainer's (prompt + G completions)
        problems += length_problems(args, topo, source)
    return problems + fixed_length_problems(args, topo, where) + trl_packing_problems(args, topo, source)
