"""The GPU step benchmark's training rows: the recipe itself, `recipes/sft.py` launched through the launch home.

`prepare` (run as a child of benchmarks/gpu_step.py, which imports no torch) writes into the work folder:
- `recipe.yaml`: the recipe (default llama3.1-8b/sft-192k-1gpu-h200) with only what a measurement must change:
  random weights (`model_init: random`) of the architecture snapshot (nothing downloaded), the tokenizer of
  recipes/assets/tiny-llama (its ids are valid 8B ids; the rows are token ids already), the rows below as its
  prepared data, one step per row in order (`train_sampling_strategy: sequential`), a log line and a step record
  per step (longctx/training/metrics/step_record.py), no checkpoint. Model build, process patches, the per-forward
  document layout, Liger's kernels, TRL's fused loss head, checkpointing, TiledMLP, DeepSpeed and its offload are
  the recipe's: it is the recipe's own entrypoint that runs. With `--tiny` the recipe is first made a CPU
  miniature by the CPU rehearsal's derivation (longctx/cpu_rehearsal/derive.py: its changes are printed) and the
  rows are 256 times shorter.
- the rows as the recipe's prepared dataset, with the manifest its ranks look it up by
  (longctx/config/prepared_manifest.py):
  4K twice (warm-up), 128K as 16 documents of 8K, 128K as one document (the cheaper first: a run cut short keeps
  one), then the recipe's max_length as one document and as documents of 8K; random token ids (seeded), every
  token labelled.
- per row, the memory plan of exactly what runs (preflight's own options for this recipe, this row's length, the
  host terms with the Adam states: every row is an optimizer step), and the step-time plan of it on the H200
  profile (predicted seconds by component and on the links) with the inputs `python -m longctx.memory_plan.fit`
  recomputes it from; the run records each step's communication by kind (`step_record_components`).
and prints one JSON object: the launch argv (longctx/launch/accelerate_launch.py) and the rows with their plans.

    python benchmarks/gpu_step_recipe.py prepare --work DIR [--recipe R] [--tiny] [--repeat N]
"""

import argparse
import json
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DEFAULT_RECIPE = "llama3.1-8b/sft-192k-1gpu-h200"
TOKENIZER = "recipes/assets/tiny-llama"
TINY_SCALE = 256  # --tiny: every length divided by this
DOC = 8192  # the documents of a packed row
K = 1024


