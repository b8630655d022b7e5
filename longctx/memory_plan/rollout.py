"""What online RL (`trainer: grpo`) adds to the plan: the training row of a micro-step, and generation's memory.

Training: a micro-step lays out the union of its SP group's micro-batches as one row (longctx/training/rl/): m = sp x
`per_device_train_batch_size` completions, dealt in whole prompt groups with prefix sharing. Each completion alone
costs its prompt again; shared, a prompt of P tokens is computed once for its completions:

    alone:  m x (P + C) tokens;     shared:  (prompts in the row) x P + m x C

with C = `max_completion_length`; that row is what the memory plan sizes (one sequence of that many tokens).

Generation holds, per rank, the model's weights whole (ZeRO-3 gathers them, or vLLM loads its own bf16 copy) and a
KV cache of 2 x layers x KV heads x head_dim values a token. A prompt's G completions need P + G x C tokens of it
when the prompt's cache is shared (vLLM's prefix caching, on by default in its V1 engine) and G x (P + C) when each
completion holds its own copy (transformers' generate, which the trainer's shared prefill feeds one copy per
completion). vLLM colocated on the training GPUs reserves `vllm_gpu_memory_utilization` of each GPU for its weights
and cache, beside training's plan; in server mode it runs on GPUs of its own, outside the recipe's mesh.
"""

import math
from dataclasses import dataclass

from longctx.memory_plan.arch import Arch

GIB = 2**30
BF16 = 2


def group_tokens(prompt_tokens: int, prompts: int, generations: int, completion_length: int) -> dict:
    """Training-forward tokens of `prompts` groups (prompts totalling `prompt_tokens`), each of `generations`
    completions of at most `completion_length` tokens: each completion alone, and prefix-shared."""
    unshared = generations * (prompt_tokens + prompts * completion_length)
    shared = prompt_tokens + prompts * generations * completion_length
    return {"tokens_unshared": unshared, "tokens_shared": shared, "saving": round(1 - shared / max(unshared, 1), 6)}


def row_prompts(completions: int, generations: int) -> int:
    """Prompts a micro-step row holds at most: whole groups when `completions` is a multiple of G, else one more
    (a group split between two micro-steps), never more than its completions."""
    whole = math.ceil(completions / generations)
    return min(whole + (1 if completions % generations else 0), completions)


def training_row(prompt: int, completion: int, generations: int, completions: int, shared: bool) -> int:
    """Tokens of one micro-step row of `completions` completions (the SP group's union)."""
    if shared:
        return row_prompts(completions, generations) * prompt + completions * completion
    return completions * (prompt + completion)


@dataclass(frozen=True)
class Generation:
    """Generation's memory per rank (GiB): the weights it runs and the KV cache of one prompt's group."""

    weights_gib: float
    kv_per_token_kib: float
    group_tokens: int  # KV tokens of one prompt's G completions
    kv_gib: float

    @property
    def total_gib(self) -> float:
        return self.weights_gib + self.kv_gib


def generation(config: dict, prompt: int, completion: int, generations: int, shared_cache: bool, tp: int = 1):
    """The weights (bf16, split over `tp`) and the KV cache of one prompt's `generations` completions."""
    arch = Arch.from_config(config)
    per_token = 2 * arch.layers * arch.kv_heads * arch.head_dim * BF16 / tp
    tokens = prompt + generations * completion if shared_cache else generations * (prompt + completion)
    return Generation(arch.params * BF16 / tp / GIB, per_token / 1024, tokens, tokens * per_token / GIB)
