"""Online RL (GRPO and TRL's related losses) with Ulysses sequence parallelism: the `trainer: grpo` entrypoint.

Launch from the repository root with the accelerate YAML the recipe names in `accelerate_config`:

    accelerate launch --config_file accelerate_configs/cpu-sp2.yaml recipes/grpo.py --config RECIPE.yaml

or let make resolve the pair: `make grpo RECIPE=... ARGS="--beta 0.04"`. The same strict recipe parser, mesh
check, secret handling, process-wide fixes, metrics and resume as `recipes/sft.py`, on TRL's GRPOConfig (plus
longctx/config/trainers/rl.py's keys) and `LongContextGRPOTrainer` (longctx/training/rl/trainer.py): TRL's GRPOTrainer
with completions sampled on each rank, scored in group rows (a prompt once per group with `prefix_sharing`) split
across the SP group, and per-token log-probs exact across it.
"""

import sys
import warnings

from transformers import AutoTokenizer
from trl import get_peft_config

from longctx.config.recipe import RecipeError, exit_on_recipe_error, parse_recipe
from longctx.training.data.prompts import prompt_datasets
from longctx.training.model_build import build_model, load_recipe_model
from longctx.training.process_patches import install_process_patches
from longctx.training.rl.rewards import load_reward_functions
from longctx.training.rl.trainer import LongContextGRPOTrainer
from longctx.training.run_lifecycle import begin_run, finish_run
from longctx.training.sequence_parallel.mesh import report_mesh

# torch deprecations raised inside DeepSpeed/transformers collectives and by the per-token all-gather, once per step
# on every rank: they would bury the loss lines and are not actionable from a recipe.
warnings.filterwarnings("ignore", message=r".*(all_gather|all_reduce|reduce_scatter_tensor|all_gather_into_tensor).*")


def main(recipe, training_args, model_args):
    if recipe.trainer != "grpo":
        raise RecipeError(
            recipe.config_source, [f"`trainer` is `{recipe.trainer}`: run it with `make {recipe.trainer}`"]
        )
    topo = begin_run(recipe, training_args, "recipes/grpo.py", "make grpo")  # before anything is downloaded

    tokenizer = AutoTokenizer.from_pretrained(
        model_args.model_name_or_path,
        revision=model_args.model_revision,
        trust_remote_code=training_args.trust_remote_code,
        padding_side="left",
    )
    if training_args.chat_template_path:  # the template `make data` counted the prompts with; used in generation
        with open(training_args.chat_template_path, encoding="utf-8") as f:
            tokenizer.chat_template = f.read()
    # ---- data: the prompt rows `make data` checked (a `prompt` column and the columns the rewards read), as TRL
    # takes them (it tokenizes prompts itself); the rewards by import path
    train_dataset, eval_dataset = prompt_datasets(recipe, training_args, model_args, topo)
    reward_funcs = load_reward_functions(training_args.reward_funcs, recipe.config_source)

    # ---- model (and, for the KL term without LoRA, its frozen copy built the same way: the recipe's config
    # overrides included, which TRL's own reference loading would drop), the process-wide fixes, the trainer
    needs_reference = training_args.beta != 0.0 and not model_args.use_peft
    ref_model = load_recipe_model(recipe, model_args, training_args) if needs_reference else None
    model = build_model(recipe, model_args, training_args)
    isolation_line = install_process_patches(recipe, model_args, model, topo.sp_size)
    trainer = LongContextGRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
        recipe=recipe,
        model_args=model_args,
        ref_model=ref_model,
    )
    report_mesh(trainer, training_args.max_length)
    trainer.accelerator.print(isolation_line)

    # ---- train (generate, score, step), then save and print the next steps
    finish_run(trainer, recipe, training_args, model_args, evaluate=False)


if __name__ == "__main__":
    try:
        recipe_args, grpo_config, model_config = parse_recipe(sys.argv[1:])
        main(recipe_args, grpo_config, model_config)
    except RecipeError as exc:
        exit_on_recipe_error(exc)
