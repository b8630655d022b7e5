"""TRL's SFTTrainer with what long-context training under DeepSpeed Ulysses SP needs, as one class.

Upstream, a Ulysses SP run trains, but: eval runs with SP off and averages batch means, the SP loss weights one
micro-batch of one SP group, sp x dp trains the rows of other steps, the SP dataloader has no `set_epoch`, and a
checkpoint does not say which mesh wrote it. Each fix here is an override of the Trainer method that
has the gap (the Trainer's own extension pattern, listed with the fingerprint of the method it overrides in
`OVERRIDES` of longctx/training/patches/overrides.py), calling a function of the module that owns the mechanism. What
no method can reach (attention registries, module-level names) is installed once per process by
`install_process_patches` (longctx/training/process_patches.py): call it before building this trainer.
"""

from trl import SFTTrainer

from longctx.training.attention.isolation import keep_packed_positions
from longctx.training.checkpoints.commit import save_atomically
from longctx.training.checkpoints.resume import TopologyRecorder, checkpoint_topology, relabel_shards, resumable
from longctx.training.checkpoints.universal import use_universal_if_needed
from longctx.training.data.balance import balance_rows
from longctx.training.faults.guard import RunGuard
from longctx.training.metrics.optimizer_report import OptimizerReport
from longctx.training.metrics.step_record import StepRecord
from longctx.training.metrics.throughput import attach_metrics
from longctx.training.model_build import save_effective_config
from longctx.training.model_fixes import prepare_model
from longctx.training.sequence_parallel.eval_loss import (
    TokenLoss,
    label_tokens,
    report_token_mean,
    sp_eval_dataloader,
    sp_eval_loss,
)
from longctx.training.sequence_parallel.loss_weighting import (
    count_step_label_tokens,
    set_gradient_divisor,
    weights_by_step,
)
from longctx.training.sequence_parallel.mesh import sp_enabled, sp_size


