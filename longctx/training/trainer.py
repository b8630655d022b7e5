"""TRL's SFTTrainer with what long-context training under DeepSpeed Ulysses SP needs, as one class.

Upstream, a Ulysses SP run trains, but: eval runs with SP off and averages batch means, the SP loss weights one
micro-batch of one SP group, sp x dp trains the rows of other steps, the SP dataloader has no `set_epoch`, and a
checkpoint does not say which mesh wrote it. Each fix is an override of the Trainer method that has the gap (the
Trainer's own extension pattern, listed with the fingerprint of the method it overrides in `OVERRIDES` of
longctx/training/patches/overrides.py), calling a function of the module that owns the mechanism; what the DPO and
GRPO trainers share is in LongContextTrainerBase (longctx/training/trainer_base.py), and this class adds SFT's
hooks (rows balanced by work, the step's label tokens, the label-token eval loss) and its eval loss path. What
no method can reach (attention registries, module-level names) is installed once per process by
`install_process_patches` (longctx/training/process_patches.py): call it before building this trainer.
"""

from trl import SFTTrainer

from longctx.training.attention.isolation import keep_packed_positions
from longctx.training.sequence_parallel.eval_loss import TokenLoss, label_tokens, report_token_mean, sp_eval_loss
from longctx.training.sequence_parallel.loss_weighting import (
    count_step_label_tokens,
    set_gradient_divisor,
    weights_by_step,
)
from longctx.training.sequence_parallel.mesh import sp_enabled
from longctx.training.trainer_base import LongContextTrainerBase


class LongContextSFTTrainer(LongContextTrainerBase, SFTTrainer):
    """`SFTTrainer(..., recipe=recipe)`: the recipe (`RecipeArguments`) switches the optional parts on."""

    balances_rows_by_work = True  # a packed SFT row's work is its documents' attention and MLP cost

    def __init__(self, *args, recipe, **kwargs):
        self.recipe = recipe
        self.eval_token_loss = TokenLoss()  # this evaluation's label-token-weighted loss sums, on this rank
        super().__init__(*args, **kwargs)
        # the token-weighted SP loss is already normalized over the step's micro-batches: the Trainer must not
        # divide it by the accumulation steps again
        self.weights_sp_loss_by_step = weights_by_step(self.sp)
        if self.weights_sp_loss_by_step:
            self.loss_is_scaled_for_ga = True
            # and it must know what DeepSpeed divides the summed gradients by for this ZeRO stage (refused if none)
            set_gradient_divisor(self.accelerator, self.sp)
        keep_packed_positions(self)  # pre-packed rows get restarting position_ids at every sp
        self.install_model_fixes()
        self.add_run_callbacks()

    def count_step_weights(self, batch_samples) -> None:
        """The step's label tokens on all ranks, which the token-weighted SP loss divides by."""
        if self.weights_sp_loss_by_step:
            count_step_label_tokens(self, batch_samples)

    # ---- evaluation: sharded like training, one token-weighted eval loss
    # (longctx/training/sequence_parallel/eval_loss.py)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """In eval under SP, the training loss path (label-token-weighted across the SP group) instead of a
        per-shard loss; every eval batch also adds to the token-weighted eval loss. In training, the loss is also
        shown to the run guard (a non-finite one stops or skips the step: longctx/training/faults/guard.py)."""
        if self.model.training:
            out = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            self.run_guard.see_loss(out[0] if return_outputs else out)  # checked once a step, on all ranks
            return out
        if sp_enabled(self.accelerator):
            loss, outputs = sp_eval_loss(self.accelerator, model, inputs, self.eval_token_loss)
            return (loss, outputs) if return_outputs else loss
        out = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        self.eval_token_loss.add(out[0] if return_outputs else out, label_tokens(inputs))
        return out

    def reset_eval_loss(self) -> None:
        self.eval_token_loss.reset()

    def report_eval_loss(self, metrics: dict, prefix: str) -> None:
        """`<prefix>_loss` the mean over every label token of the set."""
        report_token_mean(metrics, prefix, self.eval_token_loss, self.accelerator)
