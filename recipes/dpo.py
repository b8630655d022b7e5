"""Preference training (DPO, IPO, SimPO, ...) with Ulysses sequence parallelism: the `trainer: dpo` entrypoint.

Launch from the repository root with the accelerate YAML the recipe names in `accelerate_config`:

    accelerate launch --config_file accelerate_configs/cpu-sp2.yaml recipes/dpo.py \
        --config recipes/tiny-llama/dpo-2k-cpu-sp2.yaml

or let make resolve the pair and prepare the pairs first: `make dpo RECIPE=tiny-dpo-2k ARGS="--beta 0.2"`.
The same strict recipe parser, mesh check, secret handling, process-wide fixes, metrics and resume as
`recipes/sft.py`, on TRL's DPOConfig (plus longctx/config/trainers/preference.py's keys) and `LongContextDPOTrainer`
(longctx/training/preference/trainer.py): TRL's DPOTrainer with each answer's log-probs summed over the SP group.
"""

import sys
import warnings

from transformers import AutoTokenizer
from trl import get_peft_config

from longctx.config.recipe import RecipeError, exit_on_recipe_error, parse_recipe
from longctx.training.model_build import build_model, load_recipe_model
from longctx.training.preference.collator import preference_datasets
from longctx.training.preference.trainer import LongContextDPOTrainer
from longctx.training.process_patches import install_process_patches
from longctx.training.run_lifecycle import begin_run, finish_run
from longctx.training.sequence_parallel.mesh import report_mesh

# torch deprecations raised inside DeepSpeed/transformers collectives and by the per-sequence all-reduce, once per
# step on every rank: they would bury the loss lines and are not actionable from a recipe.
warnings.filterwarnings("ignore", message=r".*(all_gather|all_reduce|reduce_scatter_tensor|all_gather_into_tensor).*")


def main(recipe, training_args, model_args):
    if recipe.trainer != "dpo":
        raise RecipeError(
            recipe.config_source, [f"`trainer` is `{recipe.trainer}`: run it with `make sft` (recipes/sft.py)"]
        )
    topo = begin_run(recipe, training_args, "recipes/dpo.py", "make dpo")  # before anything is downloaded

    tokenizer = AutoTokenizer.from_pretrained(
        model_args.model_name_or_path,
        revision=model_args.model_revision,
        trust_remote_code=training_args.trust_remote_code,
    )
    if training_args.chat_template_path:  # the template data_prep rendered the pairs with, saved with the model
        with open(training_args.chat_template_path, encoding="utf-8") as f:
            tokenizer.chat_template = f.read()
    # ---- data: the pairs `make data` tokenized and packed whole into rows padded to a multiple of sp
    train_dataset, eval_dataset, collator = preference_datasets(recipe, training_args, model_args, topo, tokenizer)

    # ---- model (and, for `reference_log_probs: frozen_model`, its frozen copy built the same way: the recipe's
    # config overrides included, which TRL's own reference loading would drop), the process-wide fixes, the trainer
    ref_model = (
        load_recipe_model(recipe, model_args, training_args)
        if training_args.reference_log_probs == "frozen_model"
        else None
    )
    model = build_model(recipe, model_args, training_args)
    isolation_line = install_process_patches(recipe, model_args, model, topo.sp_size)
    trainer = LongContextDPOTrainer(
        model=model,
        ref_model=ref_model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        data_collator=collator,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
        recipe=recipe,
        model_args=model_args,
    )
    report_mesh(trainer, training_args.max_length)
    trainer.accelerator.print(isolation_line)

    # ---- train (the reference pass runs first, on this mesh), then save and print the next steps
    finish_run(trainer, recipe, training_args, model_args, evaluate=False)


if __name__ == "__main__":
    try:
        recipe_args, dpo_config, model_config = parse_recipe(sys.argv[1:])
        main(recipe_args, dpo_config, model_config)
    except RecipeError as exc:
        exit_on_recipe_error(exc)
