"""The reward a GRPO rehearsal adds to the recipe's own.

A miniature with random weights never finds a passkey or an answer, so the recipe's verifiable rewards are 0 for
every completion: every advantage is 0, every loss and gradient is 0, and the rehearsal's resume check would compare
zeros. This reward differs within a group (it reads the sampled token ids), so the miniature trains and its steps
can be compared; the recipe's own reward functions still run beside it.
"""

REHEARSAL_REWARD = "longctx.cpu_rehearsal.rewards:token_mix"


def token_mix(prompts, completions, completion_ids, **kwargs) -> list[float]:
    """The share of even token ids in each completion plus a tenth of its length (TRL's reward signature)."""
    return [sum(t % 2 == 0 for t in ids) / max(len(ids), 1) + len(ids) / 10 for ids in completion_ids]
