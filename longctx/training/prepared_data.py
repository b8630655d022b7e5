"""Load the dataset `make data` prepared for a recipe, through the manifest data_prep wrote (no network)."""

from pathlib import Path

from longctx.config.prepared import DATASET, ManifestError, find_prepared, prep_settings
from longctx.config.recipe import RecipeError
from longctx.training.collator import PreparedCollator


def prepared_dir(recipe, sft, model, topo, role: str = "train") -> Path:
    """The folder data_prep wrote for this recipe's data settings, as its manifest records it; `role="eval"`:
    the held-out documents (`eval_holdout`), prepared the same way."""
    try:
        return find_prepared(prep_settings(recipe, sft, model, topo, role), recipe.config_source)
    except ManifestError as exc:
        raise RecipeError(recipe.config_source, [f"`prepare_data: {recipe.prepare_data}`: {exc}"]) from None


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
