"""The retrieval scorer against hand-computed numbers, with the answer split across two SP shards."""

import math
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoTokenizer

from longctx.training.retrieval.scoring import cells, shard_sums, verdict
from longctx.training.retrieval.tasks import TASKS, Example, build_example

LN3 = math.log(3)


class OneHot(torch.nn.Module):
    """A 'decoder' whose hidden state is the one-hot input token, so the head's rows are the logits."""

    def forward(self, input_ids, position_ids, use_cache):
        return SimpleNamespace(last_hidden_state=torch.nn.functional.one_hot(input_ids, 4).float())


class HandModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.decoder, self.head = OneHot(), torch.nn.Linear(4, 4, bias=False)
        with torch.no_grad():
            self.head.weight.zero_()
            self.head.weight[1, 3] = LN3  # after token 3 the logits are [0, ln3, 0, 0]: p(1) = 3/6, the argmax
            self.head.weight[0, 1] = LN3  # after token 1 they are [ln3, 0, 0, 0]: p(2) = 1/6, argmax is 0

    def get_decoder(self):
        return self.decoder

    def get_output_embeddings(self):
        return self.head


# The answer is tokens [1, 2] at positions 4-5, predicted from positions 3 (token 3) and 4 (token 1): at sp=2
# position 3 is the last of shard 0 and position 4 the first of shard 1.
EXAMPLE = Example("passkey", 8, 0.5, 0, [0, 1, 2, 3, 1, 2, 0, 0], answer_start=4, answer_len=2)


def test_an_answer_split_across_sp_shards_scores_as_on_one_rank():
    model = HandModel()
    whole = shard_sums(model, EXAMPLE, 1, 0, "cpu")
    halves = [shard_sums(model, EXAMPLE, 2, r, "cpu") for r in (0, 1)]
    assert [h[0].item() for h in halves] == [1, 1]  # one answer token in each shard
    assert whole.tolist() == pytest.approx([2, 1, math.log(1 / 2) + math.log(1 / 6)])
    assert (halves[0] + halves[1]).tolist() == pytest.approx(whole.tolist())  # the SP all-reduce is this sum
    result = verdict(halves[0] + halves[1])
    assert result["exact"] is False  # the second token's argmax is wrong
    assert result["logprob"] == pytest.approx(-1.2424533, abs=1e-6)  # (ln 1/2 + ln 1/6) / 2


def test_exact_match_needs_every_answer_token():
    model = HandModel()
    first_only = Example("passkey", 8, 0.5, 0, [0, 1, 2, 3, 1, 2, 0, 0], answer_start=4, answer_len=1)
    assert verdict(shard_sums(model, first_only, 2, 0, "cpu") + shard_sums(model, first_only, 2, 1, "cpu")) == {
        "exact": True,
        "logprob": pytest.approx(math.log(0.5)),
    }


def test_cells_average_examples_per_length_and_depth():
    rows = [
        {"task": "passkey", "length": 512, "depth": 0.0, "exact": True, "logprob": -0.5},
        {"task": "passkey", "length": 512, "depth": 0.0, "exact": False, "logprob": -2.5},
        {"task": "passkey", "length": 512, "depth": 1.0, "exact": True, "logprob": -0.1},
    ]
    assert cells(rows) == [
        {"task": "passkey", "length": 512, "depth": 0.0, "samples": 2, "accuracy": 0.5, "mean_logprob": -1.5},
        {"task": "passkey", "length": 512, "depth": 1.0, "samples": 1, "accuracy": 1.0, "mean_logprob": -0.1},
    ]


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("depth", [0.0, 0.5, 1.0])
def test_examples_have_the_exact_length_and_end_with_the_answer(task, depth):
    tok = AutoTokenizer.from_pretrained("recipes/assets/tiny-llama")
    ex = build_example(tok, task, 1024, depth, sample=0)
    assert len(ex.input_ids) == 1024 and ex.answer_start + ex.answer_len == 1024
    answer = tok.decode(ex.input_ids[ex.answer_start :]).strip()
    text = tok.decode(ex.input_ids[: ex.answer_start])
    assert all(value in text for value in answer.split(", "))  # every asked value is in the context
    if task == "passkey":
        at = text.index(answer) / len(text)
        assert abs(at - depth) < 0.1  # the needle sits at the asked depth of the context


@pytest.mark.parametrize("count", [0, 1, 5, 6, 9])
@pytest.mark.parametrize("dp", [1, 2, 4])
def test_dp_share_runs_as_many_forwards_on_every_group_and_keeps_each_example_once(count, dp):
    """Every SP group runs the same number of forwards (ZeRO-3 gathers on all ranks at each), and the kept ones
    are every example exactly once."""
    from longctx.training.retrieval.scoring import dp_share

    shares = [dp_share(count, dp, rank) for rank in range(dp)]
    assert len({len(s) for s in shares}) == 1
    assert sorted(i for s in shares for i, keep in s if keep) == list(range(count))
    assert all(0 <= i < max(count, 1) for s in shares for i, _ in s)
