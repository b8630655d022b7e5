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
- the SFT trainer's SP fixes, called the same way: resumable SP loader, sp x dp data order, universal checkpoints,
  per-model fixes (document isolation, position_ids required, ALST), the run's callbacks, eval sharded like
  training with an exact held-out loss.
"""

import dataclasses

import torch
from trl import DPOTrainer

from longctx.training.attention.document_layout import install_document_layout
from longctx.training.checkpoints.commit import save_atomically
from longctx.training.checkpoints.resume import checkpoint_topology, relabel_shards, resumable
from longctx.training.checkpoints.universal import use_universal_if_needed
from longctx.training.model_build import save_effective_config
from longctx.training.preference.log_probs import pair_sums
from longctx.training.preference.loss import preference_loss
from longctx.training.preference.metrics import exact_eval_loss, record
from longctx.training.preference.reference import live_reference, reference_table
from longctx.training.sequence_parallel.eval_loss import RankShare
from longctx.training.sequence_parallel.loss_weighting import GRADIENT_DIVISOR, set_gradient_divisor
from longctx.training.sequence_parallel.mesh import sp_enabled, sp_size
from longctx.training.trainer import LongContextSFTTrainer


def enable_prefix_sharing(model, recipe) -> None:
    """Read the rows' restarts at p > 0 as branches of a shared prompt (longctx/training/attention/shared_prefix.py),
    on the attention paths that implement it: full attention through the isolated sdpa. Refused elsewhere."""
    from longctx.config.recipe import RecipeError
    from longctx.training.attention.document_layout import install_shared_prefix_layout
    from longctx.training.attention.isolation import sliding_window_layers
    from longctx.training.attention.sinks import sink_family

    config = model.config
    layer_types = set(getattr(config.get_text_config(), "layer_types", None) or ["full_attention"])
    why = None
    if getattr(config, "_attn_implementation", None) != "sdpa":
        why = f"attention {config._attn_implementation!r} (prefix sharing runs on sdpa's document isolation)"
    elif sliding_window_layers(config) or layer_types != {"full_attention"}:
        why = "sliding-window or linear-attention layers (a branch would need the prompt's state: not implemented)"
    elif (family := sink_family(config)) is not None:
        why = f"attention sinks ({family.name})"
    if why is None and install_shared_prefix_layout(model):
        return
    fix = "set `prefix_sharing: false`"
    raise RecipeError(recipe.config_source, [f"`prefix_sharing` is not supported with {why or 'this model'}; {fix}"])


class PairlessPadding(RankShare):
    """An eval rank's share of rows, its padding rows holding no pair (sequence_ids -1: no sums, no metrics)."""

    def __getitem__(self, i):
        row = super().__getitem__(i)
        if self.indices[i] < 0:
            row = {**row, "sequence_ids": [-1] * len(row["sequence_ids"])}
        return row


