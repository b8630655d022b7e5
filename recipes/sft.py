"""Supervised fine-tuning with Ulysses sequence parallelism: the one entrypoint every recipe runs.

Launch from the repository root with the accelerate YAML the recipe names in `accelerate_config`:

    accelerate launch --config_file accelerate_configs/cpu-sp2.yaml recipes/sft.py \
        --config recipes/tiny-llama/sft-2k-cpu-sp2.yaml

or let make resolve the pair: `make sft RECIPE=tiny-llama/sft-2k-cpu-sp2 ARGS="--max_steps 10"`. Any recipe key can be
overridden on the command line (`--learning_rate 1.0e-4`); unknown keys are errors, never ignored.

What this adds to TRL's `trl/scripts/sft.py`: strict recipe parsing with checks against the topology
(longctx/config/recipe.py), a refusal to run on a topology other than the recipe's, a random-weight mode
(`model_init: random`), padding to a multiple of sp by default, a report of the mesh and of the sequence
shard each rank actually received, and `LongContextSFTTrainer` (longctx/training/trainer.py): TRL's
SFTTrainer with the SP fixes as method overrides, after the process-wide ones (longctx/training/process_patches.py).
"""

import sys
import warnings

from transformers import AutoTokenizer
from trl import get_peft_config

from longctx.config.recipe import RecipeError, exit_on_recipe_error, parse_recipe
from longctx.training.data.load_prepared import recipe_datasets
from longctx.training.model_build import build_model
from longctx.training.process_patches import install_process_patches
from longctx.training.run_lifecycle import begin_run, finish_run
from longctx.training.sequence_parallel.mesh import report_mesh
from longctx.training.trainer import LongContextSFTTrainer

# torch deprecations raised inside DeepSpeed/transformers collectives, once per step on every rank: they
# would bury the loss lines and are not actionable from a recipe.
warnings.filterwarnings("ignore", message=r".*(all_gather|reduce_scatter_tensor|all_gather_into_tensor).*deprecated")


def main(recipe, training_args, model_args):
    topo = begin_run(recipe, training_args, "recipes/sft.py", "make sft")  # before anything is downloaded

    tokenizer = AutoTokenizer.from_pretrained(
        model_args.model_name_or_path,
        revision=model_args.model_revision,
        trust_remote_code=training_args.trust_remote_code,
    )
    # ---- data: prepared rows (`make data`, through their manifest), or a dataset TRL tokenizes itself
    train_dataset, eval_dataset, collator = recipe_datasets(recipe, training_args, model_args, topo, tokenizer)
    if training_args.pad_to_multiple_of is None:  # every batch splits evenly across the SP group, by construction
        training_args.pad_to_multiple_of = topo.sp_size

    # ---- model, the process-wide fixes, then the trainer with its per-trainer and per-model ones
    model = build_model(recipe, model_args, training_args)  # with the recipe's config overrides
    isolation_line = install_process_patches(recipe, model_args, model, topo.sp_size)
    trainer = LongContextSFTTrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        data_collator=collator,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
        recipe=recipe,
    )
    report_mesh(trainer, training_args.max_length)
    trainer.accelerator.print(isolation_line)

    # ---- train, then save and print the next steps (longctx/training/run_lifecycle.py)
    finish_run(trainer, recipe, training_args, model_args)


if __name__ == "__main__":
    try:
        recipe_args, sft_config, model_config = parse_recipe(sys.argv[1:])
        main(recipe_args, sft_config, model_config)
    except RecipeError as exc:
        exit_on_recipe_error(exc)
