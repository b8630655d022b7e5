"""TRL 1.16's GRPOTrainer at long context under DeepSpeed Ulysses SP, as one class.

Upstream, GRPOTrainer refuses SP (its config's `parallelism_config` check) and has no SP path: it scores each
`prompt + completion` as a padded row on one rank, and under accelerate's Ulysses registration its generation and
scoring would run the SP all-to-all on rank-local, unequal batches. Each fix is an override of the method that has
the gap, listed with the fingerprint of the method it overrides in longctx/training/patches/grpo_overrides.py; the
mechanisms live in modules of their own (longctx/training/rl/):

- `_get_per_token_logps_and_entropies`: the SP group's sequences laid out as group rows (a prompt once, its
  completions as branches, with `prefix_sharing`), sharded, scored through TRL's fused head and all-gathered per
  token (log_probs.py, layout.py); TRL's `_compute_loss` then runs unchanged, for the policy, the old policy and
  the reference, every loss type (`bnpo` normalised over the SP group's micro-batch: loss.py);
- `_generate_single_turn`: transformers generation on each rank's own prompts, SP attention off while decoding, a
  prompt's prefill once for its completions (generation.py); vLLM stays TRL's;
- `_prepare_inputs`: with prefix sharing, micro-steps dealt whole prompt groups across the SP group (batches.py);
- `_get_train_sampler` and a callback: a resumed run's prompt order and micro-step counter are the uninterrupted
  run's (resume.py);
- the reference of the KL term built from the recipe like the policy (reference.py); the SP data path without
  DeepSpeed's SP dataloader adapter (each rank loads its own prompts; its group trains the union);
- the shared base's (longctx/training/trainer_base.py) per-model fixes and run callbacks, universal and atomic
  checkpoints, as for DPO; its SP-group data path is off (`loads_sp_group_rows`): upstream's loaders and eval.
"""

import torch
from accelerate.utils import is_peft_model
from trl import GRPOTrainer
from trl.models.utils import unwrap_model_for_generation

from longctx.config.recipe import RecipeError
from longctx.training.rl.batches import deal_groups
from longctx.training.rl.generation import generate_shared_prefill
from longctx.training.rl.log_probs import GroupScorer
from longctx.training.rl.loss import bnpo_group_scale
from longctx.training.rl.reference import prepare_reference
from longctx.training.rl.resume import RestoreStepCounters, epoch_sampler
from longctx.training.rl.support import refuse_unsupported
from longctx.training.rl.ulysses import attention_before_sp, local_attention
from longctx.training.sequence_parallel.loss_weighting import GRADIENT_DIVISOR, set_gradient_divisor
from longctx.training.sequence_parallel.registration import rows_per_forward
from longctx.training.trainer_base import LongContextTrainerBase


