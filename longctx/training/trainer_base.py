"""What the long-context SFT, DPO and GRPO trainers share, written once: a mixin placed before the TRL class.

`class LongContextSFTTrainer(LongContextTrainerBase, SFTTrainer)` (and DPO, GRPO): each Trainer method here calls
the TRL class's through `super()` and is listed once, under this class, in `OVERRIDES` of
longctx/training/patches/overrides.py with the fingerprint of every upstream method its `super()` reaches from the
three trainers. A trainer keeps only what differs, through the hooks below, whose names say why:

- `loads_sp_group_rows`: SFT and DPO load one set of rows per SP group that DeepSpeed's SP adapter shards along the
  sequence (sp x dp shard relabel, resumable adapter, eval sharded like training, exact eval loss); GRPO does not:
  every rank loads and generates its own prompts, so the upstream data and eval paths are kept as they are;
- `balances_rows_by_work`: SFT only (a DPO pair row or a GRPO prompt is not work-balanced: config/rules);
- `count_step_weights`: what the step's loss is a mean over (SFT's label tokens, DPO's pairs), counted on all ranks;
- `engine_registration`, `loader_after_engine`, `after_engine_built`: GRPO's one row per forward and plain loader,
  DPO's reference pass on the engine;
- `eval_row_share`, `eval_collator`, `reset_eval_loss`, `report_eval_loss`, `eval_builds_logits`: each trainer's
  held-out loss (SFT: label-token mean; DPO: pair mean).
"""

import contextlib

from longctx.training.checkpoints.commit import save_atomically
from longctx.training.checkpoints.resume import TopologyRecorder, checkpoint_topology, relabel_shards, resumable
from longctx.training.checkpoints.universal import use_universal_if_needed
from longctx.training.data.balance import balance_rows
from longctx.training.faults.run_guard import RunGuard
from longctx.training.metrics.optimizer_report import OptimizerReport
from longctx.training.metrics.step_record import StepRecord
from longctx.training.metrics.throughput import attach_metrics
from longctx.training.model_build import save_effective_config
from longctx.training.model_fixes import prepare_model, require_prepared
from longctx.training.sequence_parallel.eval_rows import RankShare, sp_eval_dataloader
from longctx.training.sequence_parallel.mesh import sp_size


