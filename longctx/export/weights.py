"""Which checkpoint of a run to export, and its fp32 weights read back with DeepSpeed's own readers.

A checkpoint folder holds DeepSpeed's `latest` tag and `global_stepN/` (ZeRO 2 or 3 partitions of one world),
and after `python -m longctx.training.checkpoints.universal` also `latest_universal` and its folder of one
`zero/<parameter>/fp32.pt` per parameter. The universal form is read when present (it is what any mesh loads);
otherwise `zero_to_fp32` merges the partitions, frozen parameters (a LoRA run's base) included.
"""

from pathlib import Path

from longctx.config.checkpoints import UNIVERSAL_LATEST, latest_checkpoint


class ExportError(ValueError):
    """A run or checkpoint that cannot be exported; the message names the folder and what to pass instead."""


def saved_model(run: Path) -> str | None:
    """The files of the model a finished run saved in its output_dir (what `from_pretrained` loads), or None."""
    names = ("config.json", "model.safetensors", "model.safetensors.index.json", "adapter_config.json")
    present = [name for name in names if (run / name).is_file()]
    return ", ".join(present) if "config.json" in present or "adapter_config.json" in present else None


def find_checkpoint(run: Path) -> Path:
    """`run` itself when it is a checkpoint (DeepSpeed's `latest` beside it), else its latest complete one."""
    run = Path(run)
    if not run.is_dir():
        raise ExportError(f"{run}: no such folder (give a run's output_dir or one of its checkpoint-N folders)")
    if (run / "latest").is_file() or (run / UNIVERSAL_LATEST).is_file():
        return run
    found = latest_checkpoint(run)
    if found is None and saved_model(run):
        raise ExportError(
            f"{run} holds no checkpoint-N folder, and needs none: the run saved its model there as a plain Hugging "
            f'Face folder ({saved_model(run)}), which `from_pretrained("{run}")` loads as it is (a LoRA adapter: '
            "`PeftModel.from_pretrained(base, ...)`); export converts a DeepSpeed checkpoint, so give a checkpoint-N "
            "folder of a run trained with `save_strategy: steps`"
        )
    if found is None or not ((found / "latest").is_file() or (found / UNIVERSAL_LATEST).is_file()):
        raise ExportError(
            f"{run}: no DeepSpeed checkpoint (a checkpoint-N folder with `latest`); train with "
            "`save_strategy: steps` (and `save_steps`), or give a checkpoint-N folder"
        )
    return found


def read_weights(checkpoint: Path) -> tuple[dict, str]:
    """(fp32 state dict by parameter name, which form it was read from: `universal` or `zero`)."""
    if (checkpoint / UNIVERSAL_LATEST).is_file():
        return universal_weights(checkpoint / (checkpoint / UNIVERSAL_LATEST).read_text().strip()), "universal"
    import contextlib
    import io

    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    try:  # its progress prints ("Processing zero checkpoint ...") say nothing the summary line does not
        with contextlib.redirect_stdout(io.StringIO()):
            return get_fp32_state_dict_from_zero_checkpoint(str(checkpoint)), "zero"
    except (FileNotFoundError, ValueError) as exc:
        raise ExportError(f"{checkpoint}: cannot read its ZeRO partitions ({exc})") from None


def universal_weights(folder: Path) -> dict:
    """Every `zero/<name>/fp32.pt` of a universal checkpoint: `{"param": tensor}` or the tensor itself, flat for
    a ZeRO-3 source (DeepSpeed's universal loader views it in the parameter's shape; `build.load` does too)."""
    import torch

    files = sorted((folder / "zero").glob("*/fp32.pt"))
    if not files:
        raise ExportError(f"{folder}: no zero/<parameter>/fp32.pt files (an incomplete universal conversion)")
    state = {}
    for path in files:
        saved = torch.load(path, map_location="cpu", weights_only=False)
        state[path.parent.name] = saved["param"] if isinstance(saved, dict) else saved
    return state
