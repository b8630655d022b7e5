"""The retrieval eval on every rank of the recipe's mesh (started by `python -m longctx eval`).

The model is prepared by accelerate exactly as for training (DeepSpeed with the recipe's ZeRO config, Ulysses
attention registered for the recipe's sp, kept on in eval by longctx/training/sequence_parallel/registration.py). Every
rank builds the same
examples; each SP group takes every dp-th one (the list padded to a multiple of dp with repeats whose results are
dropped, so every rank runs as many forwards: ZeRO-3 gathers parameters across all of them), and each rank of the
group runs its shard of the sequence (position_ids are the global positions), scored by `shard_sums`
(longctx/training/retrieval/scoring.py), the same function the in-training slice uses.
"""

import os
import sys
import time

import torch

from longctx.config.credentials import redact_argv
from longctx.config.paths import cli_command
from longctx.config.recipe import RecipeError, exit_on_recipe_error, parse_recipe, recipe_topology
from longctx.evaluation.cost import measured_cost
from longctx.training.retrieval.scoring import dp_share, shard_sums, unwrap, verdict
from longctx.training.retrieval.tasks import grid
from longctx.training.sequence_parallel.mesh import check_launched_mesh, sp_coordinates
from longctx.training.shutdown import exit_cleanly


def load_model(recipe, args, model_args, checkpoint: str | None):
    """(model, tokenizer): the checkpoint when given, else the recipe's starting model, built as training builds
    it (longctx/training/model_build.py: the recipe's config overrides, a LoRA adapter on its configured base).
    A LoRA adapter is merged into its base, so the scored model runs the same code as a full checkpoint."""
    from transformers import AutoTokenizer

    from longctx.training.model_build import load_recipe_model

    tok_source = checkpoint if checkpoint and os.path.isfile(os.path.join(checkpoint, "tokenizer.json")) else None
    tok = AutoTokenizer.from_pretrained(tok_source or model_args.model_name_or_path)
    model = load_recipe_model(recipe, model_args, args, checkpoint)
    if hasattr(model, "merge_and_unload"):  # a PeftModel
        model = model.merge_and_unload()
    return model, tok


def prepare_for_mesh(model, recipe, args):
    """The model as accelerate prepares it for this mesh; returns (model, accelerator)."""
    from accelerate import Accelerator
    from torch.utils.data import DataLoader

    from longctx.training.layers.linear_attention import lift_accelerate_refusal
    from longctx.training.model_fixes import prepare_model
    from longctx.training.sequence_parallel.per_layer_ulysses import fit_ulysses_to_layer_shapes
    from longctx.training.sequence_parallel.registration import keep_sp_in_eval

    keep_sp_in_eval()  # before accelerate registers Ulysses attention
    fit_ulysses_to_layer_shapes()  # Gemma 4: each layer split by its own heads, as in training
    # Gated DeltaNet layers (Qwen3.5) sharded by head as in training; accelerate refuses any other recurrent layer
    lift_accelerate_refusal()
    acc = Accelerator(mixed_precision="bf16" if args.bf16 else "no")
    prepare_model(model, recipe, args, acc, role="eval")  # the fixes every model a trainer runs gets (model_fixes.py)
    drop_optimizer_sections(acc)
    # A one-row loader fills DeepSpeed's `auto` micro-batch size (1, like training); it is not used.
    model.eval()
    model, _ = acc.prepare(model, DataLoader([0], batch_size=1))
    return model, acc


def drop_optimizer_sections(acc) -> None:
    """An eval steps no optimizer, so the DeepSpeed JSON's `optimizer` and `scheduler` sections go.

    The GPU recipes' JSONs name DeepSpeed's AdamW with `lr: auto`, which the trainer fills from the recipe;
    a model prepared alone has nothing to fill it with and accelerate refuses it ("`optimizer.params.lr` not
    found in kwargs"). The ZeRO stage, offload and SP settings, which decide memory and numbers, stay.
    It changes the dict accelerate's plugin built from the JSON (as longctx/training/checkpoints/universal.py does),
    not a copy:
    a pure function would need a plugin built by hand from the launcher's environment, a second reading of what
    accelerate already read; so it is registered as a change of upstream state instead.
    """
    plugin = acc.state.deepspeed_plugin
    if plugin is not None:
        for section in ("optimizer", "scheduler"):
            # registered in longctx/training/patches/registry.py: accelerate's own config dict, changed before prepare
            # reads it
            plugin.deepspeed_config.pop(section, None)


