"""Sampling completions with transformers on each rank (CPU, tests, and GPUs without vLLM), under Ulysses SP.

How the SP group shares the work: each rank generates the completions of the prompts it loaded itself (TRL's
sampler hands every rank of the world its own slice of the generation batch: `per_device_train_batch_size x
steps_per_generation` prompt copies), so no completion is sampled twice and no rank waits for another while
decoding; a group of G copies of one prompt lands on one rank whenever `per_device_train_batch_size x
steps_per_generation` is a multiple of G. The training forward then lays out the SP group's union
(longctx/training/rl/log_probs.py). The cost: a rank holds the whole model for generation (ZeRO-3 gathers it, TRL's
`ds3_gather_for_generation`), and the group exchanges token ids (an all-gather of ints) before each forward.

While a rank decodes alone its attention is the plain one, not Ulysses' (longctx/training/rl/ulysses.py).

Long prompts: each distinct prompt is prefilled once (its last token left for `generate`), the cache is repeated for
its copies, and the copies decode together from it, where TRL's transformers path pads G copies and prefills each
(G x the prompt's prefill compute). The cache itself is still G copies (transformers' caches do not share blocks;
vLLM's prefix caching on GPUs does). The model is in eval mode while sampling (no dropout: as vLLM samples).
A cache with a layer that cannot repeat its batch (the linear-attention state of Qwen3.5 / Qwen3-Next:
transformers' `LinearAttentionLayer` has no `batch_repeat_interleave`) is prefilled with the G copies instead.
`generate` is told `use_cache=True`: with a training config's `use_cache: false` (the miniatures', or one saved after
gradient checkpointing) decoding from the handed-over cache did not sample the model's distribution (gpt-oss greedy:
3 of 9 tokens not the model's argmax).
"""

import torch


def cut_at_eos(tokens: list[int], eos_ids: list[int]) -> list[int]:
    """The completion up to and including its first EOS (TRL masks everything after it)."""
    for i, token in enumerate(tokens):
        if token in eos_ids:
            return tokens[: i + 1]
    return tokens


def _copies(prompts: list[list[int]]) -> dict[tuple[int, ...], list[int]]:
    where: dict[tuple[int, ...], list[int]] = {}
    for i, prompt in enumerate(prompts):
        where.setdefault(tuple(prompt), []).append(i)
    return where


def sample_one_prompt(model, prompt: tuple[int, ...], copies: int, generation_config, device) -> list[list[int]]:
    """`copies` completions of one prompt: its first P - 1 tokens prefilled once, the cache repeated per copy."""
    from transformers import DynamicCache

    ids = torch.tensor([prompt], device=device)
    extra = {}
    if len(prompt) > 1:
        cache = DynamicCache(config=model.config)
        repeatable = all(hasattr(layer, "batch_repeat_interleave") for layer in cache.layers)
        prefix = ids[:, :-1] if repeatable else ids[:, :-1].expand(copies, -1)
        model(input_ids=prefix, past_key_values=cache, use_cache=True, logits_to_keep=1)
        if repeatable:
            cache.batch_repeat_interleave(copies)
        extra["past_key_values"] = cache
    batch = ids.expand(copies, -1)
    out = model.generate(
        input_ids=batch,
        attention_mask=torch.ones_like(batch),
        generation_config=generation_config,
        use_cache=True,
        **extra,
    )
    return out[:, len(prompt) :].tolist()


def generate_shared_prefill(model, prompts: list[list[int]], generation_config, eos_ids, device) -> list[list[int]]:
    """One completion per prompt copy, in the order of `prompts` (module docstring: one prefill per distinct
    prompt), each cut after its first EOS."""
    out: list = [None] * len(prompts)
    was_training = model.training
    model.eval()
    try:
        for prompt, where in _copies(prompts).items():
            for i, tokens in zip(
                where, sample_one_prompt(model, prompt, len(where), generation_config, device), strict=True
            ):
                out[i] = cut_at_eos(tokens, eos_ids)
    finally:
        model.train(was_training)
    return out