def row_specs(max_length: int, scale: int, repeat: int) -> list[dict]:
    """(label, seq, docs) of every row in the order they run; lengths divided by `scale`."""
    rows = [("4K warm-up", 4 * K, 1), ("4K", 4 * K, 1)]
    long = [("128K packed 16x8K", 128 * K, 16), ("128K unpacked", 128 * K, 1)]  # the cheaper of the two first
    if max_length * scale > 128 * K:
        top = max_length * scale
        long += [(f"{top // K}K unpacked", top, 1), (f"{top // K}K packed {top // DOC}x8K", top, top // DOC)]
    rows += [
        (f"{label} #{i + 1}" if repeat > 1 else label, seq, docs) for label, seq, docs in long for i in range(repeat)
    ]
    return [{"label": label, "seq": seq // scale, "docs": docs, "packed": docs > 1} for label, seq, docs in rows]


def columns(rows: list[dict], vocab: int, seed: int = 0) -> dict:
    """input_ids (random, seeded), labels (every token) and position_ids (restarting at each document)."""
    rng = random.Random(seed)
    out = {"input_ids": [], "labels": [], "position_ids": []}
    for row in rows:
        ids = [rng.randrange(vocab) for _ in range(row["seq"])]
        doc = row["seq"] // row["docs"]
        out["input_ids"].append(ids)
        out["labels"].append(ids)
        out["position_ids"].append([i % doc for i in range(row["seq"])])
    return out


def measured_recipe(path: Path, work: Path, tiny: bool) -> tuple[dict, list[str]]:
    """The recipe's values with the benchmark's changes (module docstring), and the changes as lines."""
    from longctx.config.keys import recipe_with_overrides

    raw = recipe_with_overrides(path)
    changes = ["model: random weights of the architecture snapshot", "data: the benchmark's rows, one step each"]
    if tiny:
        from longctx.commands.rehearse import prepare_model
        from longctx.cpu_rehearsal.derive import derive
        from longctx.cpu_rehearsal.run import write_files

        derived = derive(path, work)
        changes += prepare_model(derived, raw, work) + derived.changes
        write_files(derived, work)  # its accelerate YAML and DeepSpeed JSON; recipe.yaml is rewritten below
        values = {**derived.recipe, "max_length": int(raw["max_length"]) // TINY_SCALE}
    else:
        snapshot = f"recipes/assets/architectures/{raw['model_name_or_path']}"
        values = {**raw, "model_name_or_path": TOKENIZER, "model_config_source": snapshot, "model_init": "random"}
        values |= {"dataset_name": str(work / "data"), "prepared_data_dir": str(work / "prepared")}
    values |= {"output_dir": str(work / "out"), "save_strategy": "no", "logging_steps": 1, "report_to": "none"}
    values |= {"train_sampling_strategy": "sequential", "dataloader_num_workers": 0, "eval_holdout": 0}
    values |= {"retrieval_eval_steps": 0, "num_train_epochs": 1, "step_record_components": True}
    return values, changes


def write_prepared(recipe_yaml: Path, rows: list[dict]) -> None:
    """The rows as the recipe's prepared dataset, and the manifest its ranks find it by."""
    from datasets import Dataset

    from longctx.config.prepared_manifest import DATASET, REPORT, local_fingerprint, prep_settings, write_manifest
    from longctx.config.recipe import parse_recipe, recipe_topology
    from longctx.training.model_build import build_config

    recipe, sft, model = parse_recipe(["--config", str(recipe_yaml)])
    vocab = build_config(recipe, model).get_text_config().vocab_size
    settings = prep_settings(recipe, sft, model, recipe_topology(recipe))
    source = Path(recipe.dataset_name) / "rows.json"
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text(json.dumps(rows, indent=1))
    folder = Path(settings["output_dir"]) / "gpu-step-rows"
    Dataset.from_dict(columns(rows, vocab)).save_to_disk(str(folder / DATASET))
    (folder / REPORT).write_text(json.dumps({"cache_key": "gpu-step-rows", "rows": rows}))
    write_manifest(settings, folder, "gpu-step-rows", local_fingerprint([source]), str(recipe_yaml))


def plans(recipe_yaml: Path, rows: list[dict]) -> None:
    """Each row's memory plan (GPU and host, with terms), as preflight plans this recipe at the row's length."""
    from longctx.memory_plan.estimate import estimate
    from longctx.preflight.load import Machine, load_launch
    from longctx.preflight.options import plan_inputs

    launch = load_launch(str(recipe_yaml), [], Machine(gpus_per_node=1, num_nodes=1))
    inputs = plan_inputs(launch)
    for row in rows:
        plan = estimate(launch.facts.config, inputs.but(seq_len=row["seq"]))
        row["plan_gib"], row["plan_host_gib"] = round(plan.total_gib, 6), round(plan.host_per_node, 6)
        row["plan_terms"] = {k: round(v, 6) for k, v in plan.rows() if v}
        row["plan_host_terms"] = {k: round(v, 6) for k, v in plan.host_rows if v}
        row["flops"] = step_flops(launch, row["seq"], row["docs"])
        row["plan_for"] = "an optimizer step: the Adam states counted where they are (every row takes one)"
        row |= time_plan(launch.facts.config, inputs.but(seq_len=row["seq"]), row["seq"] // row["docs"])


def time_plan(config: dict, inputs, doc: int) -> dict:
    """The step-time plan of this row on the H200 profile (predicted; the row's measurement sits beside it), and the
    inputs `python -m longctx.memory_plan.fit` recomputes it from."""
    from dataclasses import asdict

    from longctx.memory_plan.step_time import predict
    from longctx.training.metrics.hardware import PROFILES

    t = predict(config, inputs, PROFILES["h200"], doc)
    return {
        "time_inputs": {"config": config, "inputs": asdict(inputs), "doc_length": doc},
        "predicted_step_s": round(t.step_s, 6),
        "predicted_components_s": {k: round(v, 6) for k, v in t.components.items() if v},
        "predicted_comm_s": {k: round(v, 6) for k, v in t.traffic.items() if v},
    }


def step_flops(launch, seq: int, docs: int) -> float:
    """The hardware FLOPs of one step of this row (longctx/training/metrics/flops.py: what HFU counts), which the
    parent scales measured times by to decide whether the next row fits the budget."""
    from longctx.training.metrics.flops import FlopCounts
    from longctx.training.model_build import build_config

    doc = seq // docs
    counts = FlopCounts.from_config(build_config(launch.recipe, launch.model))
    checkpointing = {"grad_ckpt": bool(launch.sft.gradient_checkpointing), "tiled_mlp": bool(launch.recipe.tiled_mlp)}
    return counts.hardware(seq, docs * doc * (doc + 1) / 2, **checkpointing)


def prepare(args) -> dict:
    import yaml

    from longctx.config.paths import resolve_recipe
    from longctx.launch.accelerate_launch import accelerate_argv

    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    values, changes = measured_recipe(resolve_recipe(args.recipe), work, args.tiny)
    rows = row_specs(int(values["max_length"]), TINY_SCALE if args.tiny else 1, args.repeat)
    values["max_steps"] = len(rows)
    recipe_yaml = work / "recipe.yaml"
    recipe_yaml.write_text(yaml.safe_dump(values, sort_keys=False))
    write_prepared(recipe_yaml, rows)
    plans(recipe_yaml, rows)
    record = work / "steps.jsonl"
    target = ["recipes/sft.py", "--config", str(recipe_yaml), "--step_record", str(record)]
    return {"recipe": args.recipe, "recipe_yaml": str(recipe_yaml), "record": str(record), "changes": changes,
            "argv": accelerate_argv(values["accelerate_config"], target), "rows": rows}  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["prepare"])
    parser.add_argument("--work", required=True, help="the folder for the recipe, its data and its records")
    parser.add_argument("--recipe", default=DEFAULT_RECIPE, help=f"a recipe name or path (default {DEFAULT_RECIPE})")
    parser.add_argument("--tiny", action="store_true", help="CPU: the recipe in miniature, rows 256x shorter")
    parser.add_argument("--repeat", type=int, default=1, help="steps of each long row (default 1)")
    args = parser.parse_args(argv)
    print(json.dumps(prepare(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
