"""A GRPO run resumed from a checkpoint samples, deals and trains its next step as the uninterrupted run would.

Two parts of TRL's GRPOTrainer state live in no checkpoint, and a resumed process restarted them:

- the prompt order: TRL's `RepeatSampler` shuffles with one generator seeded once, which advances by a permutation
  per pass and has no `set_epoch`, so a run resumed in epoch e > 0 drew epoch 0's prompts. `EpochRepeatSampler`
  draws pass e's order from the seed alone (the e permutations before it drawn and dropped: an uninterrupted run's
  order is TRL's, unchanged); its epoch comes from accelerate's `set_epoch` at each epoch start and, on resume,
  from the restored global step (a resume inside an epoch wraps the loader in accelerate's skip, through which
  `set_epoch` does not reach the sampler).
- the micro-step counter `_step` (TRL counts `training_step` calls from 0 in each process): it decides when TRL
  generates, which slice of a generation batch a micro-step trains, and seeds the dealing of prompt groups
  (batches.py). On resume it is set to the micro-steps the uninterrupted run had taken.

Both follow from the restored global step and the loader's length, so nothing new is saved and a checkpoint written
before this fix resumes exactly too. What still differs is said at resume: a checkpoint inside a generation's
micro-steps (`num_iterations` > 1, or `steps_per_generation` above the accumulation) has no buffered completions.
"""

import torch
from transformers import TrainerCallback
from trl.trainer.utils import RepeatSampler


class EpochRepeatSampler(RepeatSampler):
    """TRL's `RepeatSampler` whose pass e is an uninterrupted process's e-th pass (module docstring)."""

    epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        if self.shuffle and self.seed is not None:  # unseeded: TRL's own (nothing to reproduce)
            self.generator.manual_seed(self.seed)
            for _ in range(self.epoch):
                torch.randperm(self.num_samples, generator=self.generator)
        epoch = self.epoch
        yield from super().__iter__()
        self.epoch = epoch + 1  # a pass run to its end, as the generator would have advanced


def epoch_sampler(sampler: RepeatSampler) -> EpochRepeatSampler:
    """The same sampler as TRL built it, as an `EpochRepeatSampler`."""
    return EpochRepeatSampler(
        sampler.data_source,
        sampler.mini_repeat_count,
        sampler.batch_size,
        sampler.repeat_count,
        sampler.shuffle,
        sampler.seed,
    )


def micro_steps_taken(global_step: int, loader_length: int, accumulation: int) -> tuple[int, int]:
    """(epochs done, `training_step` calls) after `global_step` optimizer steps, as transformers' Trainer counts
    them: an epoch is `loader_length` micro-batches cut into steps of `accumulation` (the last one shorter)."""
    steps_per_epoch = max(loader_length // accumulation + int(loader_length % accumulation > 0), 1)
    epochs, within = divmod(global_step, steps_per_epoch)
    return epochs, epochs * loader_length + within * accumulation


class RestoreStepCounters(TrainerCallback):
    """On a resumed run's train begin (the state restored, no step run): the sampler's epoch and `_step`."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
        if state.global_step == 0 or train_dataloader is None:
            return
        epochs, micro_steps = micro_steps_taken(
            state.global_step, len(train_dataloader), args.gradient_accumulation_steps
        )
        self.trainer._step = micro_steps
        every = args.steps_per_generation * self.trainer.num_iterations
        if micro_steps % every:  # TRL keeps a generation's completions in memory only (`_buffered_inputs`)
            self.trainer.accelerator.print(
                f"[resume] step {state.global_step} ends inside a generation's {every} micro-steps "
                f"(steps_per_generation x num_iterations): the resumed step generates its completions anew with the "
                "restored weights, where the uninterrupted run reused the earlier ones; save at steps that end a "
                "generation for an exact resume"
            )
        sampler = getattr(self.trainer, "_train_sampler", None)
        if isinstance(sampler, EpochRepeatSampler):
            sampler.set_epoch(epochs)
