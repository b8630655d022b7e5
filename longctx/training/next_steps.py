"""What to do with a finished run: the commands that evaluate, load and export it, printed at its end.

Why here: the end of a run is where a user asks "now what?"; the answer depends on the run (a LoRA adapter is
not a model `from_pretrained` loads on its own; an export needs a DeepSpeed checkpoint), so the run prints the
commands for itself, with its own recipe and folder filled in. Text only: nothing here runs a tool.
"""

import shlex
from pathlib import Path


def next_steps(
    recipe: str, output_dir: str, lora: bool, overrides: list[str] = (), evaluate: bool = True
) -> list[str]:
    """The lines printed after `[done] model saved to ...`; `overrides`: the run's command line after its recipe
    (a LoRA export rebuilds the base from the recipe as the run did; secrets masked). `evaluate`: the
    `longctx eval` line, which measures the language-model loss (SFT runs)."""
    from longctx.config.paths import cli_command
    from longctx.training.credentials import redact_argv

    out, longctx = shlex.quote(str(output_dir)), cli_command()
    has_checkpoint = any(Path(output_dir).glob("checkpoint-*/latest"))
    tail = f" -- {shlex.join(redact_argv(list(overrides)))}" if overrides else ""
    evaluation = f"[next] evaluate: {longctx} eval {shlex.quote(recipe)} --checkpoint {out}{tail}"
    lines = [evaluation] if evaluate else []
    if lora:
        merged = shlex.quote(str(Path(output_dir) / "export-merged"))
        lines.append(
            f'[next] load: PeftModel.from_pretrained(base_model, "{output_dir}") (the adapter, over its base)'
        )
        export = f"{longctx} export {out} --merge-lora --recipe {shlex.quote(recipe)}{tail}"
        how = export if has_checkpoint else f"save a checkpoint (`save_strategy: steps`), then {export}"
        lines.append(f"[next] export as one plain model: {how} (writes {merged})")
    else:
        lines.append(f'[next] load: AutoModelForCausalLM.from_pretrained("{output_dir}")')
        lines.append(
            f"[next] export a checkpoint or push it: {longctx} export {out} [--dtype bfloat16] "
            "[--push-to-hub ORG/NAME]"
            + ("" if has_checkpoint else " (needs a checkpoint-N folder: `save_strategy: steps`)")
        )
    return lines
