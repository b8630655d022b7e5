"""Which attention implementations keep packed documents apart, and the recipe check built on that.

Packing is only correct if no token attends to another document. This module is the one place that
says when that is guaranteed, so preflight and the entrypoint cannot disagree:

- sdpa: yes, through longctx/training/attention/isolation.py (registered as `sdpa`; splits at position_ids restarts),
  at any sp size and micro batch size; `python -m longctx probe RECIPE --sp N` proves it.
- flash_attention_2/3: yes, through transformers' varlen path, which reads document starts from
  position_ids, but only for a micro batch of one row (transformers checks packing only at batch 1).
- eager (unsupported under SP), flex_attention (the SP wrapper rebuilds a plain causal BlockMask) and
  any name this module does not know: no.
"""

from longctx.config.problems import Problem, error

FLASH_BACKENDS = ("flash_attention_2", "flash_attention_3")


def isolation_guarantee(
    attn_implementation: str | None, sp_size: int, micro_batch_size: int, key: str = "per_device_train_batch_size"
) -> tuple[bool, str]:
    """(isolated, reason): whether packed documents stay apart with this backend, and why or why not. `key`: the
    recipe key that sets this batch of rows (the training micro-batch, or the DPO reference pass's)."""
    if attn_implementation == "sdpa":
        return (
            True,
            f"sdpa at sp={sp_size}: longctx/training/attention/isolation.py splits attention at position_ids restarts",
        )
    if attn_implementation in FLASH_BACKENDS:
        if micro_batch_size == 1:
            return True, f"{attn_implementation}: varlen attention from position_ids (micro batch of one row)"
        return False, (
            f"{attn_implementation} reads document starts from position_ids only for a micro batch of one row, "
            f"and {key} is {micro_batch_size}; set it to 1"
            + (" (raise gradient_accumulation_steps)" if key == "per_device_train_batch_size" else "")
        )
    if attn_implementation == "eager":
        return False, "eager has no document-aware path (and Ulysses SP does not support it); use sdpa"
    if attn_implementation == "flex_attention":
        return False, "flex_attention gets a plain causal BlockMask under SP, without a document mask; use sdpa"
    return False, f"attention implementation {attn_implementation!r} is unknown to the isolation policy; use sdpa"


def is_packed(recipe, args) -> bool:
    """Whether the recipe trains on packed rows (several documents per sequence; a preference row and a GRPO group
    row always are)."""
    if getattr(recipe, "prepare_data", "off") == "packed" or getattr(recipe, "trainer", "sft") in ("dpo", "grpo"):
        return True
    return bool(getattr(args, "packing", False) or getattr(args, "padding_free", False))


def row_batches(recipe, args) -> list[tuple[str, int]]:
    """(key, rows) of every batch of rows the run's forwards take: the training micro-batch (eval's equals it under
    SP: longctx/config/rules/trainers/evaluation.py) and a DPO reference pass's own `precompute_ref_batch_size`."""
    batches = [("per_device_train_batch_size", args.per_device_train_batch_size)]
    reference = getattr(args, "precompute_ref_batch_size", None)
    dpo = getattr(recipe, "trainer", "sft") == "dpo"
    precomputed = dpo and args.reference_log_probs == "precomputed"
    if precomputed and reference and reference != args.per_device_train_batch_size:
        batches.append(("precompute_ref_batch_size", reference))
    return batches


def packed_isolation_problems(recipe, args, model, topo, source: str) -> list[Problem]:
    """One problem per batch of rows in which packed data would silently attend across documents; none otherwise."""
    if not is_packed(recipe, args) or getattr(recipe, "allow_cross_document_attention", False):
        return []
    problems = []
    for key, rows in row_batches(recipe, args):
        isolated, reason = isolation_guarantee(model.attn_implementation, topo.sp_size, rows, key)
        if not isolated:
            msg = f"packed documents would attend to each other: {reason}"
            fix = "or set `allow_cross_document_attention: true` if intended"
            problems.append(error(source, "attn_implementation", msg, fix))
    return problems