class LongContextSFTTrainer(SFTTrainer):
    """`SFTTrainer(..., recipe=recipe)`: the recipe (`RecipeArguments`) switches the optional parts on."""

    def __init__(self, *args, recipe, **kwargs):
        self.recipe = recipe
        self.eval_token_loss = TokenLoss()  # this evaluation's label-token-weighted loss sums, on this rank
        super().__init__(*args, **kwargs)
        # the token-weighted SP loss is already normalized over the step's micro-batches: the Trainer must not
        # divide it by the accumulation steps again
        self.weights_sp_loss_by_step = weights_by_step(sp_size(self.accelerator))
        if self.weights_sp_loss_by_step:
            self.loss_is_scaled_for_ga = True
            # and it must know what DeepSpeed divides the summed gradients by for this ZeRO stage (refused if none)
            set_gradient_divisor(self.accelerator, sp_size(self.accelerator))
        keep_packed_positions(self)  # pre-packed rows get restarting position_ids at every sp
        self.install_model_fixes()
        self.add_run_callbacks()

    def install_model_fixes(self) -> None:
        """The per-model fixes (longctx/training/model_fixes.py, the one function every model a trainer runs goes
        through), after TRL applied PEFT and Liger and before DeepSpeed wraps the model in `train()`."""
        prepare_model(self.model, self.recipe, self.args, self.accelerator)
        if getattr(self.model.gradient_checkpointing_enable, "_is_sac_wrapped", False):  # TRL's `selective: true`
            self.accelerator.print("[checkpointing] selective: attention outputs kept, the rest recomputed")

    def add_run_callbacks(self) -> None:
        """What the run reports and records besides the loss; callbacks are the Trainer's own extension point."""
        attach_metrics(self, self.recipe)  # first in line, so every report_to logger receives the metrics
        # preemption and non-finite numbers, agreed by all ranks once a step (longctx/training/faults/guard.py)
        self.run_guard = RunGuard(self, getattr(self.recipe, "on_nonfinite", "stop"))
        self.add_callback(self.run_guard)
        self.add_callback(TopologyRecorder(self.accelerator, self.recipe.config_source))  # schedule horizon check
        self.add_callback(OptimizerReport(self))  # which optimizer really steps (DeepSpeed's CPU Adam?)
        if self.recipe.step_record:  # one JSON line per step, memory reset between steps (the GPU step benchmark)
            self.add_callback(StepRecord(self, self.recipe.step_record, self.recipe.step_record_components))
        if self.recipe.retrieval_eval_steps:  # a slice of `make eval` every N steps, on the training mesh
            from longctx.training.retrieval.callback import RetrievalCallback

            recipe = self.recipe
            slice_args = (recipe.retrieval_eval_steps, recipe.retrieval_eval_samples, self.args.max_length)
            self.add_callback(RetrievalCallback(self, self.processing_class, *slice_args))

    # ---- training

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        """A converted checkpoint resumed on another mesh loads as universal: set before the engine is built."""
        if isinstance(resume_from_checkpoint, str):
            mesh = checkpoint_topology(self.accelerator, self.recipe.config_source, self.args.seed)
            use_universal_if_needed(self.accelerator, resume_from_checkpoint, mesh)
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def get_train_dataloader(self):
        """Under sp x dp each rank loads the shard that trains a dp-only run's rows at every step (upstream:
        the same rows per epoch, on other steps)."""
        loader = super().get_train_dataloader()
        relabel_shards(loader, self.accelerator)
        balance_rows(loader, self)  # each step's rows over ranks and micro-steps by work (recipe: balance_rows)
        return loader

    def _prepare_for_training(self, max_steps, train_dataloader, resume_from_checkpoint):
        """DeepSpeed's SP dataloader adapter, made resumable: it forwards `set_epoch` (upstream has none, so every
        epoch would shuffle as epoch 0) and drops resumed micro-steps after it."""
        model, loader = super()._prepare_for_training(max_steps, train_dataloader, resume_from_checkpoint)
        loader = resumable(loader)
        self.callback_handler.train_dataloader = loader
        return model, loader

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        """Also count the step's label tokens on all ranks, which the token-weighted SP loss divides by."""
        batch_samples, num_items_in_batch = super().get_batch_samples(epoch_iterator, num_batches, device)
        if self.weights_sp_loss_by_step:
            count_step_label_tokens(self, batch_samples)
        return batch_samples, num_items_in_batch

    # ---- saving

    def _save_checkpoint(self, model, trial):
        """Atomic (longctx/training/checkpoints/commit.py): marked in progress, upstream's save with its rotation off,
        the commit mark once every rank's files are written, then the rotation; space or permission failures say so."""
        save_atomically(self, lambda: super(LongContextSFTTrainer, self)._save_checkpoint(model, trial))

    def _save(self, output_dir=None, state_dict=None):
        """Also the effective model config beside a LoRA adapter, which PEFT saves without one (its folder would
        reload the base with native rope: longctx/training/model_build.py). Called for the output and every
        checkpoint, on the ranks that write."""
        super()._save(output_dir, state_dict)
        if self.args.should_save:
            save_effective_config(self.accelerator.unwrap_model(self.model), output_dir or self.args.output_dir)

    # ---- evaluation: sharded like training, one token-weighted eval loss
    # (longctx/training/sequence_parallel/eval_loss.py)

    def get_eval_dataloader(self, eval_dataset=None):
        """Eval rows split across ranks (label-free padding rows, not repeats) and, under SP, sharded across
        the SP group like training rows (upstream: a whole sequence on every rank)."""
        if eval_dataset is None and self.eval_dataset is None:
            return super().get_eval_dataloader(eval_dataset)  # upstream's error: evaluation needs an eval_dataset
        return sp_eval_dataloader(self, eval_dataset)

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

    def evaluation_loop(
        self, dataloader, description, prediction_loss_only=None, ignore_keys=None, metric_key_prefix="eval"
    ):
        """Loss only (no logits gathered) unless metrics are computed, and `eval_loss` the mean over every
        label token of the set (upstream: a mean of batch means, which changes with the batch split)."""
        self.eval_token_loss.reset()
        if self.compute_metrics is None:
            prediction_loss_only = True
        output = super().evaluation_loop(dataloader, description, prediction_loss_only, ignore_keys, metric_key_prefix)
        report_token_mean(output.metrics, metric_key_prefix, self.eval_token_loss, self.accelerator)
        return output
