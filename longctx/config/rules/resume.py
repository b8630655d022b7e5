"""Recipe rules for resuming (the checkpoint must exist, load on this topology and keep its batch; an output_dir
that holds checkpoints is resumed or refused, never trained over) and for custom model code."""

from longctx.config.checkpoints import (
    batch_mismatch,
    checkpoint_folders,
    latest_checkpoint,
    mesh_mismatch,
    resolve_resume,
)
from longctx.config.paths import repo_path
from longctx.config.problems import Problem, error
from longctx.config.rules.remote_code import remote_code_problems

KEY = "resume_from_checkpoint"


def existing_checkpoint_problems(args, source: str) -> list[Problem]:
    """A training run not asked to resume, into an output_dir that holds a complete checkpoint: refused, naming both
    choices. Checked by preflight before a launch (longctx/preflight/checks/output_dir.py) and by every run before
    it loads anything (longctx/config/run_paths.py); never by eval or export, which read a finished run's folder.

    Why refuse rather than resume by default: the same command typed again after a Ctrl-C or a crash would train
    from step 1 and overwrite checkpoint-N without a word (upstream's Trainer does); resuming it silently is no
    better when the recipe was edited in between (a new learning rate or dataset applied to the old optimizer
    state and data position is neither run). The refusal costs one flag and says which: `auto` resumes (what the
    printed preemption line and the Slurm/Kubernetes scripts pass), another output_dir starts over."""
    value = args.resume_from_checkpoint
    if value and str(value).lower() != "false":
        return []
    out = repo_path(args.output_dir or ".")
    folders = checkpoint_folders(out) if out.is_dir() else []
    if not folders:
        return []
    found = latest_checkpoint(out)
    held = f"{found.name}, a run's complete checkpoint" if found else f"{folders[-1][1].name} (incomplete)"
    what = (
        f"{args.output_dir} already holds {held}; "
        "this run would start from step 1 and overwrite that run's checkpoints"
    )
    fix = (
        "resume that run with `--resume_from_checkpoint auto`, or start over with another `--output_dir` "
        f"(or delete the checkpoint-N folders of {args.output_dir})"
    )
    return [error(source, KEY, what, fix)]


def resume_recipe_problems(recipe, args, model, topo, source: str) -> list[Problem]:
    """A resume that cannot load on this topology, and custom model code that was not opted into."""
    problems = remote_code_problems(model, args, source)
    value = args.resume_from_checkpoint
    if not value or str(value).lower() == "false":
        return problems
    if str(value).lower() not in ("true", "auto"):
        value = str(repo_path(str(value)))
    try:
        checkpoint = resolve_resume(value, args.output_dir or ".")
    except ValueError as exc:
        fix = "point resume_from_checkpoint at a checkpoint-N folder, `auto` (the latest, or fresh), or remove it"
        return problems + [error(source, KEY, str(exc).removeprefix(f"`{KEY}`: "), fix)]
    if not checkpoint:
        return problems
    mismatch = mesh_mismatch(checkpoint, topo)
    problems += [error(source, KEY, *mismatch)] if mismatch else []
    batch = batch_mismatch(checkpoint, topo, args.per_device_train_batch_size, args.gradient_accumulation_steps)
    return problems + ([error(source, "gradient_accumulation_steps", *batch)] if batch else [])
