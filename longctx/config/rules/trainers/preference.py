"""Rules of a preference recipe (`trainer: dpo`): what the long-context DPO trainer computes, and what it refuses.

The trainer (longctx/training/preference/) sums each answer's log-probs over the SP group from rows data_prep
packed (pairs whole in a row), so the data must be prepared; it computes the loss types of
longctx/config/trainers/preference.py; the reference log-probs come from one source, which must suit the loss (a
reference-free loss needs none, every other one needs one) and the memory (a second full model only sharded by
ZeRO-3). TRL's own reference and weighting options that it does not compute are refused by name, never ignored.
"""

from longctx.config.problems import Problem, error
from longctx.config.rules.attention.attention_patterns import recipe_model_config
from longctx.config.rules.trainers.router_aux import router_aux_problems
from longctx.config.rules.zero import read_deepspeed_json, zero_section
from longctx.config.trainers.preference import LABEL_SMOOTHED_LOSSES, LOSS_TYPES, REFERENCE_FREE_LOSSES, loss_types

# TRL DPOConfig keys with no effect in the long-context trainer: refused unless left at TRL's default.
UNSUPPORTED_TRL_KEYS = {
    "precompute_ref_log_probs": (False, "set `reference_log_probs: precomputed` (this trainer's default) instead"),
    "sync_ref_model": (False, "not supported: the reference stays the initial model"),
    "ld_alpha": (None, "LD-DPO's length weighting is not computed here; remove it"),
    "use_weighting": (False, "WPO weighting is not computed here; remove it"),
    "f_divergence_type": ("reverse_kl", "only the reverse KL (standard DPO) is computed here; remove it"),
    "padding_free": (False, "rows are packed by data_prep (`prepare_data: packed`); remove it"),
}


def _key_problems(args, source: str) -> list[Problem]:
    problems = []
    for key, (default, fix) in UNSUPPORTED_TRL_KEYS.items():
        value = getattr(args, key, default)
        if getattr(value, "value", value) != default:
            problems.append(error(source, key, f"is {value!r}; the long-context DPO trainer does not use it", fix))
    return problems


def _loss_problems(args, source: str) -> list[Problem]:
    losses = loss_types(args)
    unknown = [loss for loss in losses if loss not in LOSS_TYPES]
    if unknown:
        msg = f"{unknown} is not computed by the long-context DPO trainer"
        return [error(source, "loss_type", msg, f"use one of {', '.join(LOSS_TYPES)}")]
    free = [loss in REFERENCE_FREE_LOSSES for loss in losses]
    reference = args.reference_log_probs
    if any(free) and not all(free):
        msg = f"{losses} mixes reference-free and reference losses"
        return [error(source, "loss_type", msg, "combine losses of one kind only")]
    if all(free) and reference != "none":
        msg = f"{losses} needs no reference, but `reference_log_probs` is `{reference}`"
        return [error(source, "reference_log_probs", msg, "set `reference_log_probs: none`")]
    if not all(free) and reference == "none":
        msg = f"is `none`, but the loss {losses} compares with a reference"
        return [error(source, "reference_log_probs", msg, "use `precomputed` (or a reference-free loss: simpo)")]
    if "robust" in losses and not 0.0 <= args.label_smoothing < 0.5:
        msg = f"is {args.label_smoothing}; the robust loss needs a flip probability in [0, 0.5)"
        return [error(source, "label_smoothing", msg, "use e.g. 0.1")]
    if args.label_smoothing and not any(loss in LABEL_SMOOTHED_LOSSES for loss in losses):
        msg = (
            f"is {args.label_smoothing}, but the {losses} loss never reads it (TRL 1.16 smooths only robust DPO, as "
            "its flip probability, and SimPO): it would train as if it were 0"
        )
        fix = "remove it, or use `loss_type: robust` (label_smoothing as the probability that a label is flipped)"
        return [error(source, "label_smoothing", msg, fix)]
    return []


