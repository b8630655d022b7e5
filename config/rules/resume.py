"""Recipe rules for resuming (the checkpoint must exist and load on this topology) and for custom model code."""

from config.checkpoints import resolve_resume, resume_problems
from config.rules.remote_code import remote_code_problems


def resume_recipe_problems(recipe, sft, model, topo, source: str) -> list[str]:
    """A resume that cannot load on this topology, and custom model code that was not opted into."""
    problems = remote_code_problems(model, sft, source)
    try:
        checkpoint = resolve_resume(sft.resume_from_checkpoint, sft.output_dir)
    except ValueError as exc:
        return problems + [f"{source}: {exc}"]
    if checkpoint:
        problems += [f"{source}: {p}" for p in resume_problems(checkpoint, topo)]
    return problems
