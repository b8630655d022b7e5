"""The paths a run reads from its arguments, resolved once by either entrypoint (recipes/sft.py, recipes/dpo.py)
before anything is loaded: the checkpoint to resume and the chat template file."""

import os

from longctx.config.chat_templates import ChatTemplateError, resolve_chat_template
from longctx.config.checkpoints import auto_resume_line, resolve_resume
from longctx.config.recipe import RecipeError
from longctx.config.rules.resume import existing_checkpoint_problems


def resolve_run_paths(recipe, training_args, resolve=resolve_resume) -> None:
    """`resume_from_checkpoint: true` -> the latest complete checkpoint folder (`auto`: that, or a fresh start
    when there is none), and a chat template name or repo-relative file -> the file data_prep read too (TRL opens
    it in the trainer); either missing is a recipe error. `resolve`: how the checkpoint is resolved (a launched
    run passes longctx/training/checkpoints/agreed_resume.py's: once, on rank 0, for every rank)."""
    asked = str(training_args.resume_from_checkpoint).lower()
    refused = existing_checkpoint_problems(training_args, recipe.config_source)
    if refused:
        raise RecipeError(recipe.config_source, refused)
    try:
        training_args.resume_from_checkpoint = resolve(training_args.resume_from_checkpoint, training_args.output_dir)
        if asked == "auto" and os.environ.get("RANK", "0") == "0":
            print(f"[resume] {auto_resume_line(training_args.resume_from_checkpoint, training_args.output_dir)}")
        template = resolve_chat_template(training_args.chat_template_path)
    except (ValueError, ChatTemplateError) as exc:
        raise RecipeError(recipe.config_source, [str(exc)]) from None
    training_args.chat_template_path = str(template) if template else None