def _reference_problems(model, topo, ds: dict | None, source: str, args) -> list[Problem]:
    reference = args.reference_log_probs
    if reference == "adapter_disabled" and not getattr(model, "use_peft", False):
        msg = "is `adapter_disabled`, but the recipe trains no adapter (`use_peft` is off)"
        return [error(source, "reference_log_probs", msg, "use `precomputed`, or set `use_peft: true`")]
    if reference == "frozen_model" and ds is not None and zero_section(ds).get("stage") != 3:
        msg = "keeps a second full model on every rank unless ZeRO-3 shards it"
        fix = "use `precomputed` (no second model), or a ZeRO-3 DeepSpeed JSON"
        return [error(source, "reference_log_probs", msg, fix)]
    return []


def _data_problems(recipe, source: str) -> list[Problem]:
    problems = []
    if recipe.prepare_data == "off":
        msg = "is off; preference rows (pairs whole in a row) are prepared by data_prep"
        problems.append(error(source, "prepare_data", msg, "set `prepare_data: packed` (or `unpacked`: a pair a row)"))
    if recipe.long_document_policy == "split":
        msg = "is `split`, which would cut a pair apart"
        problems.append(
            error(source, "long_document_policy", msg, "use `drop` or `truncate` (cut the prompt's start)")
        )
    if recipe.dataset_format != "auto":
        msg = f"is `{recipe.dataset_format}`; preference rows are read by their `chosen`/`rejected` columns"
        problems.append(error(source, "dataset_format", msg, "set `dataset_format: auto` (or remove it)"))
    if getattr(recipe, "allow_cross_document_attention", False):
        msg = "would let a chosen answer attend to its rejected one (and every pair to the others in its row)"
        problems.append(error(source, "allow_cross_document_attention", msg, "remove it"))
    return problems


def _prefix_sharing_problems(args, topo, source: str) -> list[Problem]:
    """Prefix sharing on a ring: exact on the CPU ring (its prefix blocks, longctx/training/sequence_parallel/
    ring.py); the CUDA ring's ring-flash-attn kernels attend each document to itself alone, so a rejected answer
    would lose its prompt. The run-time twin: hybrid.PREFIX_ON_GPU_RING."""
    if not getattr(args, "prefix_sharing", False) or topo.sp_ring_size <= 1 or getattr(args, "use_cpu", False):
        return []
    msg = (
        f"is on with a ring (parallelism_config_sp_ring_size: {topo.sp_ring_size}) on GPUs: the CUDA ring's "
        "ring-flash-attn kernels attend each document to itself alone, so every rejected answer would lose its "
        "shared prompt (the CPU ring computes it exactly)"
    )
    fix = "set `prefix_sharing: false`, or train on a mesh without a ring (parallelism_config_sp_ring_size: 1)"
    return [error(source, "prefix_sharing", msg, fix)]


def _reference_batch_problems(args, topo, source: str) -> list[Problem]:
    """The reference pass's batch of rows under SP: DeepSpeed's Ulysses attention is registered for one micro-batch
    size (as eval's, longctx/config/rules/trainers/evaluation.py); its isolation is checked with every other batch
    (longctx/config/rules/attention/isolation.py `row_batches`)."""
    size = getattr(args, "precompute_ref_batch_size", None)
    if args.reference_log_probs != "precomputed" or not size or topo.sp_size == 1:
        return []
    if size == args.per_device_train_batch_size:
        return []
    msg = (
        f"is {size}, but under sp={topo.sp_size} the reference pass runs through the Ulysses attention built for "
        f"`per_device_train_batch_size` {args.per_device_train_batch_size} rows"
    )
    return [error(source, "precompute_ref_batch_size", msg, "remove it (the pass then takes the training batch)")]


def preference_problems(recipe, args, model, topo, source: str) -> list[Problem]:
    """Every reason a `trainer: dpo` recipe cannot run (nothing for an SFT recipe)."""
    if getattr(recipe, "trainer", "sft") != "dpo":
        return []
    ds = read_deepspeed_json(topo)
    problems = _data_problems(recipe, source) + _key_problems(args, source) + _loss_problems(args, source)
    problems += _prefix_sharing_problems(args, topo, source) + _reference_batch_problems(args, topo, source)
    problems += router_aux_problems(args.router_aux_loss_coef, recipe_model_config(recipe, model)[0], source, "DPO")
    return problems + _reference_problems(model, topo, ds, source, args)
