"""The reference log-probs: precomputed once before training (default), or computed live every step.

Why precomputed: DPO compares the policy with the model it started from. Keeping that second model in memory doubles
the weights (and, under ZeRO-3, their all-gathers) at exactly the lengths where memory is tightest. Its log-probs
never change, so one forward pass over the training rows before the first step, on the training mesh (SP shards,
the same sum over the SP group as in training, longctx/training/preference/log_probs.py), gives every answer's
reference log-prob once; the rows then carry them (collator.py). The pass runs in the trainer's
`_prepare_for_training`, after DeepSpeed built the engine and before any step; the table is written to
`<output_dir>/reference_log_probs/<split>-<key>.json` and read back instead of recomputed when the key matches
(a rerun, and a resume, whose weights are no longer the reference's). The key hashes the prepared rows'
fingerprint and the starting model's identity (name or folder with its weight files' sizes and times, revision,
`model_init` and seed, config overrides, dtype).

A preemption signal (longctx/training/faults/) stops the pass where every rank agrees to, at a batch boundary
(one flag all-reduced per batch): the rows computed so far are written to `<split>-<key>.partial.json` with the
batch the pass stopped before, and the run exits 75 (PREEMPTED) without a checkpoint. The same command, requeued,
reads that file (on rank 0, broadcast to all) and computes only the batches after it; a file written for another
schedule of batches (dp, batch size, row count) is ignored and the pass starts over.

The live sources: `adapter_disabled` (LoRA: the base model is the policy with its adapter switched off, TRL's
`use_adapter`) and `frozen_model` (TRL's second model, built by DPOTrainer and sharded by ZeRO-3), each run on the
micro-batch's shard under `no_grad` and summed over the SP group like the policy.
"""

import contextlib
import hashlib
import json
from pathlib import Path

import torch

from longctx.training.faults.run_guard import PreemptedBeforeTraining, agreed_stop
from longctx.training.preference.log_probs import (
    forward_token_log_probs,
    pair_sums,
    sequence_statistics,
    sequences_per_row,
    shift_labels_of,
    sp_reduce,
)
from longctx.training.sequence_parallel.mesh import sp_coordinates

FOLDER = "reference_log_probs"


def _weights_fingerprint(name: str) -> list:
    folder = Path(name)
    if not folder.is_dir():
        return [name]
    files = sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin", ".json"))
    return [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in files]


def reference_key(recipe, model_args, args, dataset) -> str:
    """What the stored reference log-probs depend on: these rows and this starting model (module docstring)."""
    identity = {
        "rows": getattr(dataset, "_fingerprint", None),
        "model": model_args.model_name_or_path,
        "weights": _weights_fingerprint(model_args.model_name_or_path),
        "revision": model_args.model_revision,
        "model_init": recipe.model_init,
        "seed": args.seed if recipe.model_init == "random" else None,
        "overrides": recipe.model_config_overrides,
        "source": recipe.model_config_source,
        "dtype": str(model_args.dtype),
        "base_of_adapter": bool(getattr(model_args, "use_peft", False)),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:20]


def table_path(output_dir: str, split: str, key: str) -> Path:
    return Path(output_dir) / FOLDER / f"{split}-{key}.json"


def load_table(path: Path) -> dict[int, list[float]] | None:
    if not path.is_file():
        return None
    return {int(k): v for k, v in json.loads(path.read_text())["rows"].items()}


def save_table(path: Path, table: dict[int, list[float]], key: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"key": key, "rows": {str(k): v for k, v in sorted(table.items())}}))
    tmp.replace(path)


def shard_for_rank(batch: dict, sp: int, sp_rank: int) -> dict:
    """This SP rank's part of a collated batch, as DeepSpeed's SP loader makes it: `labels` shifted into
    `shift_labels` before the split, every [rows, length] tensor cut into sp equal pieces, lists kept whole."""
    batch = dict(batch)
    batch["shift_labels"] = shift_labels_of(batch)
    del batch["labels"]
    out = {}
    for key, value in batch.items():
        if torch.is_tensor(value):
            size = value.shape[1] // sp
            value = value[:, sp_rank * size : (sp_rank + 1) * size].contiguous()
        out[key] = value
    return out


def _row_sums(model, inputs: dict, group) -> list[list[float]]:
    """Each row's per-sequence log-prob sums (whole sequences: summed over the SP group), as Python floats."""
    labels = shift_labels_of(inputs)
    counts = sequences_per_row(inputs)
    outputs = forward_token_log_probs(model, inputs, labels)
    local = sequence_statistics(outputs, labels, inputs["sequence_ids"], max([2, *counts]))[..., 0]
    total = sp_reduce(local.detach(), group, None)
    return [total[row, :n].tolist() for row, n in enumerate(counts)]


