"""`python -m longctx rehearse RECIPE`: run a recipe in miniature on CPU through the code path of its GPU run.

    python -m longctx rehearse llama8b-256k [--workdir DIR] [--keep] [-- --lora_r 8]
    make rehearse RECIPE=llama8b-256k

Recipe overrides after `--` apply to the real recipe before it is shrunk, except the keys the rehearsal sets
itself (its size, folders and what a CPU cannot run: `SET_BY_REHEARSAL`), which are refused.

Prints what it changed from the real recipe, then runs preflight, data preparation, training with a
checkpoint, a resume from it, loading the saved model back and a comparison with sp=1 (every step's loss and grad
norm; the check of a model type no family row proves: docs/adding-a-model.md).
Exit 0 when every step passed, 1 when one failed (its output tail is shown), 2 for an unknown recipe.
"""

import argparse
import copy
import shutil
import sys
import tempfile
from pathlib import Path

from longctx.config.keys import nearest_key_problems, override_values, split_argv
from longctx.config.paths import recipes_epilog, resolve_recipe, unknown_recipe_message
from longctx.cpu_rehearsal.derive import SET_BY_REHEARSAL, Derived, derive, raw_recipe


def at_sp1(derived: Derived, work: Path) -> Derived | None:
    """The same miniature on one process (None when the rehearsal is already at sp=1): the dp ranks' rows of a
    step become micro-batches of one step (accumulation x dp), so its first step trains the same rows."""
    if derived.sp == 1 and derived.dp == 1:
        return None
    sp1 = copy.deepcopy(derived)
    sp1.sp = sp1.dp = sp1.ring = 1
    sp1.deepspeed = None  # the accelerate YAML keeps pointing at the rehearsal's DeepSpeed JSON
    pc = sp1.accelerate["parallelism_config"]
    pc.update(parallelism_config_sp_size=1, parallelism_config_dp_shard_size=1)
    pc.pop("parallelism_config_sp_ring_size", None)
    sp1.accelerate["num_processes"] = 1
    sp1.recipe.update(accelerate_config=str(work / "accelerate-sp1.yaml"), output_dir=str(work / "out-sp1"))
    sp1.recipe["gradient_accumulation_steps"] = int(derived.recipe.get("gradient_accumulation_steps", 1)) * derived.dp
    return sp1


def prepare_model(derived: Derived, raw: dict, work: Path) -> list[str]:
    """The miniature model and tokenizer, and the sample data, in the rehearsal's folder."""
    from longctx.config.chat_templates import resolve_chat_template, stock_template
    from longctx.config.model.config_json import find_model_config
    from longctx.cpu_rehearsal.run import StepFailed
    from longctx.cpu_rehearsal.sample import write_sample
    from longctx.cpu_rehearsal.stand_in_tokenizer import write_model

    name = raw["model_name_or_path"]
    config_json = find_model_config(name, raw.get("model_config_source"))
    if config_json is None:
        raise StepFailed(f"no offline config.json for {name!r}: `python -m longctx validate` says where to put one")
    snapshot = config_json.parent
    fmt = {"dpo": "preference", "grpo": "prompts"}.get(raw.get("trainer"), raw.get("dataset_format", "auto"))
    corpus = write_sample(work / "data", fmt, int(raw.get("seed", 42)))
    # The stand-in carries the model's stock template, as the real tokenizer does, so the recipe's
    # `chat_template_path` must replace it in data_prep and in the trainer for the rehearsal to pass.
    stock = stock_template(name)
    template_path = resolve_chat_template(raw.get("chat_template_path"))
    template = stock[0] if stock else (template_path.read_text() if template_path else None)
    sensitive = bool(derived.recipe.get("allow_unproven_attention"))  # the rehearsal is the model's SP check
    return write_model(work / "model", snapshot, derived.sp, corpus, name, template, derived.ulysses, sensitive)


def override_problems(overrides: dict, trainer: str = "sft") -> list[str]:
    """Unknown keys (with the nearest one) and keys the rehearsal sets itself, each as a line to print."""
    from longctx.config.recipe import recipe_keys

    known = recipe_keys(trainer)
    problems = [p.line() for p in nearest_key_problems(overrides, known, "command line", "check the spelling")]
    own = sorted(set(overrides) & SET_BY_REHEARSAL)
    if own:
        problems.append(
            f"error: {', '.join('--' + k for k in own)}: the rehearsal sets these itself (its size, folders and "
            "what a CPU cannot run); drop them from ARGS (`python -m longctx validate` checks the real values)"
        )
    return problems


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m longctx rehearse",
        description=__doc__.split("\n")[0],
        epilog=recipes_epilog("python -m longctx rehearse llama8b-256k"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("recipe", help="a recipe name under recipes/ or a path")
    parser.add_argument("--workdir", help="where the miniature's files go (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    own, override_argv = split_argv(argv)
    args = parser.parse_args(own)
    path = resolve_recipe(args.recipe)
    if not path.is_file():
        print(f"error: {unknown_recipe_message(args.recipe)}", file=sys.stderr)
        return 2
    overrides = override_values(override_argv)
    problems = override_problems(overrides, raw_recipe(path, overrides).get("trainer", "sft"))
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 2
    work = Path(args.workdir or tempfile.mkdtemp(prefix="rehearsal-")).resolve()
    from longctx.cpu_rehearsal.run import StepFailed, rehearse

    try:
        derived = derive(path, work, overrides)
        notes = prepare_model(derived, raw_recipe(path, overrides), work) + derived.changes
        notes += [f"recipe overrides applied: {' '.join(override_argv)}"] if override_argv else []
        print(f"[rehearsal] {args.recipe} in miniature on CPU, in {work}; changed from the real recipe:")
        print("\n".join(f"  - {note}" for note in notes), flush=True)
        rehearse(derived, at_sp1(derived, work), work)
    except StepFailed as exc:
        print(f"[rehearsal] FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        if not args.workdir and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"[rehearsal] {args.recipe}: every step passed")
    return 0
