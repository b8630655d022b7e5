"""Rule: a recipe that trains on the assistant's tokens only must use a chat template with generation markers.

data_prep masks a `messages` row with `apply_chat_template(return_assistant_tokens_mask=True)`, which finds the
assistant's tokens only between `{% generation %}` / `{% endgeneration %}`; TRL's `assistant_only_loss` does
the same on the fly. Without markers data_prep stops (hours into a GPU booking, on a compute node), so this
rule refuses the recipe first, offline, naming `chat_template_path` and the template to set.
"""

from longctx.config.chat_templates import (
    ChatTemplateError,
    has_generation_markers,
    model_type,
    resolve_chat_template,
    stock_template,
)
from longctx.config.families.registry import family_by_model_type
from longctx.config.problems import Problem, error, warning

KEY = "chat_template_path"


def needs_markers(recipe, args) -> bool:
    """data_prep's `messages` rows, or TRL's own assistant-only loss when data_prep is off."""
    if recipe.prepare_data != "off":
        return recipe.dataset_format == "messages"
    return bool(getattr(args, "assistant_only_loss", False))


def suggested_fix(model_type: str | None) -> str:
    """The training template the model's family row names (the stock one plus markers), else how to write one."""
    family = family_by_model_type(model_type)
    path = family.training_template if family is not None else None
    if path:
        return f"set `{KEY}: {path}` (the stock template plus generation markers)"
    return f"set `{KEY}` to a .jinja copy of the model's template with {{% generation %}} around assistant turns"


def chat_template_problems(recipe, args, model, topo, source: str) -> list[Problem]:
    """Every reason the recipe's chat template cannot give assistant-only masks; [] when it can."""
    if not needs_markers(recipe, args):
        return []
    fix = suggested_fix(model_type(recipe.model_config_source or model.model_name_or_path))
    if args.chat_template_path:
        try:
            path = resolve_chat_template(args.chat_template_path)
        except ChatTemplateError as exc:
            return [error(source, KEY, str(exc).removeprefix(f"`{KEY}` "), fix)]
        if has_generation_markers(path.read_text()):
            return []
        msg = f"{path.name} has no {{% generation %}} markers: no assistant tokens to train"
        return [error(source, KEY, msg, fix)]
    found = stock_template(model.model_name_or_path)
    if found is None:
        msg = f"is not set and no chat template of {model.model_name_or_path!r} is on disk to check for markers"
        return [warning(source, KEY, msg, fix)]
    template, where = found
    if has_generation_markers(template):
        return []
    msg = (
        f"is not set, and the tokenizer's own template ({where}) has no {{% generation %}} markers, so "
        "data_prep cannot find the assistant's tokens for assistant-only loss"
    )
    return [error(source, KEY, msg, fix)]
