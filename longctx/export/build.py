"""Put a checkpoint's fp32 weights into the model its run built, and save a folder `from_pretrained` loads.

The architecture is the run's own `config.json` (saved beside every checkpoint: for LoRA the effective config,
longctx/training/model_build.py), so rope scaling and length overrides survive. A full run's checkpoint holds
every parameter. A LoRA run's holds the adapter only (DeepSpeed saves the trainable parameters; the base is frozen),
so the base is rebuilt first: from the recipe when one is given (`starting_model`, exactly as training and eval
build it: pretrained weights or seeded random ones), else from the adapter's `base_model_name_or_path`. With
`merge_lora` the adapter is folded into the base (`merge_and_unload`) and the folder is a plain model; without it
the folder is PEFT's adapter, which loads over its base model.
"""

import shutil
from pathlib import Path

from longctx.export.weights import ExportError, find_checkpoint, read_weights

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


def run_config(checkpoint: Path):
    """The model config the run saved with the checkpoint (or with the run, one folder up)."""
    from transformers import AutoConfig

    for folder in (checkpoint, checkpoint.parent):
        if (folder / "config.json").is_file():
            return AutoConfig.from_pretrained(folder)
    raise ExportError(f"{checkpoint}: no config.json beside it or in its run folder; the run saved no model config")


def adapter_base(checkpoint: Path, recipe_base=None):
    """The base a LoRA adapter trained on: `recipe_base(config)` (the recipe's own builder), else the pretrained
    weights its adapter_config names, under the run's effective config."""
    import json

    from transformers import AutoModelForCausalLM

    config = run_config(checkpoint)
    if recipe_base is not None:
        return recipe_base(config)
    name = json.loads((checkpoint / "adapter_config.json").read_text()).get("base_model_name_or_path")
    try:
        return AutoModelForCausalLM.from_pretrained(name, config=config, dtype="float32")
    except OSError as exc:
        raise ExportError(
            f"{checkpoint} is a LoRA adapter and its base {name!r} has no weights to load ({type(exc).__name__}); "
            "a recipe with `model_init: random` saves no base: pass `--recipe RECIPE` (with the run's overrides "
            "after `--`) to rebuild it as the run did"
        ) from None


def build_model(checkpoint: Path, state: dict, merge_lora: bool, recipe_base=None):
    """(model with the checkpoint's weights, whether it is a LoRA adapter left unmerged)."""
    from transformers import AutoModelForCausalLM

    if not (checkpoint / "adapter_config.json").is_file():
        model = AutoModelForCausalLM.from_config(run_config(checkpoint), dtype="float32")
        load(model, state, checkpoint, needed=lambda name: True)
        return model, False
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(adapter_base(checkpoint, recipe_base), LoraConfig.from_pretrained(str(checkpoint)))
    load(model, state, checkpoint, needed=lambda name: "lora_" in name)
    return (model.merge_and_unload(), False) if merge_lora else (model, True)


def load(model, state: dict, checkpoint: Path, needed) -> None:
    """The checkpoint's parameters into the model: none left over, and every `needed` one present (a full model's
    all but a tied output embedding; an adapter's LoRA weights, over a base loaded already)."""
    shapes = {name: p.shape for name, p in model.state_dict().items()}
    state = {k: v.view(shapes[k]) if k in shapes and v.numel() == shapes[k].numel() else v for k, v in state.items()}
    result = model.load_state_dict(state, strict=False)
    tied = tied_output_embedding(model)
    missing = [k for k in result.missing_keys if needed(k) and k not in tied]
    if missing or result.unexpected_keys:
        raise ExportError(
            f"{checkpoint}: its weights do not match the run's config.json (missing {missing[:3]}, unexpected "
            f"{result.unexpected_keys[:3]}); export the run the checkpoint came from"
        )


def tied_output_embedding(model) -> set[str]:
    """The output embedding's names when the config ties it to the input embedding (it is saved once)."""
    text = model.config.get_text_config() if getattr(model, "config", None) is not None else None
    if text is None or not getattr(text, "tie_word_embeddings", False):
        return set()
    return {name for name, _ in model.named_parameters(remove_duplicate=False) if name.endswith("lm_head.weight")}


def export(run: Path, out: Path, merge_lora: bool = False, dtype: str = "auto", recipe_base=None) -> dict:
    """Write the export of `run` to `out`; returns what was read and written (for the summary line)."""
    import torch

    checkpoint = find_checkpoint(Path(run))
    state, form = read_weights(checkpoint)
    model, adapter = build_model(checkpoint, state, merge_lora, recipe_base)
    target = dtype if dtype != "auto" else str(getattr(run_config(checkpoint), "dtype", None) or "float32")
    target = target.removeprefix("torch.")
    model = model.to(getattr(torch, target))
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    copy_tokenizer(checkpoint, out)
    return {"checkpoint": str(checkpoint), "form": form, "adapter": adapter, "dtype": target, "out": str(out)}


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
    loader = f'PeftModel.from_pretrained(base, "{out}")' if result["adapter"] else None
    loader = loader or f'AutoModelForCausalLM.from_pretrained("{out}")'
    return [
        f"[export] read {result['checkpoint']} ({result['form']} checkpoint, fp32), wrote {what} in {result['dtype']}",
        f"[export] {out}: load it with {loader}",
        f"[export] files: {', '.join(sorted(p.name for p in Path(out).iterdir()))}",
    ]


def recipe_base_builder(recipe: str, overrides: list[str]):
    """`config -> base model`, built as the run built it (longctx/training/model_build.py `starting_model`)."""
    from longctx.config.paths import resolve_recipe
    from longctx.config.recipe import RecipeError, parse_recipe
    from longctx.training.model_build import starting_model

    try:
        recipe_args, sft, model_args = parse_recipe(["--config", str(resolve_recipe(recipe)), *overrides])
    except RecipeError as exc:
        raise ExportError(str(exc)) from None
    return lambda config: starting_model(recipe_args, model_args, sft, config)