class LongContextDPOTrainer(DPOTrainer):
    """`LongContextDPOTrainer(..., recipe=recipe, model_args=model_args)`; `args` is a PreferenceConfig."""

    def __init__(self, *args, recipe, model_args, **kwargs):
        self.recipe, self.model_args = recipe, model_args
        self.reference_tables = {"train": {}, "eval": {}}  # row_index -> reference log-prob per sequence
        self.eval_pair_losses: list[float] = []
        self._step_pairs = None
        config = kwargs["args"]
        # TRL builds a second model unless told the reference log-probs are precomputed; ours are computed on the
        # SP mesh in _prepare_for_training (TRL's own pass, `_precompute_ref_logps`, is a no-op here)
        config.precompute_ref_log_probs = config.reference_log_probs in ("precomputed", "none")
        super().__init__(*args, **kwargs)
        config.precompute_ref_log_probs = False
        self.loss_is_scaled_for_ga = True  # weighted over the step's pairs already (_compute_loss)
        self.sp = sp_size(self.accelerator)
        if self.sp > 1:  # what DeepSpeed divides the summed gradients by decides the reduction's gradient
            set_gradient_divisor(self.accelerator, self.sp)
        LongContextSFTTrainer.install_model_fixes(self)  # the same per-model fixes as SFT (isolation, ALST, ...)
        self.install_attention_layouts(config.prefix_sharing)
        LongContextSFTTrainer.add_run_callbacks(self)  # throughput/MFU/memory, topology.json, optimizer report

    def install_attention_layouts(self, prefix_sharing: bool) -> None:
        """Prefix sharing on the policy; and a `frozen_model` reference (inside TRL's DeepSpeed inference engine)
        gets the same document isolation and prefix sharing as the policy."""
        if prefix_sharing:  # a shared prompt's two answers: branches of one document
            enable_prefix_sharing(self.model, self.recipe)
        if self.ref_model is None:
            return
        reference = getattr(self.ref_model, "module", self.ref_model)
        install_document_layout(reference, self.recipe, "sdpa")
        if prefix_sharing:
            enable_prefix_sharing(reference, self.recipe)

    # ---- data: prepared rows, as data_prep packed them

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        """Rows data_prep packed (`sequence_ids` present) are used as they are; TRL would re-tokenize them."""
        if "sequence_ids" in (getattr(dataset, "column_names", None) or []):
            return dataset
        return super()._prepare_dataset(dataset, processing_class, args, dataset_name)

    def _precompute_ref_logps(self, dataset, name, batch_size):
        """Not here: before the engine exists, without SP. reference.py computes them in _prepare_for_training."""
        return dataset

    def get_train_dataloader(self):
        """The collator carries the train table's reference log-probs; under sp x dp each rank loads the rows a
        dp-only run trains at every step (longctx/training/sequence_parallel/data_order.py)."""
        self.data_collator.reference = self.reference_tables["train"]
        loader = super().get_train_dataloader()
        relabel_shards(loader, self.accelerator)
        return loader

    def get_eval_dataloader(self, eval_dataset=None):
        """This rank's share of the held-out rows, sharded across the SP group like training rows."""
        from torch.utils.data import DataLoader

        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        acc = self.accelerator
        share = PairlessPadding(dataset, acc.process_index, acc.num_processes, self.args.eval_batch_size)
        collate = dataclasses.replace(self.data_collator, reference=self.reference_tables["eval"])
        loader = DataLoader(share, batch_size=self.args.eval_batch_size, collate_fn=collate)
        return acc.deepspeed_ulysses_dl_adapter(loader, self.model) if sp_enabled(acc) else loader

    # ---- training

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        """A converted checkpoint resumed on another mesh loads as universal: set before the engine is built."""
        if isinstance(resume_from_checkpoint, str):
            mesh = checkpoint_topology(self.accelerator, self.recipe.config_source, self.args.seed)
            use_universal_if_needed(self.accelerator, resume_from_checkpoint, mesh)
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def _prepare_for_training(self, max_steps, train_dataloader, resume_from_checkpoint):
        """The resumable SP loader (as SFT), then the reference pass on the engine DeepSpeed just built."""
        model, loader = super()._prepare_for_training(max_steps, train_dataloader, resume_from_checkpoint)
        loader = resumable(loader)
        self.callback_handler.train_dataloader = loader
        if self.args.reference_log_probs == "precomputed":
            resuming = resume_from_checkpoint is not None
            sets = [("train", self.train_dataset)] + ([("eval", self.eval_dataset)] if self.eval_dataset else [])
            for split, dataset in sets:
                table = reference_table(self, model, dataset, split, self.sp_group(), resuming)
                self.reference_tables[split].update(table)
        return model, loader

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        """Also count the optimizer step's pairs on all ranks: the loss is their mean (each SP group's ranks hold
        the same rows, so the world's count is sp times the step's)."""
        batch_samples, num_items_in_batch = super().get_batch_samples(epoch_iterator, num_batches, device)
        local = sum(sum(batch["sequence_counts"]) // 2 for batch in batch_samples)
        total = self.accelerator.gather(torch.tensor([local], device=self.args.device)).sum().item()
        self._step_pairs = max(total // self.sp, 1)
        return batch_samples, num_items_in_batch

    def sp_group(self):
        if self.sp == 1:
            return None
        from deepspeed.utils import groups

        return groups._get_sequence_parallel_group()

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
        if mode == "train":  # a non-finite loss stops or skips the step (longctx/training/faults/guard.py)
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

    def evaluation_loop(
        self, dataloader, description, prediction_loss_only=None, ignore_keys=None, metric_key_prefix="eval"
    ):
        """Loss only (no logits are built), and `<prefix>_loss` the mean over the held-out pairs (upstream: a mean
        of batch means, which changes with how rows fall into batches)."""
        self.eval_pair_losses = []
        output = super().evaluation_loop(dataloader, description, True, ignore_keys, metric_key_prefix)
        loss = exact_eval_loss(self)
        if loss is not None:
            output.metrics[f"{metric_key_prefix}_loss"] = loss
            output.metrics[f"{metric_key_prefix}_pairs"] = len(self.eval_pair_losses) // self.sp
        return output

    # ---- saving

    def _save_checkpoint(self, model, trial):
        """Atomic, as the SFT trainer's (longctx/training/checkpoints/commit.py)."""
        save_atomically(self, lambda: super(LongContextDPOTrainer, self)._save_checkpoint(model, trial))

    def _save(self, output_dir=None, state_dict=None):
        """Also the effective model config beside a LoRA adapter (longctx/training/model_build.py)."""
        super()._save(output_dir, state_dict)
        if self.args.should_save:
            save_effective_config(self.accelerator.unwrap_model(self.model), output_dir or self.args.output_dir)
