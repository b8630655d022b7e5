"""Convert a ZeRO checkpoint to DeepSpeed's universal format so it resumes on a different mesh.

A ZeRO-3 checkpoint holds one optimizer/parameter partition per rank of the world that saved it, so it
loads only on that world size (preflight refuses anything else, longctx/config/checkpoints.py).
DeepSpeed's `ds_to_universal` merges the partitions into one file per parameter and optimizer state,
which any world size can load with `checkpoint.load_universal`. Usage, once, on one machine:

    python -m longctx.training.checkpoints.universal outputs/run/checkpoint-300

This writes `global_step300_universal/` and `latest_universal` next to the original files (which stay
usable on the old mesh). Atomically, like a checkpoint (longctx/training/checkpoints/commit.py): DeepSpeed's
converter writes into a staging folder, which is renamed into place once complete, and `latest_universal` (what
makes a resume load the universal files) is written last, atomically; a reconversion first removes it. A crash at
any point leaves either no `latest_universal` (the resume on another mesh is refused, naming this command) or one
that names a complete folder. Resuming that checkpoint on another mesh then switches DeepSpeed to universal
loading by itself (`use_universal_if_needed`, called by the trainer's `train`, longctx/training/trainer.py).
"""

import argparse
import os
import shutil
import sys
from pathlib import Path

from longctx.config.checkpoints import UNIVERSAL_LATEST, saved_topology, write_atomically


def convert(checkpoint_dir: str | Path, workers: int = 1) -> Path:
    """Run DeepSpeed's converter on the checkpoint's latest tag; returns the universal folder."""
    from deepspeed.checkpoint import ds_to_universal

    checkpoint_dir = Path(checkpoint_dir)
    latest = checkpoint_dir / "latest"
    if not latest.is_file():
        raise ValueError(f"{checkpoint_dir}: no `latest` file, so not a DeepSpeed checkpoint folder")
    tag = latest.read_text().strip()
    output = checkpoint_dir / f"{tag}_universal"
    staging = checkpoint_dir / ".universal-staging"  # DeepSpeed also writes its `latest_universal` here
    shutil.rmtree(staging, ignore_errors=True)  # what a crashed conversion left
    args = argparse.Namespace(
        input_folder=str(checkpoint_dir / tag),
        output_folder=str(staging / output.name),
        num_extract_workers=workers,
        num_merge_workers=workers,
        keep_temp_folder=False,
        strict=True,
        inject_missing_state=False,
    )
    ds_to_universal.main(args)
    (checkpoint_dir / UNIVERSAL_LATEST).unlink(missing_ok=True)  # never names a folder being replaced
    shutil.rmtree(output, ignore_errors=True)
    os.replace(staging / output.name, output)
    write_atomically(checkpoint_dir / UNIVERSAL_LATEST, output.name)
    shutil.rmtree(staging, ignore_errors=True)
    return output


def use_universal_if_needed(accelerator, checkpoint_dir: str | None, topology: dict) -> bool:
    """Set DeepSpeed's `checkpoint.load_universal` when resuming a converted checkpoint on another mesh.

    Must run before `trainer.train()` builds the engine. The same mesh keeps the exact per-rank files.
    """
    if not checkpoint_dir or not (Path(checkpoint_dir) / UNIVERSAL_LATEST).is_file():
        return False
    saved = saved_topology(checkpoint_dir) or {}
    if all(saved.get(key, value) == value for key, value in topology.items() if key in ("world_size", "sp_size")):
        return False
    plugin = accelerator.state.deepspeed_plugin
    # registered in longctx/training/patches/registry.py: DeepSpeed reads this key when the engine is built
    plugin.deepspeed_config.setdefault("checkpoint", {})["load_universal"] = True
    accelerator.print(f"[resume] {checkpoint_dir} was saved on another mesh: loading its universal checkpoint")
    return True


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m longctx.training.checkpoints.universal", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("checkpoint_dir", help="a checkpoint-N folder written by recipes/sft.py")
    parser.add_argument("--workers", type=int, default=1, help="extract/merge processes (default 1)")
    args = parser.parse_args(argv)
    try:
        output = convert(args.checkpoint_dir, args.workers)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"[universal] wrote {output}; resume it on any mesh with --resume_from_checkpoint {args.checkpoint_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
