"""Put a checkpoint's fp32 weights into the model its run built, and save a folder `from_pretrained` loads.

The architecture is the run's own `config.json` (saved beside every checkpoint: for LoRA the effective config,
longctx/training/model_build.py), so rope scaling and length overrides survive. A LoRA run's weights carry PEFT's
names: with `merge_lora` the adapter is folded into the base (`merge_and_unload`) and the folder is a plain model;
without it the folder is PEFT's adapter, which loads over its base model.
"""

import json
import shutil
from pathlib import Path

from longctx.export.weights import ExportError, find_checkpoint, read_weights

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")
DTYPES = ("auto", "float32", "bfloat16", "float16")


def run_config(checkpoint: Path):
    """The model config the run saved with the checkpoint (or with the run, one folder up)."""
    from transformers import AutoConfig

    for folder in (checkpoint, checkpoint.parent):
        if (folder / "config.json").is_file():
            return AutoConfig.from_pretrained(folder)
    raise ExportError(f"{checkpoint}: no config.json beside it or in its run folder; the run saved no model config")


def build_model(checkpoint: Path, state: dict, merge_lora: bool):
    """(model with the checkpoint's weights, whether it is a LoRA adapter left unmerged)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(run_config(checkpoint), dtype="float32")
    lora = (checkpoint / "adapter_config.json").is_file()
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig.from_pretrained(str(checkpoint)))
    load(model, state, checkpoint)
    if lora and merge_lora:
        return model.merge_and_unload(), False
    return model, lora


def load(model, state: dict, checkpoint: Path) -> None:
    """Every parameter from the checkpoint: none missing (but the tied output embedding) and none left over."""
    result = model.load_state_dict(state, strict=False)
    tied = {name for name, _ in _tied(model)}
    missing = [k for k in result.missing_keys if k not in tied]
    if missing or result.unexpected_keys:
        raise ExportError(
            f"{checkpoint}: its weights do not match the run's config.json (missing {missing[:3]}, unexpected "
            f"{result.unexpected_keys[:3]}); export the run the checkpoint came from"
        )


def _tied(model):
    """(name, parameter) of the output embedding when the config ties it to the input embedding."""
    config = getattr(model, "config", None)
    text = config.get_text_config() if config is not None else None
    if text is not None and getattr(text, "tie_word_embeddings", False):
        for name, _ in model.named_parameters(remove_duplicate=False):
            if name.endswith("lm_head.weight"):
                yield name, None


def export(run: Path, out: Path, merge_lora: bool = False, dtype: str = "auto") -> dict:
    """Write the export of `run` to `out`; returns what was read and written (for the summary line)."""
    import torch

    checkpoint = find_checkpoint(Path(run))
    state, form = read_weights(checkpoint)
    model, adapter = build_model(checkpoint, state, merge_lora)
    target = dtype if dtype != "auto" else str(getattr(run_config(checkpoint), "dtype", None) or "float32")
    target = target.removeprefix("torch.")
    model = model.to(getattr(torch, target))
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    copy_tokenizer(checkpoint, out)
    return {"checkpoint": str(checkpoint), "form": form, "adapter": adapter, "dtype": str(target), "out": str(out)}


def copy_tokenizer(checkpoint: Path, out: Path) -> None:
    """The tokenizer files the run saved (with the checkpoint, or with the run), so the folder is complete."""
    for folder in (checkpoint, checkpoint.parent):
        found = [folder / name for name in TOKENIZER_FILES if (folder / name).is_file()]
        if found:
            for path in found:
                shutil.copy2(path, out / path.name)
            return


def summary(result: dict) -> list[str]:
    what = "a PEFT LoRA adapter (pass --merge-lora for a plain model)" if result["adapter"] else "a plain model"
    out = result["out"]
    load_line = (
        f'PeftModel.from_pretrained(base, "{out}")'
        if result["adapter"]
        else f'AutoModelForCausalLM.from_pretrained("{out}")'
    )
    return [
        f"[export] read {result['checkpoint']} ({result['form']} checkpoint, fp32), wrote {what} in {result['dtype']}",
        f"[export] {out}: load it with {load_line}",
        f"[export] files: {', '.join(sorted(p.name for p in Path(out).iterdir()))}",
    ]


def saved_config(out: Path) -> dict:
    return json.loads((Path(out) / "config.json").read_text())
