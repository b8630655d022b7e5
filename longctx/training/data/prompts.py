"""The prompt rows of a GRPO recipe (`trainer: grpo`), as `make data` checked and filtered them
(data_prep/trainers/prompts.py),
found through their manifest like every prepared dataset (no network): the `prompt` column and every other column
unchanged and untokenized, which is what TRL's GRPOTrainer takes (it tokenizes prompts at generation and passes the
other columns to the reward functions)."""

from longctx.config.prepared_manifest import DATASET
from longctx.training.data.load_prepared import load_prepared_eval, prepared_dir


def prompt_datasets(recipe, config, model, topo):
    """(train prompts, held-out prompts or None) for GRPOTrainer's `train_dataset` and `eval_dataset`."""
    from datasets import load_from_disk

    train = load_from_disk(str(prepared_dir(recipe, config, model, topo) / DATASET))
    config.remove_unused_columns = False  # the reward functions read the extra columns
    return train, load_prepared_eval(recipe, config, model, topo)
