"""Group rows: the per-token log-probs of completions laid out in one row (each `prompt + completion` a document, or a
group's prompt once with its completions as branches) equal those of every `prompt + completion` run alone.

In process, no SP: the tiny Llama with the isolated sdpa (longctx/training/attention/isolation.py), TRL's fused LM head
at a sampling temperature, and the trainer's scorer (longctx/training/rl/log_probs.py) on TRL's own batch layout
(prompts left-padded, completions right-padded). The reference runs each sequence alone through plain transformers
and takes log-softmax(logits / T) at each completion token. Values and gradients must agree; without the
shared-prefix layout (plain isolation) the branches lose their prompt, and without isolation the completions see
each other: both are caught here. SP is proven by the launched parity tests (tests/parity/test_grpo_parity.py).
"""

import contextlib

import numpy as np
import pytest
import torch

from longctx.training.attention.document_layout import install_document_layout, install_shared_prefix_layout
from longctx.training.attention.isolation import set_isolation_enabled
from longctx.training.rl.layout import IGNORE, Sequence, lay_out, row_tokens
from longctx.training.rl.log_probs import GroupScorer, chunks

TEMPERATURE = 0.7
PAD = 2
# two prompts (one of them twice in a row, as TRL's sampler repeats it), completions of unequal length, one empty
SEQUENCES = [
    Sequence(tuple(range(10, 31)), (40, 41, 42, 1)),
    Sequence(tuple(range(10, 31)), (50,)),
    Sequence(tuple(range(60, 69)), (70, 71, 72, 73, 74, 75)),
    Sequence(tuple(range(10, 31)), (80, 81)),
    Sequence(tuple(range(60, 69)), ()),
]


def tiny_llama(shared: bool):
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    config = LlamaConfig(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8, intermediate_size=45,
        num_hidden_layers=2, vocab_size=96, attn_implementation="sdpa", use_cache=False,
    )  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    add_fused_lm_head(model, temperature=TEMPERATURE, outputs=("log_probs", "entropy"))
    install_document_layout(model, None, "sdpa")
    if shared:
        install_shared_prefix_layout(model)
    return model


def trl_batch(sequences):
    """TRL's [B, P + C] input_ids and attention_mask: prompts left-padded, completions right-padded."""
    width_p = max(len(s.prompt) for s in sequences)
    width_c = max(len(s.completion) for s in sequences)
    ids, mask = [], []
    for s in sequences:
        lp, lc = width_p - len(s.prompt), width_c - len(s.completion)
        ids.append([PAD] * lp + list(s.prompt) + list(s.completion) + [PAD] * lc)
        mask.append([0] * lp + [1] * len(s.prompt) + [1] * len(s.completion) + [0] * lc)
    return torch.tensor(ids), torch.tensor(mask), width_c


def alone(model, sequences, width):
    """[B, width] log-probs of each completion token, every `prompt + completion` run alone (no head patch)."""
    out = torch.zeros(len(sequences), width)
    for b, s in enumerate(sequences):
        if not s.completion:
            continue
        ids = torch.tensor([s.prompt + s.completion])
        logits = model(input_ids=ids).logits[0, :-1].float() / TEMPERATURE
        picked = logits.log_softmax(-1).gather(-1, ids[0, 1:, None])[:, 0]
        out[b, : len(s.completion)] = picked[len(s.prompt) - 1 :]
    return out


def scored(model, shared: bool, per_rank=None):
    ids, mask, width = trl_batch(SEQUENCES)
    scorer = GroupScorer(None, 1, 0, None, shared, PAD, contextlib.nullcontext)
    return scorer.token_log_probs(model, ids, mask, width, per_rank, entropy=True), width


@pytest.mark.parametrize("shared", [False, True], ids=["documents", "shared-prefix"])
@pytest.mark.parametrize("per_rank", [None, 2], ids=["one-row", "rows-of-2"])
def test_group_rows_equal_each_completion_alone(isolation, shared, per_rank):
    model = tiny_llama(shared)
    (logps, entropies), width = scored(model, shared, per_rank)
    expected = alone(model, SEQUENCES, width)
    mask = torch.tensor([[j < len(s.completion) for j in range(width)] for s in SEQUENCES])
    assert torch.allclose(logps, expected, atol=1e-5), (logps - expected).abs().max()
    assert (logps[~mask] == 0).all() and (entropies[mask] > 0).all()
    grad = torch.autograd.grad(logps.sum(), model.model.layers[0].self_attn.q_proj.weight)[0]
    grad_alone = torch.autograd.grad(expected.sum(), model.model.layers[0].self_attn.q_proj.weight)[0]
    assert torch.allclose(grad, grad_alone, rtol=1e-4, atol=1e-6)


def test_without_isolation_completions_see_each_other(isolation):
    """The negative control: the same rows with isolation switched off (stock sdpa over the row) are wrong."""
    model = tiny_llama(shared=True)
    (logps, _), _ = scored(model, shared=True)
    set_isolation_enabled(False)
    try:
        (leaky, _), _ = scored(model, shared=True)
    finally:
        set_isolation_enabled(True)
    assert (leaky - logps).abs().max() > 1e-2


def test_without_the_branch_rule_a_branch_loses_its_prompt(isolation):
    """Shared rows read with plain isolation (no shared-prefix layout): the second branch is cut off its prompt."""
    (logps, _), _ = scored(tiny_llama(shared=True), shared=True)
    (cut, _), _ = scored(tiny_llama(shared=False), shared=True)
    assert (cut - logps).abs().max() > 1e-2


def test_layout_counts_what_sharing_saves():
    """Tokens of the row with and without sharing: n x P + sum(C - 1) against P - 1 + n + sum(C - 1)."""
    unshared, shared = row_tokens(SEQUENCES, False), row_tokens(SEQUENCES, True)
    assert unshared == 3 * 21 + (3 + 0 + 1) + 9 + 5
    assert shared == 20 + 3 + (3 + 0 + 1) + 9 + 5
    assert lay_out(SEQUENCES, True, PAD, 4).real == shared and lay_out(SEQUENCES, False, PAD, 4).real == unshared


def test_a_row_pads_to_equal_shards_and_labels_only_completions():
    row = lay_out(SEQUENCES, True, PAD, 8)
    assert len(row) % 8 == 0 and row.real < len(row)
    labelled = row.shift_labels != IGNORE
    assert labelled.sum() == sum(len(s.completion) for s in SEQUENCES)
    assert (row.owner[labelled] >= 0).all() and (row.owner[~labelled] == -1).all()
    for i, s in enumerate(SEQUENCES):
        mine = row.owner == i
        assert row.shift_labels[mine].tolist() == list(s.completion)
        assert np.array_equal(row.index[mine], np.arange(len(s.completion)))


def test_rows_keep_a_prompt_group_together():
    assert chunks(SEQUENCES, None) == [[0, 1, 3, 2, 4]]
    assert chunks(SEQUENCES, 2) == [[0, 1], [3, 2], [4]]
