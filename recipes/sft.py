"""Supervised fine-tuning with Ulysses sequence parallelism: the one entrypoint every recipe runs.

Launch from the repository root with the accelerate YAML the recipe names in `accelerate_config`:

    accelerate launch --config_file accelerate_configs/cpu-sp2.yaml recipes/sft.py \
        --config recipes/tiny-llama/sft-2k-cpu-sp2.yaml

or let make resolve the pair: `make sft RECIPE=tiny-llama/sft-2k-cpu-sp2 ARGS="--max_steps 10"`. Any recipe key can be
overridden on the command line (`--learning_rate 1.0e-4`); unknown keys are errors, never ignored.

What this adds to TRL's `trl/scripts/sft.py`: strict recipe parsing with checks against the topology
(longctx/config/recipe.py), a refusal to run on a topology other than the recipe's, a random-weight mode
(`model_init: random`), padding to a multiple of sp by default, and a report of the mesh and of the
sequence shard each rank actually received.
"""

import os
import sys
import warnings

import torch
from datasets import load_dataset
from transformers import AutoTokenizer
from trl import SFTTrainer, get_peft_config

from longctx.config.chat_templates import ChatTemplateError, resolve_chat_template
from longctx.config.checkpoints import resolve_resume
from longctx.config.recipe import RecipeError, exit_on_recipe_error, parse_recipe, recipe_topology
from longctx.config.topology import Topology
from longctx.training.alst import apply_alst
from longctx.training.credentials import move_hub_token_to_env
from longctx.training.gloo_all_to_all import install as install_gloo_all_to_all
from longctx.training.isolation import install_for_recipe, keep_packed_positions, require_position_ids
from longctx.training.metrics import attach_metrics
from longctx.training.model_config import build_config, build_random_model, overrides_of
from longctx.training.prepared_data import load_prepared, load_prepared_eval
from longctx.training.resume import enable_resume
from longctx.training.shutdown import exit_cleanly
from longctx.training.sinks import install_for_recipe as install_sink_attention
from longctx.training.sp_eval import enable_sp_eval, keep_sp_in_eval
from longctx.training.sp_loss import install_token_weighted_sp_loss

# torch deprecations raised inside DeepSpeed/transformers collectives, once per step on every rank: they
# would bury the loss lines and are not actionable from a recipe.
warnings.filterwarnings("ignore", message=r".*(all_gather|reduce_scatter_tensor|all_gather_into_tensor).*deprecated")


def launched_mesh() -> tuple[int, int]:
    """(world size, sp size) this process was launched with, read from what `accelerate launch` exports."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    use_pc = os.environ.get("ACCELERATE_USE_PARALLELISM_CONFIG", "false").lower() == "true"
    sp = int(os.environ.get("PARALLELISM_CONFIG_SP_SIZE", "1")) if use_pc else 1
    return world, sp


def check_launch(topo: Topology, source: str, use_cpu: bool = True) -> None:
    """Refuse to train on a topology other than the recipe's (a silent sp=1 run is this field's classic bug),
    and a GPU recipe where no GPU is visible, before anything is downloaded."""
    if not use_cpu and not torch.cuda.is_available():
        raise RecipeError(
            source,
            [
                (
                    f"needs {topo.world_size} GPUs ({topo.path}: {topo.num_machines} machine(s) x "
                    f"{topo.processes_per_machine} processes, sp={topo.sp_size}) but no CUDA GPU is visible; "
                    "run it on its target hardware, or try the stack on CPU with `make sft` (the tiny CPU recipe)"
                )
            ],
        )
    world, sp = launched_mesh()
    if (world, sp) != (topo.world_size, topo.sp_size):
        raise RecipeError(
            source,
            [
                (
                    f"launched with world size {world} and sp={sp}, but the recipe's accelerate_config {topo.path} "
                    f"asks for world size {topo.world_size} and sp={topo.sp_size}; launch with "
                    f"`accelerate launch --config_file {topo.path} recipes/sft.py --config {source}` (or `make sft`), "
                    "or override `--accelerate_config` to the topology you launch with"
                )
            ],
        )


def build_model(recipe, model_args, training_args):
    """A model instance for `model_init: random`; otherwise the path, which SFTTrainer loads itself
    (with the overridden config when the recipe changes the architecture, e.g. its rope scaling)."""
    try:
        if recipe.model_init == "random":
            return build_random_model(recipe, model_args, training_args.seed, training_args.trust_remote_code)
        if recipe.model_config_overrides:
            # refuses keys the config lacks, before any weight download
            build_config(recipe, model_args, training_args.trust_remote_code)
            # as from_pretrained kwargs (they replace config keys), so the training arguments stay JSON
            training_args.model_init_kwargs.update(overrides_of(recipe))
    except (ValueError, TypeError) as exc:
        raise RecipeError(recipe.config_source, [str(exc)]) from None
    return model_args.model_name_or_path


def report_mesh(trainer, max_length: int | None) -> None:
    """Print, from rank 0, the mesh this run really has (read back from the accelerator, not the YAML)."""
    acc = trainer.accelerator
    pc = acc.parallelism_config
    sp = pc.sp_size if pc is not None else 1
    dp_rep, dp_shard = (pc.dp_replicate_size, pc.dp_shard_size) if pc is not None else (acc.num_processes, 1)
    acc.print(
        f"[mesh] world={acc.num_processes}: dp_replicate={dp_rep} x dp_shard={dp_shard} x sp={sp}; "
        f"sp groups are consecutive ranks of {sp}"
    )
    if max_length:
        acc.print(f"[mesh] sequences up to {max_length} tokens -> up to {max_length // sp} tokens per rank")


def report_first_shard(model, accelerator) -> None:
    """Print the sequence length rank 0's model receives on its first step: the real per-rank shard."""

    def hook(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None:
            accelerator.print(
                f"[mesh] first step: rank 0 holds a shard of {ids.shape[1]} tokens (batch shape {tuple(ids.shape)})"
            )
        handle.remove()

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)


