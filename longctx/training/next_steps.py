"""What to do with a finished run: the commands that evaluate, load and export it, printed at its end.

Why here: the end of a run is where a user asks "now what?"; the answer depends on the run (a LoRA adapter is
not a model `from_pretrained` loads on its own; an export needs a DeepSpeed checkpoint), so the run prints the
commands for itself, with its own recipe and folder filled in. Text only: nothing here runs a tool.
"""

import shlex
from pathlib import Path


def next_steps(recipe: str, output_dir: str, lora: bool) -> list[str]:
    """The lines printed after `[done] model saved to ...`."""
    out = shlex.quote(str(output_dir))
    has_checkpoint = any(Path(output_dir).glob("checkpoint-*/latest"))
    lines = [f"[next] evaluate: python -m longctx eval {shlex.quote(recipe)} --checkpoint {out}"]
    if lora:
        merged = shlex.quote(str(Path(output_dir) / "export-merged"))
        lines.append(
            f'[next] load: PeftModel.from_pretrained(base_model, "{output_dir}") (the adapter, over its base)'
        )
        how = f"python -m longctx export {out} --merge-lora" if has_checkpoint else "save a checkpoint first "
        how += "" if has_checkpoint else "(`save_strategy: steps`), then python -m longctx export RUN --merge-lora"
        lines.append(f"[next] export as one plain model: {how} (writes {merged})")
    else:
        lines.append(f'[next] load: AutoModelForCausalLM.from_pretrained("{output_dir}")')
        lines.append(
            f"[next] export a checkpoint or push it: python -m longctx export {out} [--dtype bfloat16] "
            "[--push-to-hub ORG/NAME]"
            + ("" if has_checkpoint else " (needs a checkpoint-N folder: `save_strategy: steps`)")
        )
    return lines
