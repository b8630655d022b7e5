"""A slice of the retrieval eval inside training, every `retrieval_eval_steps` steps, logged like the eval loss.

The slice is the passkey and multi-key tasks at the recipe's max_length, needles at 0%, 50% and 100% depth,
`retrieval_eval_samples` examples each (2: 12 forward passes, no backward). It runs on the training model as it
is (DeepSpeed engine, Ulysses attention kept on in eval by
longctx/training/sequence_parallel/registration.py), with the same scorer as
`make eval`, and logs `retrieval_<task>_accuracy` and `retrieval_<task>_logprob`, so a long run shows whether
retrieval improves, not only whether the loss falls.
"""

import torch
from transformers import TrainerCallback

from longctx.training.retrieval.scoring import cells, dp_share, shard_sums, verdict
from longctx.training.retrieval.tasks import grid
from longctx.training.sequence_parallel.mesh import sp_coordinates

SLICE_TASKS, SLICE_DEPTHS = ("passkey", "multikey"), (0.0, 0.5, 1.0)


class RetrievalCallback(TrainerCallback):
    def __init__(self, trainer, tokenizer, every: int, samples: int, length: int):
        self.trainer, self.every = trainer, every
        self.examples = grid(tokenizer, SLICE_TASKS, [length], SLICE_DEPTHS, samples, seed=1)

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.every == 0:
            self.trainer.log(self.measure())

    def measure(self) -> dict:
        acc, model = self.trainer.accelerator, self.trainer.model_wrapped
        sp, sp_rank, dp, dp_rank = sp_coordinates(acc)
        # one row of sums per example: each rank adds its shard's part, so the world-wide sum is every example's total
        sums = torch.zeros(len(self.examples), 3, dtype=torch.float64, device=acc.device)
        model.eval()
        try:
            for i, keep in dp_share(len(self.examples), dp, dp_rank):  # as many forwards on every rank (ZeRO-3)
                part = shard_sums(model, self.examples[i], sp, sp_rank, acc.device).to(acc.device)
                if keep:  # a padding repeat's sums are dropped
                    sums[i] = part
        finally:
            model.train()
        if acc.num_processes > 1:
            torch.distributed.all_reduce(sums)
        rows = [
            {"task": ex.task, "length": ex.length, "depth": ex.depth, **verdict(sums[i].cpu())}
            for i, ex in enumerate(self.examples)
        ]
        out = {}
        for task in SLICE_TASKS:
            mine = [c for c in cells(rows) if c["task"] == task]
            out[f"retrieval_{task}_accuracy"] = sum(c["accuracy"] for c in mine) / len(mine)
            out[f"retrieval_{task}_logprob"] = sum(c["mean_logprob"] for c in mine) / len(mine)
        return out