class LongContextTrainerBase:
    """The shared half of a long-context trainer; `self.recipe` (RecipeArguments) is set by the subclass."""

    loads_sp_group_rows = True
    balances_rows_by_work = False
    eval_builds_logits = True  # when `compute_metrics` is set; else loss only
    eval_row_share = RankShare  # this rank's share of the eval rows (a subclass: what its padding rows hold)

    # ---- construction: called by each trainer's __init__ once TRL's has built the model and the accelerator

    def install_model_fixes(self) -> None:
        """The per-model fixes (longctx/training/model_fixes.py, the one function every model a trainer runs goes
        through), after TRL applied PEFT and Liger and before DeepSpeed wraps the model in `train()`."""
        prepare_model(self.model, self.recipe, self.args, self.accelerator)
        if getattr(self.model.gradient_checkpointing_enable, "_is_sac_wrapped", False):  # TRL's `selective: true`
            self.accelerator.print("[checkpointing] selective: attention outputs kept, the rest recomputed")

    def add_run_callbacks(self) -> None:
        """What the run reports and records besides the loss; callbacks are the Trainer's own extension point."""
        attach_metrics(self, self.recipe)  # first in line, so every report_to logger receives the metrics
        # preemption and non-finite numbers, agreed by all ranks once a step (longctx/training/faults/run_guard.py)
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

    @property
    def sp(self) -> int:
        """The Ulysses SP degree of this run's mesh (1 without SP)."""
        return sp_size(self.accelerator)

    def sp_group(self):
        """The SP process group (None at sp=1): what whole-sequence sums and gathers reduce over."""
        if self.sp == 1:
            return None
        from deepspeed.utils import groups

        return groups._get_sequence_parallel_group()

    # ---- training

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        """A converted checkpoint resumed on another mesh loads as universal: set before the engine is built."""
        if isinstance(resume_from_checkpoint, str):
            mesh = checkpoint_topology(self.accelerator, self.recipe.config_source, self.args.seed)
            use_universal_if_needed(self.accelerator, resume_from_checkpoint, mesh)
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def get_train_dataloader(self):
        """Under sp x dp each rank loads the shard that trains a dp-only run's rows at every step (upstream:
        the same rows per epoch, on other steps); SFT's rows balanced over ranks and micro-steps by work."""
        loader = super().get_train_dataloader()
        if self.loads_sp_group_rows:
            relabel_shards(loader, self.accelerator)
        if self.balances_rows_by_work:
            balance_rows(loader, self)  # recipe: balance_rows (longctx/training/data/balance.py)
        return loader

    def _prepare_for_training(self, max_steps, train_dataloader, resume_from_checkpoint):
        """The engine built (in `engine_registration`), the loader it returns adapted (`loader_after_engine`),
        every model it runs checked as prepared, then what a trainer does on the built engine."""
        with self.engine_registration():
            model, loader = super()._prepare_for_training(max_steps, train_dataloader, resume_from_checkpoint)
        loader = self.loader_after_engine(loader)
        self.callback_handler.train_dataloader = loader
        require_prepared(self.model, "policy")  # no model runs half-prepared (longctx/training/model_fixes.py)
        if getattr(self, "ref_model", None) is not None:
            require_prepared(self.ref_model, "reference")
        self.after_engine_built(model, resume_from_checkpoint)
        return model, loader

    def engine_registration(self):
        """The context the engine (and accelerate's Ulysses registration) is built in: upstream's by default."""
        return contextlib.nullcontext()

    def loader_after_engine(self, loader):
        """DeepSpeed's SP dataloader adapter, made resumable: it forwards `set_epoch` (upstream has none, so every
        epoch would shuffle as epoch 0) and drops resumed micro-steps after it."""
        return resumable(loader)

    def after_engine_built(self, model, resume_from_checkpoint) -> None:
        """Work that needs the built engine before the first step (DPO: the reference pass). Nothing by default."""

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        """Also count, on all ranks, what the step's loss is a mean over (`count_step_weights`)."""
        batch_samples, num_items_in_batch = super().get_batch_samples(epoch_iterator, num_batches, device)
        self.count_step_weights(batch_samples)
        return batch_samples, num_items_in_batch

    def count_step_weights(self, batch_samples) -> None:
        """What the step's loss divides by, when the trainer weights it over the whole step. Nothing by default."""

    # ---- saving

    def _save_checkpoint(self, model, trial):
        """Atomic (longctx/training/checkpoints/commit.py): marked in progress, upstream's save with its rotation off,
        the commit mark once every rank's files are written, then the rotation; space or permission failures say so."""
        upstream = super()._save_checkpoint
        save_atomically(self, lambda: upstream(model, trial))

    def _save(self, output_dir=None, state_dict=None):
        """Also the effective model config beside a LoRA adapter, which PEFT saves without one (its folder would
        reload the base with native rope: longctx/training/model_build.py). Called for the output and every
        checkpoint, on the ranks that write."""
        super()._save(output_dir, state_dict)
        if self.args.should_save:
            save_effective_config(self.accelerator.unwrap_model(self.model), output_dir or self.args.output_dir)

    # ---- evaluation: sharded like training, one exact held-out loss
    # (longctx/training/sequence_parallel/eval_rows.py, eval_loss.py)

    def get_eval_dataloader(self, eval_dataset=None):
        """Eval rows split across ranks (padding rows that weigh nothing, not repeats) and, under SP, sharded across
        the SP group like training rows (upstream: a whole sequence on every rank)."""
        if not self.loads_sp_group_rows or (eval_dataset is None and self.eval_dataset is None):
            return super().get_eval_dataloader(eval_dataset)  # upstream's error: evaluation needs an eval_dataset
        return sp_eval_dataloader(self, eval_dataset, self.eval_row_share, self.eval_collator())

    def eval_collator(self):
        """The collator of the eval rows: the training one by default."""
        return self.data_collator

    def evaluation_loop(
        self, dataloader, description, prediction_loss_only=None, ignore_keys=None, metric_key_prefix="eval"
    ):
        """Loss only (no logits gathered) unless metrics are computed, and `<prefix>_loss` the exact mean of the
        held-out set (upstream: a mean of batch means, which changes with the batch split)."""
        loop = super().evaluation_loop
        if not self.loads_sp_group_rows:
            return loop(dataloader, description, prediction_loss_only, ignore_keys, metric_key_prefix)
        self.reset_eval_loss()
        if not self.eval_builds_logits or self.compute_metrics is None:
            prediction_loss_only = True
        output = loop(dataloader, description, prediction_loss_only, ignore_keys, metric_key_prefix)
        self.report_eval_loss(output.metrics, metric_key_prefix)
        return output

    def reset_eval_loss(self) -> None:
        """Empty this evaluation's held-out loss sums (a subclass keeps them)."""

    def report_eval_loss(self, metrics: dict, prefix: str) -> None:
        """Replace `<prefix>_loss` by the exact held-out mean (a subclass computes it). Upstream's by default."""
