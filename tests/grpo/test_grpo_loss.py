"""TRL's GRPO loss under SP: every loss type's normalisation across the SP group equals TRL's at sp=1.

Under SP an SP group trains as one data-parallel rank of TRL whose micro-batch is the union of its ranks' micro-batches
(longctx/training/rl/loss.py): each of the sp ranks runs TRL 1.16's own `GRPOTrainer._compute_loss` on the completions
it owns, with the world's process count, and DeepSpeed averages the gradients over all ranks. So the ranks' losses
must sum to sp times the loss TRL computes at sp=1 on the whole micro-batch, values and gradients with respect to the
per-token log-probs. Here TRL's real `_compute_loss` runs on a stand-in trainer (its attributes, the per-token
log-probs as a leaf tensor), once with all completions on one process and once split over sp virtual ranks, for
every loss type TRL computes, with the KL term, old-policy ratios away from 1 and unequal completion lengths.
`bnpo` (a local-batch token mean) needs the trainer's group scale; without it the sum is off (the guard's check).
"""

from types import SimpleNamespace

import pytest
import torch
from trl import GRPOTrainer

from longctx.config.trainers.rl import LOSS_TYPES
from longctx.training.rl.loss import bnpo_scale, local_tokens

SP, PER_RANK, WIDTH, GA, STEPS_PER_GENERATION = 4, 2, 7, 2, 2


class Accelerator:
    """What `_compute_loss` asks of the accelerator, for one process standing for `num_processes` (the metrics'
    reductions are not under test)."""

    def __init__(self, num_processes: int):
        self.num_processes = num_processes

    def reduce(self, tensor, reduction="sum"):
        return tensor

    def gather(self, tensor):
        return tensor

    gather_for_metrics = gather


def stand_in(loss_type: str, num_processes: int, logps: torch.Tensor):
    """The attributes TRL 1.16's `_compute_loss` reads, with `_get_per_token_logps_and_entropies` returning
    `logps` (rows of the batch it is asked for: `rows` on the inputs)."""
    args = SimpleNamespace(
        use_bias_correction_kl=True, delta=None, sapo_temperature_pos=1.0, sapo_temperature_neg=1.05,
        vespo_k_pos=2.0, vespo_lambda_pos=3.0, vespo_k_neg=3.0, vespo_lambda_neg=2.0,
        steps_per_generation=STEPS_PER_GENERATION, entropy_target=0.2,
    )  # fmt: skip
    trainer = SimpleNamespace(
        args=args, loss_type=loss_type, beta=0.1, epsilon_low=0.2, epsilon_high=0.28, importance_sampling_level=(
            "sequence" if loss_type == "luspo" else "token"
        ), top_entropy_quantile=1.0, off_policy_mask_threshold=None, use_vllm=False,
        vllm_importance_sampling_correction=False, current_gradient_accumulation_steps=GA, max_completion_length=WIDTH,
        accelerator=Accelerator(num_processes), _entropy_bonus_enabled=False, aux_loss_enabled=False,
        model=SimpleNamespace(training=True), _metrics={"train": {}, "eval": {}},
        get_gamma_weights=GRPOTrainer.get_gamma_weights, get_off_policy_mask=GRPOTrainer.get_off_policy_mask,
    )  # fmt: skip
    trainer._metrics = {"train": _AnyList(), "eval": _AnyList()}

    def scores(model, input_ids, attention_mask, logits_to_keep, **kwargs):
        rows = input_ids[:, 0].long()  # the batch's rows of `logps` ride in the first prompt token
        return logps[rows], torch.ones_like(logps[rows]), None

    trainer._get_per_token_logps_and_entropies = scores
    return trainer


class _AnyList(dict):
    def __missing__(self, key):
        self[key] = []
        return self[key]


def batch(rows: list[int], everything: dict) -> dict:
    """The inputs of the completions `rows` (a rank's share), with their rows' index as the prompt."""
    out = {k: v[rows] for k, v in everything.items() if k != "num_items_in_batch"}
    out["prompt_ids"] = torch.tensor(rows)[:, None]
    out["prompt_mask"] = torch.ones(len(rows), 1, dtype=torch.long)
    out["num_items_in_batch"] = everything["num_items_in_batch"]
    return out


def inputs(n: int) -> dict:
    torch.manual_seed(5)
    lengths = torch.tensor([7, 1, 4, 6, 2, 7, 3, 5])[:n]
    mask = (torch.arange(WIDTH)[None] < lengths[:, None]).long()
    return {
        "completion_ids": torch.randint(3, 50, (n, WIDTH)),
        "completion_mask": mask,
        "advantages": torch.randn(n),
        "old_per_token_logps": -torch.rand(n, WIDTH) * 3,
        "ref_per_token_logps": -torch.rand(n, WIDTH) * 3,
        # the generation batch's tokens over every process: STEPS_PER_GENERATION micro-batches of this size
        "num_items_in_batch": mask.sum() * STEPS_PER_GENERATION,
    }


def losses(loss_type: str, scale_bnpo: bool = True):
    """(TRL's loss at sp=1 on the whole micro-batch, the sum of the sp ranks' losses), and the gradients of each
    with respect to the per-token log-probs."""
    n = SP * PER_RANK
    everything = inputs(n)
    logps = (everything["old_per_token_logps"] + 0.3 * torch.randn(n, WIDTH)).requires_grad_()
    whole = GRPOTrainer._compute_loss(stand_in(loss_type, 1, logps), None, batch(list(range(n)), everything))
    (grad_whole,) = torch.autograd.grad(whole, logps)
    total = 0
    for r in range(SP):
        mine = batch(list(range(r * PER_RANK, (r + 1) * PER_RANK)), everything)
        loss = GRPOTrainer._compute_loss(stand_in(loss_type, SP, logps), None, mine)
        if loss_type == "bnpo" and scale_bnpo:
            loss = loss * bnpo_scale(local_tokens(mine), local_tokens(everything), SP)  # the group's sum: all
        total = total + loss
    (grad_split,) = torch.autograd.grad(total, logps)
    return whole, total, grad_whole, grad_split


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_sp_ranks_sum_to_sp_times_trl_at_sp1(loss_type):
    whole, total, grad_whole, grad_split = losses(loss_type)
    assert whole.abs() > 1e-3 and grad_whole.abs().max() > 1e-4, "a real loss"
    assert torch.allclose(total, SP * whole, rtol=1e-5), (total.item(), SP * whole.item())
    assert torch.allclose(grad_split, SP * grad_whole, rtol=1e-5, atol=1e-7)


def test_bnpo_without_the_group_scale_is_not_trl_at_sp1():
    whole, total, _, _ = losses("bnpo", scale_bnpo=False)
    assert abs(total.item() - SP * whole.item()) > 1e-3 * abs(SP * whole.item())
