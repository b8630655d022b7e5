"""Load the dataset `make data` prepared for a recipe, through the manifest data_prep wrote (no network), or
with `prepare_data: off` the recipe's dataset as `datasets` loads it (TRL then tokenizes it itself)."""

from pathlib import Path

from longctx.config.prepared_manifest import DATASET, ManifestError, find_prepared, prep_settings
from longctx.config.recipe import RecipeError
from longctx.training.data.collator import PreparedCollator


def prepared_dir(recipe, args, model, topo, role: str = "train") -> Path:
    """The folder data_prep wrote for this recipe's data settings, as its manifest records it; `role="eval"`:
    the held-out documents (`eval_holdout`), prepared the same way."""
    try:
        return find_prepared(prep_settings(recipe, args, model, topo, role), recipe.config_source)
    except ManifestError as exc:
        raise RecipeError(recipe.config_source, [f"`prepare_data: {recipe.prepare_data}`: {exc}"]) from None


def load_prepared(recipe, args, model, topo, tokenizer):
    """(train dataset, collator) for SFTTrainer; the trainer must skip its own preparation of the rows."""
    from datasets import load_from_disk

    dataset = load_from_disk(str(prepared_dir(recipe, args, model, topo) / DATASET))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return dataset, PreparedCollator(pad_token_id=pad)


def load_prepared_eval(recipe, args, model, topo):
    """The held-out eval rows `make data` prepared beside the training rows, or None without `eval_holdout`."""
    from datasets import load_from_disk

    if not recipe.eval_holdout:
        return None
    return load_from_disk(str(prepared_dir(recipe, args, model, topo, role="eval") / DATASET))


def recipe_datasets(recipe, args, model, topo, tokenizer):
    """(train dataset, eval dataset or None, collator or None) for SFTTrainer, as the recipe's `prepare_data` says."""
    if recipe.prepare_data != "off":  # rows `make data` tokenized, packed and padded to SP-safe lengths
        train, collator = load_prepared(recipe, args, model, topo, tokenizer)
        args.dataset_kwargs = {**(args.dataset_kwargs or {}), "skip_prepare_dataset": True}
        args.remove_unused_columns = False
        return train, load_prepared_eval(recipe, args, model, topo), collator  # eval: held-out whole documents
    from datasets import load_dataset

    dataset = load_dataset(recipe.dataset_name, name=recipe.dataset_config, streaming=recipe.dataset_streaming)
    evaluated = args.eval_strategy != "no"
    return dataset[recipe.dataset_train_split], dataset[recipe.dataset_test_split] if evaluated else None, None