def main(recipe, training_args, model_args):
    source = recipe.config_source
    topo = recipe_topology(recipe)
    check_launch(topo, source, use_cpu=training_args.use_cpu)
    try:
        resume = resolve_resume(training_args.resume_from_checkpoint, training_args.output_dir)
        training_args.resume_from_checkpoint = resume
    except ValueError as exc:
        raise RecipeError(source, [str(exc)]) from None
    move_hub_token_to_env(training_args)  # before anything can dump, log or card the arguments
    try:  # a template name or a repo-relative file -> the file data_prep read too (TRL opens it in SFTTrainer)
        template = resolve_chat_template(training_args.chat_template_path)
    except ChatTemplateError as exc:
        raise RecipeError(source, [str(exc)]) from None
    training_args.chat_template_path = str(template) if template else None

    tokenizer = AutoTokenizer.from_pretrained(
        model_args.model_name_or_path,
        revision=model_args.model_revision,
        trust_remote_code=training_args.trust_remote_code,
    )

    # ---- data: a Hub dataset name or a local folder/file that `datasets` can load
    collator = None
    if recipe.prepare_data != "off":  # rows `make data` tokenized, packed and padded to SP-safe lengths
        train_dataset, collator = load_prepared(recipe, training_args, model_args, topo, tokenizer)
        eval_dataset = load_prepared_eval(recipe, training_args, model_args, topo)  # held-out whole documents
        training_args.dataset_kwargs = {**(training_args.dataset_kwargs or {}), "skip_prepare_dataset": True}
        training_args.remove_unused_columns = False
    else:
        dataset = load_dataset(recipe.dataset_name, name=recipe.dataset_config, streaming=recipe.dataset_streaming)
        train_dataset = dataset[recipe.dataset_train_split]
        eval_dataset = dataset[recipe.dataset_test_split] if training_args.eval_strategy != "no" else None

    # Every batch must split evenly across the SP group; keep that true by construction.
    if training_args.pad_to_multiple_of is None:
        training_args.pad_to_multiple_of = topo.sp_size

    # ---- model
    if recipe.model_init == "pretrained":
        training_args.model_init_kwargs = {
            "revision": model_args.model_revision,
            "trust_remote_code": training_args.trust_remote_code,
            "attn_implementation": model_args.attn_implementation,
            "dtype": model_args.dtype,
            **(training_args.model_init_kwargs or {}),
        }
    model = build_model(recipe, model_args, training_args)
    # packed documents attend only within themselves under sdpa; before accelerate wraps `sdpa` for SP
    isolation_line = install_for_recipe(recipe, model_args, model)
    isolation_line += install_sink_attention(recipe, model_args, model)  # gpt-oss sinks, windows: sliced per rank

    # ---- trainer
    trainer = SFTTrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        data_collator=collator,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
    )
    keep_packed_positions(trainer)
    require_position_ids(trainer.model, recipe, training_args)
    if eval_dataset is not None:  # eval batches sharded across the SP group, one token-weighted eval loss
        keep_sp_in_eval()
        enable_sp_eval(trainer)
    if recipe.retrieval_eval_steps:  # a slice of `make eval` every N steps, on the training mesh
        from longctx.training.retrieval.callback import RetrievalCallback

        keep_sp_in_eval()
        trainer.add_callback(
            RetrievalCallback(
                trainer,
                tokenizer,
                recipe.retrieval_eval_steps,
                recipe.retrieval_eval_samples,
                training_args.max_length,
            )
        )
    apply_alst(trainer.model, recipe)  # TiledMLP / checkpoint offload switches, per model instance
    attach_metrics(trainer, recipe)  # first in line, so every report_to logger receives the metrics
    install_gloo_all_to_all(topo.sp_size)  # sp x dp over gloo: torch's all-to-all breaks in SP subgroups
    install_token_weighted_sp_loss(trainer)  # SP loss weighted over all micro-batches and dp ranks of a step
    # SP-safe data skip on resume, universal load on another mesh, topology.json in each checkpoint
    enable_resume(trainer, recipe=source, checkpoint=training_args.resume_from_checkpoint)
    report_mesh(trainer, training_args.max_length)
    trainer.accelerator.print(isolation_line)
    report_first_shard(trainer.model, trainer.accelerator)

    # ---- train, then save (ZeRO-3 gathers the 16-bit weights on save, see the DeepSpeed JSON)
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    trainer.save_state()
    # No rank may tear down its process group while rank 0 is still writing (see longctx/training/shutdown.py).
    trainer.accelerator.wait_for_everyone()
    trainer.accelerator.print(f"[done] model saved to {os.path.abspath(training_args.output_dir)}")
    trainer.end()
    exit_cleanly(0)


if __name__ == "__main__":
    try:
        recipe_args, sft_config, model_config = parse_recipe(sys.argv[1:])
        main(recipe_args, sft_config, model_config)
    except RecipeError as exc:
        exit_on_recipe_error(exc)
