"""What a resumed GRPO process rebuilds without a checkpoint entry (longctx/training/rl/resume.py): the prompt order
of pass e and the micro-step counter. The launched proof (a resumed step equal to the uninterrupted one) is
tests/grpo/test_grpo_resume.py (slow); these pin the two pieces against TRL's own sampler and transformers' own
count."""

import pytest
from trl.trainer.utils import RepeatSampler

from longctx.training.rl.resume import EpochRepeatSampler, epoch_sampler, micro_steps_taken

ARGS = {"data_source": list(range(12)), "mini_repeat_count": 2, "batch_size": 3, "repeat_count": 2, "seed": 5}


def passes(sampler, count: int) -> list[list[int]]:
    return [list(sampler) for _ in range(count)]


def test_uninterrupted_order_is_trls():
    assert passes(epoch_sampler(RepeatSampler(**ARGS)), 4) == passes(RepeatSampler(**ARGS), 4)


@pytest.mark.parametrize("epoch", [1, 3])
def test_a_fresh_sampler_set_to_epoch_e_draws_pass_e(epoch):
    """A resumed process builds its sampler afresh: TRL's then draws pass 0's order again; this one pass e's."""
    uninterrupted = passes(RepeatSampler(**ARGS), epoch + 2)
    fresh = EpochRepeatSampler(**ARGS)
    fresh.set_epoch(epoch)
    assert passes(fresh, 2) == uninterrupted[epoch:]
    assert list(RepeatSampler(**ARGS)) != uninterrupted[epoch]  # what a resume drew before


def test_the_epoch_set_again_at_each_epoch_start_changes_nothing():
    """accelerate's `set_epoch(e)` at epoch e's start (where it reaches the sampler) agrees with the own count."""
    uninterrupted = passes(RepeatSampler(**ARGS), 3)
    sampler = EpochRepeatSampler(**ARGS)
    seen = []
    for epoch in range(3):
        sampler.set_epoch(epoch)
        seen.append(list(sampler))
    assert seen == uninterrupted


@pytest.mark.parametrize(
    "global_step, loader_length, accumulation, expected",
    [
        (2, 8, 2, (0, 4)),  # inside epoch 0: 2 steps of 2 micro-batches
        (2, 4, 4, (2, 8)),  # an epoch a step (the CPU rehearsal): 2 epochs done
        (4, 10, 4, (1, 14)),  # epochs of 4 + 4 + 2 micro-batches: epoch 0 (10) and one step of epoch 1
        (3, 10, 4, (1, 10)),
    ],
)
def test_micro_steps_taken_counts_as_the_trainer(global_step, loader_length, accumulation, expected):
    assert micro_steps_taken(global_step, loader_length, accumulation) == expected


class Trainer:
    """What the callback reads and sets on the GRPO trainer, without building one."""

    def __init__(self, num_iterations: int):
        self.num_iterations, self._step, self.printed = num_iterations, 0, []
        self._train_sampler = EpochRepeatSampler(**ARGS)
        self.accelerator = self

    def print(self, line: str) -> None:
        self.printed.append(line)


@pytest.mark.parametrize("num_iterations, note", [(1, False), (2, True)])
def test_resume_sets_the_counters_and_says_when_it_regenerates(num_iterations, note):
    """Step 3 of 4-micro-batch epochs at accumulation 2: epoch 1, 6 micro-steps. With `num_iterations: 2` a
    generation spans 4 micro-steps, so 6 is inside one: the resumed step generates anew, and the run says so."""
    from types import SimpleNamespace

    from longctx.training.rl.resume import RestoreStepCounters

    trainer = Trainer(num_iterations)
    args = SimpleNamespace(gradient_accumulation_steps=2, steps_per_generation=2)
    RestoreStepCounters(trainer).on_train_begin(args, SimpleNamespace(global_step=3), None, train_dataloader=[0] * 4)
    assert (trainer._step, trainer._train_sampler.epoch) == (6, 1)
    assert bool(trainer.printed) == note, trainer.printed