def pass_schedule(trainer, dataset) -> tuple[int, int, int]:
    """(dp, rows a batch, batches): the pass's batches on this mesh, which a kept partial pass must share."""
    _, _, dp, _ = sp_coordinates(trainer.accelerator)
    size = trainer.args.precompute_ref_batch_size or trainer.args.per_device_train_batch_size
    return dp, size, -(-len(range(0, len(dataset), dp)) // size)


def compute_table(trainer, model, dataset, group, first: int = 0) -> tuple[dict[int, list[float]], int | None]:
    """One no-grad forward of every row on the training mesh, from batch `first`; each SP group takes every dp-th
    row. Every rank runs the same number of forwards (ZeRO-3 gathers parameters over all ranks in each), the last
    ones repeating a row. Returns (the rows' sums, merged over the ranks; the batch an agreed preemption stopped
    the pass before, or None when it ran to the end)."""
    acc = trainer.accelerator
    sp, sp_rank, dp, dp_index = sp_coordinates(acc)
    _, size, batches = pass_schedule(trainer, dataset)
    mine = list(range(dp_index, len(dataset), dp))
    collate = type(trainer.data_collator)(pad_token_id=trainer.data_collator.pad_token_id)
    table, stopped = {}, None
    was_training = model.training
    model.eval()
    with torch.no_grad(), disabled_adapter(trainer, model):
        for b in range(first, batches):
            if agreed_stop(acc):  # every rank at the same batch, so none waits in a forward's collectives
                stopped = b
                break
            chunk = mine[b * size : (b + 1) * size] or [0]
            inputs = trainer._prepare_inputs(shard_for_rank(collate([dataset[i] for i in chunk]), sp, sp_rank))
            for index, sums in zip(inputs["row_indices"], _row_sums(model, inputs, group), strict=True):
                table[int(index)] = sums
    model.train(was_training)
    from accelerate.utils import gather_object

    merged = {}
    for part in gather_object([table]):
        merged.update(part)
    return merged, stopped


def partial_path(path: Path) -> Path:
    return path.with_name(f"{path.stem}.partial.json")


def kept_partial(trainer, path: Path, key: str, schedule: tuple) -> tuple[dict[int, list[float]], int]:
    """(rows, the batch to go on from) of a pass a preemption stopped, read by rank 0 and broadcast (every rank
    must start at the same batch); ({}, 0) when there is none for this key and schedule of batches."""
    from accelerate.utils import broadcast_object_list

    found = [None]
    if trainer.accelerator.is_main_process and path.is_file():
        saved = json.loads(path.read_text())
        if saved.get("key") == key and saved.get("schedule") == list(schedule):
            found = [({int(k): v for k, v in saved["rows"].items()}, int(saved["next_batch"]))]
    if trainer.accelerator.num_processes > 1:
        broadcast_object_list(found, from_process=0)
    return found[0] or ({}, 0)


def save_partial(path: Path, table: dict, key: str, schedule: tuple, next_batch: int) -> None:
    from longctx.config.checkpoints import write_atomically

    rows = {str(k): v for k, v in sorted(table.items())}
    record = {"key": key, "schedule": list(schedule), "next_batch": next_batch, "rows": rows}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(record))


@contextlib.contextmanager
def disabled_adapter(trainer, model):
    """The base model for LoRA (TRL's `use_adapter(..., None)`), else nothing: a reference is never the adapter."""
    from accelerate.utils import is_peft_model

    unwrapped = trainer.accelerator.unwrap_model(model)
    if not is_peft_model(unwrapped):
        yield
        return
    from trl.trainer.utils import use_adapter

    with use_adapter(unwrapped, adapter_name=None):
        yield


def reference_table(trainer, model, dataset, split: str, group, resuming: bool) -> dict[int, list[float]]:
    """The stored table for these rows and this starting model, or a fresh one (computed, stored by rank 0)."""
    key = reference_key(trainer.recipe, trainer.model_args, trainer.args, dataset)
    path = table_path(trainer.args.output_dir, split, key)
    table = load_table(path)
    if table is not None and set(table) >= set(range(len(dataset))):
        trainer.accelerator.print(f"[reference] {split}: {len(table)} rows' log-probs read from {path}")
        return table
    if resuming:
        raise RuntimeError(
            f"resuming a DPO run without its reference log-probs ({path} is missing or stale): they were computed "
            "from the starting model, which the checkpoint has replaced; restore that file, or start the run anew"
        )
    acc, schedule, partial = trainer.accelerator, pass_schedule(trainer, dataset), partial_path(path)
    kept, first = kept_partial(trainer, partial, key, schedule)
    if first:
        acc.print(f"[reference] {split}: {len(kept)} rows' log-probs kept in {partial}, going on at batch {first}")
    computed, stopped = compute_table(trainer, model, dataset, group, first)
    table = {**kept, **computed}
    if stopped is not None:  # an agreed preemption: keep what was computed, stop before training
        if acc.is_main_process:
            save_partial(partial, table, key, schedule, stopped)
        acc.wait_for_everyone()
        raise PreemptedBeforeTraining(
            f"during the {split} reference pass, before batch {stopped} of {schedule[2]}: {len(table)} rows' "
            f"log-probs kept in {partial}"
        )
    if acc.is_main_process:
        save_table(path, table, key)
        partial.unlink(missing_ok=True)
    acc.wait_for_everyone()
    acc.print(f"[reference] {split}: {len(computed)} rows' log-probs computed, {len(table)} stored in {path}")
    return table


def live_reference(trainer, model, inputs: dict, group):
    """The reference's pair sums for this micro-batch, computed now (`adapter_disabled` or `frozen_model`)."""
    from trl.models.utils import disable_gradient_checkpointing

    reference = trainer.ref_model if trainer.ref_model is not None else model
    checkpointing = disable_gradient_checkpointing(trainer.model, trainer.args.gradient_checkpointing_kwargs)
    with torch.no_grad(), checkpointing, disabled_adapter(trainer, model):
        return pair_sums(reference, inputs, group, None)
