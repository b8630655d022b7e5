"""Load the dataset `make data` prepared for a recipe, found by recomputing its cache key."""

from pathlib import Path

from config.recipe import RecipeError
from data_prep.config import from_recipe
from data_prep.writer import DATASET, is_complete
from training.collator import PreparedCollator


def prepared_dir(recipe, sft, model, topo, role: str = "train") -> Path:
    """The folder data_prep writes for this recipe (same key: same source, tokenizer, layout and seed);
    `role="eval"`: the recipe's held-out documents (`eval_holdout`), prepared the same way."""
    cfg = from_recipe(recipe, sft, model, topo, role=role)
    folder = cfg.dataset_dir()
    if not is_complete(folder):
        raise RecipeError(
            recipe.config_source,
            [
                (
                    f"`prepare_data: {recipe.prepare_data}` but no prepared dataset for this recipe at {folder} "
                    "(the data, tokenizer, max_length or sp changed, or it was never built); run "
                    f"`make data RECIPE={recipe.config_source}` (`make sft` runs it for you)"
                )
            ],
        )
    return folder


def load_prepared(recipe, sft, model, topo, tokenizer):
    """(train dataset, collator) for SFTTrainer; the trainer must skip its own preparation of the rows."""
    from datasets import load_from_disk

    dataset = load_from_disk(str(prepared_dir(recipe, sft, model, topo) / DATASET))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return dataset, PreparedCollator(pad_token_id=pad)


def load_prepared_eval(recipe, sft, model, topo):
    """The held-out eval rows `make data` prepared beside the training rows, or None without `eval_holdout`."""
    from datasets import load_from_disk

    if not recipe.eval_holdout:
        return None
    return load_from_disk(str(prepared_dir(recipe, sft, model, topo, role="eval") / DATASET))
