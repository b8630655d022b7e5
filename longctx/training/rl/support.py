"""What the long-context GRPO trainer refuses, checked when it is built (the recipe rules say the same first).

Why here too: a recipe that reached the trainer without the rules (a script building the trainer, a key set on the
command line after validation) must not train on something the trainer does not compute. Each refusal names the
key and the fix, read from the lists in longctx/config/trainers/rl.py, so the rules and the trainer cannot disagree.
"""

from longctx.config.recipe import RecipeError, recipe_topology
from longctx.config.trainers.rl import (
    LOSS_TYPES,
    REFUSED_MESH,
    REFUSED_MODEL_FEATURES,
    REFUSED_OPTIONS,
    REFUSED_RECIPE_KEYS,
    REFUSED_UNDER_SP,
)


def option_problems(args, sp: int) -> list[str]:
    """The recipe's GRPO keys the trainer does not compute at this sp, as messages."""
    problems = []
    refused = REFUSED_OPTIONS + (REFUSED_UNDER_SP if sp > 1 else ())
    for key, fine, why, fix in refused:
        if getattr(args, key, fine) != fine:
            where = f" under sp={sp}" if sp > 1 and any(key == k for k, *_ in REFUSED_UNDER_SP) else ""
            problems.append(f"`{key}` is {getattr(args, key)!r}{where}: {why}; {fix}")
    if args.loss_type not in LOSS_TYPES:
        problems.append(f"`loss_type` {args.loss_type!r} is not computed; use one of {', '.join(LOSS_TYPES)}")
    return problems


def recipe_problems(recipe) -> list[str]:
    """The recipe keys (RecipeArguments) a GRPO run refuses."""
    return [
        f"`{key}` is {getattr(recipe, key)!r}: {why}; {fix}"
        for key, fine, why, fix in REFUSED_RECIPE_KEYS
        if getattr(recipe, key, fine) != fine
    ]


def model_problems(model, aux_loss_enabled: bool, is_vlm: bool) -> list[str]:
    """The model features the trainer refuses (longctx/config/trainers/rl.py REFUSED_MODEL_FEATURES)."""
    problems = []
    text = model.config.get_text_config()
    if aux_loss_enabled:
        problems.append(REFUSED_MODEL_FEATURES["router_aux_loss"])
    if "linear_attention" in (getattr(text, "layer_types", None) or []):
        problems.append(REFUSED_MODEL_FEATURES["linear_attention"])
    if is_vlm:
        problems.append(REFUSED_MODEL_FEATURES["vision"])
    return problems


def refuse_unsupported(trainer, sp: int) -> None:
    """Raise a RecipeError naming every refused key or feature of this run (none: nothing happens)."""
    problems = option_problems(trainer.args, sp) + recipe_problems(trainer.recipe)
    problems += model_problems(trainer.model, trainer.aux_loss_enabled, trainer._is_vlm)
    if trainer.args.cast_lm_head_to_fp32 and trainer.args.beta and not trainer.uses_adapter_reference:
        problems.append(REFUSED_MODEL_FEATURES["cast_lm_head_to_fp32"])
    if recipe_topology(trainer.recipe).sp_ring_size > 1:
        problems.append(REFUSED_MESH["sp_ring_size"])
    if problems:
        raise RecipeError(trainer.recipe.config_source, problems)
