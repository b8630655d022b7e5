"""Shared plumbing of the preference tests: pair files, their preparation for a recipe and mesh, and one launch."""

import json
import random
from pathlib import Path

from longctx.training.retrieval.haystack import filler_sentence, haystack
from tests.helpers.launching.launch import accelerate_launch, assert_ok, log_history

RECIPE = "tests/recipes/dpo-parity.yaml"


def write_pairs(folder: Path, n_pairs: int = 32, seed: int = 5, sentences=(2, 9)) -> Path:
    """Passkey pairs of ~100-300 row tokens: several to a 1024-token row, answers of unequal length (the rejected one
    sometimes adds sentences), so sums straddle shard boundaries and shards hold unequal answer tokens."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "train.jsonl", "w") as f:
        for _ in range(n_pairs):
            key, wrong = (str(rng.randrange(10_000, 100_000)) for _ in range(2))
            prompt = haystack(rng, rng.randint(*sentences), key) + " What is the pass key?"
            chosen = f" The pass key is {key}."
            tail = " ".join(filler_sentence(rng) for _ in range(rng.randint(0, 3)))
            f.write(json.dumps({"prompt": prompt, "chosen": chosen, "rejected": f" It is {wrong}. {tail}"}) + "\n")
    return folder


def recipe_argv(accel: str, data: Path, prepared: Path, out: Path, extra=()) -> list[str]:
    return [
        "--config", RECIPE, "--accelerate_config", accel, "--dataset_name", str(data),
        "--prepared_data_dir", str(prepared), "--output_dir", str(out), *extra,
    ]  # fmt: skip


def prepare(accel: str, data: Path, prepared: Path, extra=()) -> Path:
    """`make data` for the parity recipe on this mesh, in this process; the prepared folder."""
    from data_prep.recipe_data import prepare_for_recipe
    from longctx.config.recipe import parse_recipe, recipe_topology

    argv = recipe_argv(accel, data, prepared, prepared / "unused", extra)
    recipe, config, model = parse_recipe(argv)
    return prepare_for_recipe(recipe, config, model, recipe_topology(recipe), RECIPE)


def train(root: Path, data: Path, name: str, accel: str, script="recipes/dpo.py", extra=()):
    """(per-step logs, trained weights, stdout) of one launch of the parity recipe."""
    from safetensors.torch import load_file

    prepared, out = root / "prepared", root / name
    prepare(accel, data, prepared, extra)
    proc = accelerate_launch(accel, script, recipe_argv(accel, data, prepared, out, extra))
    assert_ok(proc)
    weights = out / "model.safetensors"
    weights = weights if weights.is_file() else out / "adapter_model.safetensors"  # a LoRA run saves its adapter
    return log_history(out), load_file(weights), proc.stdout


def eval_rows(output_dir: Path) -> list[dict]:
    """The evaluations a run logged (its `eval_*` rows)."""
    import json

    state = json.loads((Path(output_dir) / "trainer_state.json").read_text())
    return [row for row in state["log_history"] if "eval_loss" in row]