def score(model, example, sp: int, sp_rank: int, device) -> dict:
    """One example's verdict; every rank of the SP group calls this on the same example at the same time."""
    sums = shard_sums(model, example, sp, sp_rank, device).to(device)
    if sp > 1:
        from deepspeed.utils import groups

        torch.distributed.all_reduce(sums, group=groups._get_sequence_parallel_group())
    return verdict(sums.cpu())


def timed_score(model, example, sp: int, sp_rank: int, device) -> dict:
    """score() plus its wall seconds and, on a GPU, this rank's peak allocated memory during the example."""
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    row = score(model, example, sp, sp_rank, device)  # ends in a copy to the host: the device work is done
    row["seconds"] = time.perf_counter() - start
    row["peak_gib"] = torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None
    return row


def run(args, recipe, training_args, model_args) -> tuple[list[dict], dict] | None:
    """Score the grid; on global rank 0 returns (every example's verdict, the model's config), None elsewhere."""
    model, tok = load_model(recipe, training_args, model_args, args.checkpoint)
    model, acc = prepare_for_mesh(model, recipe, training_args)
    sp, sp_rank, dp, dp_rank = sp_coordinates(acc)
    examples = grid(tok, args.tasks, args.lengths, args.depths, args.samples, args.seed)
    mine = []
    for i, keep in dp_share(len(examples), dp, dp_rank):  # every rank runs as many forwards (ZeRO-3 gathers)
        ex = examples[i]
        row = {"task": ex.task, "length": ex.length, "depth": ex.depth, "sample": ex.sample}
        row.update(timed_score(model, ex, sp, sp_rank, acc.device))
        if keep:  # a padding repeat's result is dropped
            mine.append(row)
    gathered = [None] * acc.num_processes if acc.num_processes > 1 else [mine]
    if acc.num_processes > 1:
        torch.distributed.all_gather_object(gathered, mine)
    acc.wait_for_everyone()
    if not acc.is_main_process:
        return None
    by_group = gathered[::sp]  # one copy per SP group (its first rank's timing and memory)
    rows = sorted(
        (r for rows in by_group for r in rows), key=lambda r: (r["task"], r["length"], r["depth"], r["sample"])
    )
    return rows, unwrap(model).config.to_dict()


def refuse_other_mesh(recipe) -> None:
    """Refuse a mesh other than the recipe's (an eval at sp=1 would not be the recipe's memory or numbers)."""
    relaunch = (
        f"run `{cli_command()} eval {recipe.config_source}` (or `make eval`), "
        "which launches with the recipe's accelerate YAML"
    )
    check_launched_mesh(recipe_topology(recipe), recipe.config_source, relaunch)


def main(argv: list[str]) -> int:
    from longctx.evaluation.options import parse_args
    from longctx.evaluation.report import write_outputs

    args, overrides = parse_args(argv)
    try:
        recipe, sft, model_args = parse_recipe(["--config", args.recipe_path, *overrides])
        refuse_other_mesh(recipe)
    except RecipeError as exc:
        exit_on_recipe_error(exc)
    try:
        done = run(args, recipe, sft, model_args)
    except RecipeError as exc:
        exit_on_recipe_error(exc)
    if done is not None:
        results, model_config = done
        topo = recipe_topology(recipe)
        meta = {"recipe": args.recipe, "checkpoint": args.checkpoint, "sp": topo.sp_size}
        # what the run changed is on record (e.g. `--model_init random`), never a secret: results files get shared
        meta.update(world_size=topo.world_size, overrides=redact_argv(overrides))
        meta["measured"] = measured_cost(results, model_config, topo.sp_size)
        write_outputs(args.out, results, meta, args.compare)
    exit_cleanly(0)  # barrier first: no rank tears down gloo while rank 0 still writes


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
