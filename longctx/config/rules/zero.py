"""ZeRO under Ulysses SP: how DeepSpeed averages gradients for each stage and flag, and what is refused.

Why: every rank of an SP group holds a shard of the same rows, and DeepSpeed sums the gradients over all sp x dp
ranks (its sequence-data-parallel group) and then divides. The SP loss
(longctx/training/sequence_parallel/loss_weighting.py) must hand it
gradients that come out as the step's token mean after that division, so it has to know the divisor, which
deepspeed 0.19.8 chooses per stage and flag:

- ZeRO-1/2 (`stage_1_and_2.py`: `average_tensor`, `gradient_reduction_w_predivide`, `allreduce_bucket`) divide
  by world / sp = dp, whatever `reduce_scatter` and `contiguous_gradients` say;
- ZeRO-3 with `reduce_scatter: true` (the default; `stage3.py` `__avg_scatter_grads` -> `reduce_scatter_coalesced`)
  divides by the whole sp x dp group;
- ZeRO-3 with `reduce_scatter: false` (and `contiguous_gradients`, the default) sends a bucket of at most
  `reduce_bucket_size` elements through `__avg_scatter_contiguous_grads` (divided by dp) and a larger one (a
  parameter bigger than the bucket) through `reduce_scatter_coalesced` (divided by sp x dp): two divisors in one
  step, which no loss can match: refused (with `contiguous_gradients: false` every bucket takes the reduce-scatter,
  but that pairing is not proven here, so it is refused too);
- `zero_quantized_gradients` (qgZ) reduces through its own quantized all-to-all, not proven here: refused under SP;
- stages 0 and 1: refused at every sp, as preflight did before (SP is proven against sp=1 at stages 2 and 3, and
  the memory plan models those two only).

Top-level keys of the JSON change that scale too, and are refused under SP (`SCALE_KEYS`, each naming why):
`gradient_predivide_factor` (ZeRO-2 without reduce_scatter divides by it, all-reduces, and multiplies back by
factor / dp unless the factor equals the whole sp x dp group, when it divides by sp x dp instead of dp: gradients
sp times too small, silently; with reduce_scatter, stages 2 and 3 assert it is 1.0), `prescale_gradients`
(divides before the reduction; with reduce_scatter both stages assert it is off), `gradient_allreduce_op: sum`
(no division at all) and `compile.deepcompile` (DeepCompile reduces gradients in its own ops, dividing by its
process group's size, not by this table). At sp=1 DeepSpeed's own averaging is the mean whatever these say.

`gradient_average_divisor` is the one place that reads this; the SP loss asks it at run time, this rule refuses the
rest before any process group exists (the entrypoint through `parse_recipe`, and preflight).
"""

import json
from pathlib import Path
from typing import Literal

from longctx.config.paths import display_path, repo_path
from longctx.config.problems import Problem, error

SP_STAGES = (2, 3)
Divisor = Literal["dp", "sp_x_dp"]


def zero_section(ds: dict) -> dict:
    zero = ds.get("zero_optimization")
    return zero if isinstance(zero, dict) else {}


# Top-level keys that change how DeepSpeed 0.19.8 scales the summed gradients: (is it set to a non-default value,
# what is wrong under SP, the fix)
SCALE_KEYS = {
    "gradient_predivide_factor": (
        lambda v: float(v) != 1.0,
        (
            "is {value}: ZeRO-2 without reduce_scatter then divides the summed SP gradients by sp x dp when it equals "
            "the group size (by dp otherwise), gradients sp times too small, silently; with reduce_scatter DeepSpeed "
            "asserts it is 1.0. The SP loss is proven against neither"
        ),
        "remove it (DeepSpeed's default 1.0)",
    ),
    "prescale_gradients": (
        bool,
        (
            "is {value}: DeepSpeed divides before the reduction instead of after (and asserts it is off with "
            "reduce_scatter); the SP loss is proven against its division after the reduction only"
        ),
        "remove it (DeepSpeed's default false)",
    ),
    "gradient_allreduce_op": (
        lambda v: v != "mean",
        (
            "is {value!r}: DeepSpeed then sums the gradients without dividing, so the SP loss (scaled for a mean over "
            "dp) trains with gradients dp times too large"
        ),
        'remove it (DeepSpeed\'s default "mean")',
    ),
    "compile.deepcompile": (
        bool,
        (
            "is {value}: DeepCompile reduces gradients in its own ops, divided by its process group's size, which "
            "longctx/config/rules/zero.py does not read; the SP loss is not proven against it"
        ),
        "remove it (or set it to false)",
    ),
}


def json_value(ds: dict, dotted: str):
    """The value of a dotted key of the JSON, or None where it is absent."""
    value = ds
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def scale_key_problem(ds: dict) -> tuple[str, str, str] | None:
    """(key, what is wrong, fix) for the first key of SCALE_KEYS the JSON sets; None when it sets none."""
    for key, (is_set, msg, fix) in SCALE_KEYS.items():
        value = json_value(ds, key)
        if value is not None and is_set(value):
            return key, msg.format(value=value), fix
    return None


def gradient_average_divisor(ds: dict) -> Divisor | None:
    """What DeepSpeed divides the summed SP gradients by for this JSON: "dp", "sp_x_dp", or None (not supported)."""
    zero = zero_section(ds)
    stage = zero.get("stage", 0)
    if stage not in SP_STAGES or zero.get("zero_quantized_gradients", False) or scale_key_problem(ds):
        return None
    if stage == 2:
        return "dp"
    return "sp_x_dp" if zero.get("reduce_scatter", True) else None


def unsupported(ds: dict, sp: int) -> tuple[str, str, str] | None:
    """(key, what is wrong, fix) for a JSON this repository does not run at this sp; None if it does."""
    zero = zero_section(ds)
    stage = zero.get("stage", 0)
    if stage not in SP_STAGES:
        why = "the SP loss and the memory plan" if sp > 1 else "the memory plan"
        return "zero_optimization.stage", f"is {stage}; {why} support ZeRO 2 or 3 only", "set stage: 3 (or 2)"
    if sp == 1:
        return None
    if scale_key_problem(ds):
        return scale_key_problem(ds)
    if zero.get("zero_quantized_gradients", False):
        msg = "is true; its quantized all-to-all gradient reduction is not one the SP loss is proven against"
        return "zero_optimization.zero_quantized_gradients", msg, "set it to false (or remove it)"
    if stage == 3 and not zero.get("reduce_scatter", True):
        msg = (
            "is false: ZeRO-3 then divides gradient buckets up to reduce_bucket_size by dp and larger ones by "
            "sp x dp (deepspeed 0.19.8, with contiguous_gradients), so no SP loss weighting is right for both and "
            "gradients come out too large, silently"
        )
        return "zero_optimization.reduce_scatter", msg, "set reduce_scatter: true (the default) or remove the key"
    return None


def read_deepspeed_json(topo) -> dict | None:
    """The DeepSpeed JSON the accelerate YAML names, or None when it is unset or unreadable (preflight says why)."""
    if not topo.deepspeed_config_file:
        return None
    try:
        data = json.loads(Path(repo_path(topo.deepspeed_config_file)).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def zero_problems(recipe, args, model, topo, source: str) -> list[Problem]:
    """Refuse a ZeRO stage other than 2 or 3, and under SP a flag whose gradient averaging the SP loss cannot match."""
    ds = read_deepspeed_json(topo)
    found = unsupported(ds, topo.sp_size) if ds is not None else None
    if found is None:
        return []
    key, msg, fix = found
    return [error(display_path(repo_path(topo.deepspeed_config_file)), key, msg, fix)]
