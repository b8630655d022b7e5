"""A deliberately broken entrypoint for the parity gate's own test: averages per-rank SP losses
without weighting them by label tokens (the classic SP loss bug), then runs recipes/sft.py unchanged.
If the parity test still passed with this, it could not catch the bug it exists for.
"""

import runpy
import sys
from pathlib import Path

import torch
import transformers.trainer


def unweighted_sp_loss(accelerator, model, inputs, return_outputs, pc):
    from deepspeed.utils import groups

    if "labels" not in inputs and "shift_labels" in inputs:
        inputs["labels"] = inputs["shift_labels"]
    outputs = model(**inputs)
    losses = torch.stack(
        torch.distributed.nn.functional.all_gather(outputs.loss, group=groups._get_sequence_parallel_group())
    )
    has_tokens = torch.isfinite(losses)  # a shard with no label tokens has a NaN mean; drop it, weigh the rest 1:1
    loss = losses[has_tokens].mean()
    return (loss, outputs) if return_outputs else loss


transformers.trainer.deepspeed_sp_compute_loss = unweighted_sp_loss
entrypoint = Path(__file__).resolve().parents[3] / "recipes" / "sft.py"
sys.argv = [str(entrypoint), *sys.argv[1:]]
runpy.run_path(str(entrypoint), run_name="__main__")
