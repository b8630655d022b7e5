"""Recipe rules for resuming (the checkpoint must exist, load on this topology and keep its batch) and for custom
model code."""

from longctx.config.checkpoints import batch_mismatch, mesh_mismatch, resolve_resume
from longctx.config.paths import repo_path
from longctx.config.problems import Problem, error
from longctx.config.rules.remote_code import remote_code_problems

KEY = "resume_from_checkpoint"


def resume_recipe_problems(recipe, sft, model, topo, source: str) -> list[Problem]:
    """A resume that cannot load on this topology, and custom model code that was not opted into."""
    problems = remote_code_problems(model, sft, source)
    value = sft.resume_from_checkpoint
    if not value or str(value).lower() == "false":
        return problems
    if str(value).lower() not in ("true", "auto"):
        value = str(repo_path(str(value)))
    try:
        checkpoint = resolve_resume(value, sft.output_dir or ".")
    except ValueError as exc:
        fix = "point resume_from_checkpoint at a checkpoint-N folder, `auto` (the latest, or fresh), or remove it"
        return problems + [error(source, KEY, str(exc).removeprefix(f"`{KEY}`: "), fix)]
    if not checkpoint:
        return problems
    mismatch = mesh_mismatch(checkpoint, topo)
    problems += [error(source, KEY, *mismatch)] if mismatch else []
    batch = batch_mismatch(checkpoint, topo, sft.per_device_train_batch_size, sft.gradient_accumulation_steps)
    return problems + ([error(source, "gradient_accumulation_steps", *batch)] if batch else [])
