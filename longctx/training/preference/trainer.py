"""TRL 1.16's DPOTrainer for packed preference rows under DeepSpeed Ulysses SP, as one class.

Upstream, DPOTrainer under SP has no guard and no SP logic: its `_compute_loss` sums per-token log-probs of the
rank's shard only (each rank trains on a different partial log-prob of every answer), its collator emits no
position_ids (which the SP loader needs), and packed pairs are unavailable (`padding_free` is disabled in 1.16).
Each fix here is an override of the method that has the gap, listed with the fingerprint of the method it
overrides in `OVERRIDES` of longctx/training/patches/registry.py:

- `_compute_loss`: whole-answer log-probs from rows that data_prep packed (pairs whole in a row), summed per
  sequence and all-reduced over the SP group (log_probs.py), the losses (loss.py) weighted over the optimizer step's
  pairs on all ranks (as the SFT loss is over its label tokens: sp=1 and sp=N train the same), TRL's metrics
  exact per pair (metrics.py);
- the reference log-probs precomputed on the training mesh before the first step, stored and reused on resume, or
  computed live (reference.py); TRL's own reference model and precompute pass are not built;
- what every long-context trainer shares, from LongContextTrainerBase (longctx/training/trainer_base.py): resumable
  SP loader, sp x dp data order, universal and atomic checkpoints, per-model fixes (document isolation,
  position_ids required, ALST), the run's callbacks, eval sharded like training with an exact held-out loss;
  this class keeps rows unbalanced (a pair row is not work-balanced) and adds its hooks: the reference pass on the
  built engine, the step's pair count, pair-less eval padding, the pair-mean eval loss.
"""

import dataclasses

import torch
from trl import DPOTrainer

from longctx.training.model_fixes import prepare_model
from longctx.training.preference.log_probs import pair_sums
from longctx.training.preference.loss import preference_loss
from longctx.training.preference.metrics import exact_eval_loss, record
from longctx.training.preference.reference import live_reference, reference_table
from longctx.training.sequence_parallel.eval_rows import RankShare
from longctx.training.sequence_parallel.loss_weighting import GRADIENT_DIVISOR, set_gradient_divisor
from longctx.training.trainer_base import LongContextTrainerBase


def refuse_router_aux(trainer) -> None:
    """The recipe rule on the built model (its config may not have been on disk at parse time), and TRL's own
    decision: a load-balancing term TRL would add is refused, never dropped
    (longctx/config/rules/trainers/preference.py)."""
    from longctx.config.problems import error
    from longctx.config.recipe import RecipeError
    from longctx.config.rules.trainers.router_aux import router_aux_problems

    source = trainer.recipe.config_source
    problems = router_aux_problems(trainer.args.router_aux_loss_coef, trainer.model.config.to_dict(), source, "DPO")
    if trainer.aux_loss_enabled and not problems:  # TRL enables it where the rule saw nothing: refused all the same
        msg = f"is {trainer.router_aux_loss_coef} for this model; the long-context DPO trainer does not compute it"
        problems = [error(source, "router_aux_loss_coef", msg, "set `router_aux_loss_coef: 0`")]
    if problems:
        raise RecipeError(source, problems)


class PairlessPadding(RankShare):
    """An eval rank's share of rows, its padding rows holding no pair (sequence_ids -1: no sums, no metrics)."""

    def __getitem__(self, i):
        row = super().__getitem__(i)
        if self.indices[i] < 0:
            row = {**row, "sequence_ids": [-1] * len(row["sequence_ids"])}
        return row


