"""What a resumed GRPO process rebuilds without a checkpoint entry (longctx/training/rl/resume.py): the prompt order
of pass e and the micro-step counter. The launched proof (a resumed step equal to the uninterrupted one) is
tests/test_grpo_resume.py (slow); these pin the two pieces against TRL's own sampler and transformers' own count."""

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