class LongContextGRPOTrainer(LongContextTrainerBase, GRPOTrainer):
    """`LongContextGRPOTrainer(..., recipe=recipe, model_args=model_args, ref_model=...)`; `args` is a
    GRPORecipeConfig; `ref_model` the frozen starting model when `beta` > 0 without LoRA."""

    loads_sp_group_rows = False  # every rank loads and generates its own prompts; rows are built after generation

    def __init__(self, *args, recipe, model_args, ref_model=None, **kwargs):
        self.recipe, self.model_args = recipe, model_args
        config = kwargs["args"]
        beta, config.beta = config.beta, 0.0  # TRL would load a second model from the policy's path: reference.py
        try:
            super().__init__(*args, **kwargs)
        finally:
            config.beta = beta
        self.beta = beta
        self.uses_adapter_reference = is_peft_model(self.model)
        refuse_unsupported(self, self.sp)
        if beta and not self.uses_adapter_reference:
            self.ref_model = prepare_reference(self, ref_model)
        if self.sp > 1:  # what DeepSpeed divides the summed gradients by decides the gathers' gradient
            set_gradient_divisor(self.accelerator, self.sp)
        self.attention_name = self.model.config._attn_implementation
        self.attention_without_sp = attention_before_sp(self.attention_name)  # before accelerate registers Ulysses
        self.install_model_fixes()  # the policy: prepare_model, as SFT's (prefix sharing too)
        self.add_run_callbacks()  # throughput/MFU/memory, topology.json, optimizer report
        self._scorer = None
        self.add_callback(RestoreStepCounters(self))  # a resumed run's `_step` and prompt order (rl/resume.py)

    def scorer(self) -> GroupScorer:
        """How this rank scores its SP group's rows (built once the SP group exists: after accelerate's prepare)."""
        if self._scorer is None:
            group = self.sp_group()
            rank = 0 if group is None else torch.distributed.get_rank(group)
            divisor = getattr(self.accelerator, GRADIENT_DIVISOR, None)
            pad = self._tokenizer.pad_token_id
            shared = self.args.prefix_sharing
            self._scorer = GroupScorer(group, self.sp, rank, divisor, shared, pad, self.accelerator.autocast)
        return self._scorer

    # ---- scoring: per-token log-probs exact across the SP group (log_probs.py)

    def _get_per_token_logps_and_entropies(
        self,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        batch_size=None,
        compute_entropy=False,
        compute_aux_loss=False,
        **multimodal,
    ):
        """TRL's [B, completion tokens] log-probs (and entropies) of this rank's sequences, from group rows."""
        if compute_aux_loss or any(value is not None for value in multimodal.values()):
            raise RecipeError(self.recipe.config_source, ["GRPO scores text rows without the MoE router aux loss"])
        scorer = self.scorer()
        logps, entropies = scorer.token_log_probs(
            model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy
        )
        if (
            torch.is_grad_enabled()
        ):  # the policy's scoring of a micro-step: what its rows cost with and without sharing
            mode = "train" if self.model.training else "eval"
            for name, tokens in scorer.last_tokens.items():
                self._metrics[mode][f"prefix_sharing/{name}"].append(float(tokens))
        return logps, entropies, None

    def _compute_loss(self, model, inputs):
        """TRL's loss (every loss type) on exact per-token log-probs; `bnpo` normalised over the SP group's
        micro-batch (loss.py); the run guard sees the training loss."""
        loss = super()._compute_loss(model, inputs)
        if self.loss_type == "bnpo" and self.sp > 1:
            loss = loss * bnpo_group_scale(inputs, self.sp_group(), self.sp)
        if self.model.training:  # a non-finite loss stops or skips the step (longctx/training/faults/run_guard.py)
            self.run_guard.see_loss(loss)
        return loss

    # ---- generation: each rank its own prompts, SP off while decoding (generation.py)

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        """vLLM: TRL's. transformers: one prefill per distinct prompt, its copies decoded from it, attention local."""
        if self.use_vllm:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations)
        self.check_prompt_lengths(prompt_ids)
        with (
            unwrap_model_for_generation(
                self.model_wrapped,
                self.accelerator,
                gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                generation_kwargs=self.generation_kwargs,
                gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs,
            ) as unwrapped,
            torch.no_grad(),
            self._dist.summon_full_params(self.model_wrapped, recurse=False),
            local_attention(self.attention_name, self.attention_without_sp),
        ):
            completions = generate_shared_prefill(
                unwrapped, prompt_ids, self.generation_config, self.eos_token_ids, self.accelerator.device
            )
        return completions, None

    def check_prompt_lengths(self, prompt_ids) -> None:
        """A prompt longer than `max_prompt_length` is refused, never trained on (the plan sized memory for it)."""
        limit = self.args.max_prompt_length
        longest = max((len(p) for p in prompt_ids), default=0)
        if limit is not None and longest > limit:
            msg = (
                f"`max_prompt_length` is {limit}, but a prompt of {longest} tokens reached generation; prepare the "
                "data with this recipe (`make data` drops longer prompts) or raise `max_prompt_length`"
            )
            raise RecipeError(self.recipe.config_source, [msg])

    def _prepare_inputs(self, generation_batch):
        """TRL's buffering of a generation batch over its micro-steps; with prefix sharing the SP group's batches
        are dealt whole prompt groups per micro-step instead of TRL's completion-by-completion shuffle."""
        if not (self.model.training and self.args.prefix_sharing):
            return super()._prepare_inputs(generation_batch)
        steps = self.args.steps_per_generation
        if self._step % (steps * self.num_iterations) == 0 or self._buffered_inputs is None:
            scored = self._generate_and_score_completions(generation_batch)
            self._buffered_inputs = deal_groups(
                scored,
                steps,
                self.args.per_device_train_batch_size,
                self.sp_group(),
                self.scorer().sp_rank,
                self.args.seed + self._step,
                self._tokenizer.pad_token_id,
            )
        return self._buffered_inputs[self._step % steps]

    # ---- the data path under SP: each rank its own prompts, no SP dataloader adapter

    def _get_train_sampler(self, dataset=None):
        """TRL's prompt sampler, whose pass e is drawn from the seed alone, so a resumed run's is too (resume.py)."""
        self._train_sampler = epoch_sampler(super()._get_train_sampler(dataset))
        return self._train_sampler

    def get_sp_size(self) -> int:
        """1 for the Trainer's batch accounting: every rank loads and generates its own prompts (no SP adapter
        repeats a batch over the group), so the data-parallel width of the loader is the world."""
        return 1

    def engine_registration(self):
        """Ulysses registered for one group row per forward (rl/ulysses.py): a GRPO micro-step is one group row."""
        return rows_per_forward(1)

    def loader_after_engine(self, loader):
        """The plain loader: the Trainer wraps it in DeepSpeed's SP adapter, which shards tensor batches along the
        sequence, where GRPO's batches are prompts and its rows are built after generation."""
        from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPDataLoaderAdapter

        return loader.dl if isinstance(loader, UlyssesSPDataLoaderAdapter) else loader