class LongContextDPOTrainer(LongContextTrainerBase, DPOTrainer):
    """`LongContextDPOTrainer(..., recipe=recipe, model_args=model_args)`; `args` is a PreferenceConfig."""

    eval_builds_logits = False  # the held-out loss is a mean over pairs: no logits are built
    eval_row_share = PairlessPadding

    def __init__(self, *args, recipe, model_args, **kwargs):
        self.recipe, self.model_args = recipe, model_args
        self.reference_tables = {"train": {}, "eval": {}}  # row_index -> reference log-prob per sequence
        self.eval_pair_losses: list[float] = []
        self._step_pairs = None
        config = kwargs["args"]
        # TRL builds a second model unless told the reference log-probs are precomputed; ours are computed on the
        # SP mesh in _prepare_for_training (TRL's own pass, `_precompute_ref_logps`, is a no-op here)
        config.precompute_ref_log_probs = config.reference_log_probs in ("precomputed", "none")
        self.unprepared_reference = kwargs.get("ref_model")  # prepared in create_accelerator_and_postprocess
        super().__init__(*args, **kwargs)
        config.precompute_ref_log_probs = False
        self.loss_is_scaled_for_ga = True  # weighted over the step's pairs already (_compute_loss)
        if self.sp > 1:  # what DeepSpeed divides the summed gradients by decides the reduction's gradient
            set_gradient_divisor(self.accelerator, self.sp)
        refuse_router_aux(self)
        # the train table of reference log-probs, filled in place by the reference pass (after_engine_built)
        self.data_collator.reference = self.reference_tables["train"]
        self.install_model_fixes()  # the policy: prepare_model, as SFT's (prefix sharing too)
        self.add_run_callbacks()  # throughput/MFU/memory, topology.json, optimizer report

    def create_accelerator_and_postprocess(self):
        """Also prepare a `frozen_model` reference with the policy's fixes (longctx/training/model_fixes.py). Trainer
        builds the accelerator here, inside DPOTrainer.__init__ and before it hands the reference to its own
        `deepspeed.initialize` (ZeRO-3 leaf flags must precede the engine; accelerate's refusal of unconverted
        recurrent layers never runs there): the one moment the mesh is known and the reference is not wrapped yet."""
        super().create_accelerator_and_postprocess()
        reference, self.unprepared_reference = self.unprepared_reference, None
        if reference is not None:
            prepare_model(reference, self.recipe, self.args, self.accelerator, role="reference")

    # ---- data: prepared rows, as data_prep packed them

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        """Rows data_prep packed (`sequence_ids` present) are used as they are; TRL would re-tokenize them."""
        if "sequence_ids" in (getattr(dataset, "column_names", None) or []):
            return dataset
        return super()._prepare_dataset(dataset, processing_class, args, dataset_name)

    def _precompute_ref_logps(self, dataset, name, batch_size):
        """Not here: before the engine exists, without SP. reference.py computes them in _prepare_for_training."""
        return dataset

    def eval_collator(self):
        """The collator carrying the eval table's reference log-probs."""
        return dataclasses.replace(self.data_collator, reference=self.reference_tables["eval"])

    # ---- training

    def after_engine_built(self, model, resume_from_checkpoint) -> None:
        """The reference pass on the engine DeepSpeed just built (after a resumed checkpoint was loaded into it, so
        a resume reads the stored table instead)."""
        if self.args.reference_log_probs == "precomputed":
            resuming = resume_from_checkpoint is not None
            sets = [("train", self.train_dataset)] + ([("eval", self.eval_dataset)] if self.eval_dataset else [])
            for split, dataset in sets:
                table = reference_table(self, model, dataset, split, self.sp_group(), resuming)
                self.reference_tables[split].update(table)

    def count_step_weights(self, batch_samples) -> None:
        """The optimizer step's pairs on all ranks: the loss is their mean (each SP group's ranks hold the same
        rows, so the world's count is sp times the step's)."""
        local = sum(sum(batch["sequence_counts"]) // 2 for batch in batch_samples)
        total = self.accelerator.gather(torch.tensor([local], device=self.args.device)).sum().item()
        self._step_pairs = max(total // self.sp, 1)

    def _compute_loss(self, model, inputs, return_outputs):
        """Whole answers' log-probs over the SP group, the recipe's loss over the pairs, TRL's metrics per pair."""
        mode = "train" if self.model.training else "eval"
        group = self.sp_group()
        divisor = getattr(self.accelerator, GRADIENT_DIVISOR, None)
        pairs = pair_sums(model, inputs, group, divisor)
        tokens = pairs.field("tokens")
        result = preference_loss(self.args, pairs.field("logps"), self.reference_logps(model, inputs, pairs), tokens)
        if mode == "train":  # the step's pair mean after DeepSpeed averages over the dp groups
            scale = (self.accelerator.num_processes // self.sp) / self._step_pairs
        else:
            scale = 1 / max(len(pairs), 1)
        loss = result.losses.sum() * scale
        if mode == "train":  # a non-finite loss stops or skips the step (longctx/training/faults/run_guard.py)
            self.run_guard.see_loss(loss)
        real = int((inputs["sequence_ids"] >= 0).sum())
        record(self, mode, pairs, result, real, self.sp)
        return (loss, None) if return_outputs else loss

    def reference_logps(self, model, inputs, pairs):
        """(chosen, rejected) reference sums of the micro-batch's pairs, in the order of `pairs`."""
        source = self.args.reference_log_probs
        if source == "none":
            zeros = torch.zeros(len(pairs), device=pairs.chosen.device)
            return zeros, zeros
        if source != "precomputed":
            return live_reference(self, model, inputs, self.sp_group()).field("logps")
        if "ref_logps" not in inputs:
            raise RuntimeError("a batch without reference log-probs: the reference pass did not run before it")
        # each row's first `sequence_counts` entries: an eval padding row reuses row 0's index but holds no pair
        rows = list(zip(inputs["ref_logps"], inputs["sequence_counts"], strict=True))
        chosen = [row[k] for row, n in rows for k in range(0, n - 1, 2)]
        rejected = [row[k + 1] for row, n in rows for k in range(0, n - 1, 2)]
        device = pairs.chosen.device
        return torch.tensor(chosen, device=device), torch.tensor(rejected, device=device)

    # ---- evaluation: sharded like training; eval_loss the mean over every held-out pair

    def reset_eval_loss(self) -> None:
        self.eval_pair_losses = []

    def report_eval_loss(self, metrics: dict, prefix: str) -> None:
        """`<prefix>_loss` the mean over every held-out pair, and how many pairs that is."""
        loss = exact_eval_loss(self)
        if loss is not None:
            metrics[f"{prefix}_loss"] = loss
            metrics[f"{prefix}_pairs"] = len(self.eval_pair_losses) // self.sp
