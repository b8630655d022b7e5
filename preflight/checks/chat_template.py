"""Chat template: assistant-only loss needs `{% generation %}` markers (the rule lives in config/rules/)."""

from config.rules.chat_template import chat_template_problems


def check(launch) -> list:
    model_type = launch.facts.config.get("model_type") if launch.facts is not None else None
    return chat_template_problems(launch.recipe, launch.sft, launch.model, launch.source, model_type)
