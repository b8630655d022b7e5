"""Score an answer without generation: teacher-forced exact match and mean answer log-probability.

The model reads the whole example, answer included (teacher forcing). The answer is right when every answer
token is the model's argmax at the position before it, and its mean log-probability says how close the model
came. Under SP each rank holds one contiguous shard of the sequence and scores only the answer tokens its
shard predicts; the three sums (answer tokens, tokens right, log-prob sum) are added over the SP group, so an
answer split across shards scores exactly as on one rank. `shard_sums` runs the model on one rank's shard; the
in-training slice (callback.py) and `make eval`'s worker both call it, so the two score the same way.
"""

from collections import defaultdict

import torch


def shift_labels(labels: list[int]) -> list[int]:
    """Position i predicts token i+1: the target at i is labels[i+1]; the last position predicts nothing."""
    return [*labels[1:], -100]


def shard(values: list[int], sp_rank: int, sp_size: int) -> list[int]:
    """This rank's contiguous slice of a sequence whose length is a multiple of sp (as the SP adapter cuts it)."""
    n = len(values) // sp_size
    return values[sp_rank * n : (sp_rank + 1) * n]


def dp_share(count: int, dp: int, dp_rank: int) -> list[tuple[int, bool]]:
    """(example index, keep) for each forward data-parallel group `dp_rank` runs: every dp-th example, the list
    padded to a multiple of dp with repeats of example 0 whose results are dropped.

    Why: under ZeRO-3 every forward all-gathers the parameters across all ranks, so every rank must run the same
    number of forwards; with a count not divisible by dp the short groups stop while the others still gather
    (gloo aborts with a collective mismatch, NCCL hangs until its timeout).
    """
    padded = count + (-count) % dp if count else 0
    return [(i if i < count else 0, i < count) for i in range(dp_rank, padded, dp)]


def answer_sums(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """[answer tokens, tokens whose argmax is the target, sum of target log-probs] for the scored positions.

    `logits` is [n, vocab] at the n positions that predict an answer token, `targets` the n tokens.
    """
    logp = torch.log_softmax(logits.float(), dim=-1)
    right = (logits.argmax(dim=-1) == targets).sum()
    picked = logp.gather(-1, targets[:, None]).sum()
    count = torch.tensor(len(targets), dtype=torch.float64)
    return torch.stack([count, right.double().cpu(), picked.double().cpu()])


def verdict(sums: torch.Tensor) -> dict:
    """An example's score from its (group-summed) sums: exact match and mean answer log-probability."""
    tokens, right, logp = (float(x) for x in sums)
    return {"exact": tokens > 0 and right == tokens, "logprob": logp / tokens if tokens else float("nan")}


def cells(results: list[dict]) -> list[dict]:
    """Per (task, length, depth): accuracy (share of exact answers) and the mean of the answers' log-probs."""
    groups = defaultdict(list)
    for r in results:
        groups[(r["task"], r["length"], r["depth"])].append(r)
    out = []
    for (task, length, depth), rows in sorted(groups.items()):
        out.append(
            {
                "task": task,
                "length": length,
                "depth": depth,
                "samples": len(rows),
                "accuracy": sum(r["exact"] for r in rows) / len(rows),
                "mean_logprob": sum(r["logprob"] for r in rows) / len(rows),
            }
        )
    return out


def unwrap(model):
    """The causal LM inside whatever wrapper accelerate put around it (a DeepSpeed engine's `module`)."""
    return getattr(model, "module", model)


def lm_parts(model):
    """(decoder, lm_head) of a causal LM, inside whatever wrapper accelerate put around it."""
    inner = unwrap(model)
    return inner.get_decoder(), inner.get_output_embeddings()


@torch.no_grad()
def shard_sums(model, example, sp: int, sp_rank: int, device) -> torch.Tensor:
    """This rank's [answer tokens, right, log-prob sum] for its shard of one example.

    Only the positions that predict an answer token go through the LM head, so no [sequence, vocab] logits
    are ever built: a 256K-token example costs a training step's forward.
    """
    decoder, head = lm_parts(model)
    ids = torch.tensor([shard(example.input_ids, sp_rank, sp)], device=device)
    pos = torch.tensor([shard(list(range(example.length)), sp_rank, sp)], device=device)
    targets = torch.tensor(shard(shift_labels(example.labels()), sp_rank, sp), device=device)
    hidden = decoder(input_ids=ids, position_ids=pos, use_cache=False).last_hidden_state[0]
    keep = targets != -100
    return answer_sums(head(hidden[keep]), targets[keep])
