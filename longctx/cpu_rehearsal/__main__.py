"""`python -m longctx.cpu_rehearsal RECIPE`: run a recipe in miniature on CPU through the code path of its GPU run.

    python -m longctx.cpu_rehearsal llama3.1-8b/sft-256k-sp8 [--workdir DIR] [--keep]
    make rehearse RECIPE=llama3.1-8b/sft-256k-sp8

Prints what it changed from the real recipe, then runs preflight, data preparation, training with a
checkpoint, a resume from it, loading the saved model back and a first-step loss comparison with sp=1.
Exit 0 when every step passed, 1 when one failed (its output tail is shown), 2 for an unknown recipe.
"""

import argparse
import copy
import shutil
import sys
import tempfile
from pathlib import Path

from longctx.config.paths import resolve_recipe, unknown_recipe_message
from longctx.cpu_rehearsal.derive import Derived, derive


def at_sp1(derived: Derived, work: Path) -> Derived | None:
    """The same miniature on one process (None when the rehearsal is already at sp=1)."""
    if derived.sp == 1 and derived.dp == 1:
        return None
    sp1 = copy.deepcopy(derived)
    sp1.sp = sp1.dp = 1
    sp1.deepspeed = None  # the accelerate YAML keeps pointing at the rehearsal's DeepSpeed JSON
    pc = sp1.accelerate["parallelism_config"]
    pc.update(parallelism_config_sp_size=1, parallelism_config_dp_shard_size=1)
    sp1.accelerate["num_processes"] = 1
    sp1.recipe.update(accelerate_config=str(work / "accelerate-sp1.yaml"), output_dir=str(work / "out-sp1"))
    return sp1


def prepare_model(derived: Derived, raw_recipe: Path, work: Path) -> list[str]:
    """The miniature model and tokenizer, and the sample data, in the rehearsal's folder."""
    from longctx.config.chat_templates import resolve_chat_template, stock_template
    from longctx.config.paths import ARCHITECTURES_DIR, repo_path
    from longctx.config.topology import load_yaml_mapping
    from longctx.cpu_rehearsal.miniature import write_model
    from longctx.cpu_rehearsal.sample import write_sample

    raw = load_yaml_mapping(raw_recipe)
    name = raw["model_name_or_path"]
    snapshot = Path(raw.get("model_config_source") or ARCHITECTURES_DIR / name)
    if not (snapshot / "config.json").is_file():
        snapshot = repo_path(name)  # a local model folder (the tiny CPU recipe)
    corpus = write_sample(work / "data", raw.get("dataset_format", "auto"), int(raw.get("seed", 42)))
    # The stand-in carries the model's stock template, as the real tokenizer does, so the recipe's
    # `chat_template_path` must replace it in data_prep and in the trainer for the rehearsal to pass.
    stock = stock_template(name)
    template_path = resolve_chat_template(raw.get("chat_template_path"))
    template = stock[0] if stock else (template_path.read_text() if template_path else None)
    return write_model(work / "model", snapshot, derived.sp, corpus, name, template)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m longctx.cpu_rehearsal", description=__doc__.split("\n")[0])
    parser.add_argument("recipe", help="a recipe name under recipes/ or a path")
    parser.add_argument("--workdir", help="where the miniature's files go (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    path = resolve_recipe(args.recipe)
    if not path.is_file():
        print(f"error: {unknown_recipe_message(args.recipe)}", file=sys.stderr)
        return 2
    work = Path(args.workdir or tempfile.mkdtemp(prefix="rehearsal-")).resolve()
    from longctx.cpu_rehearsal.run import StepFailed, rehearse

    try:
        derived = derive(path, work)
        notes = prepare_model(derived, path, work) + derived.changes
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
