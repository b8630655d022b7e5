"""How the GRPO trainer runs DeepSpeed's Ulysses attention: on one packed row per forward, and not while generating.

Why: accelerate registers Ulysses SP (`UlyssesSPAttentionHF.register_with_transformers`) for the whole process under
the recipe's attention name (`sdpa`), sized for `per_device_train_batch_size` rows per forward: its all-to-all
reshapes by that batch size (only the sequence length may vary). A GRPO micro-step is one row whatever the batch
size counts (`per_device_train_batch_size` is completions, which the trainer packs into one group row per forward:
longctx/training/rl/log_probs.py), so `rows_per_forward(1)` (sequence_parallel/registration.py) registers it for
one row. And the wrapper all-to-alls
every attention call across the SP group, which ranks decoding their own prompts (different lengths, different
numbers of steps) cannot do: `local_attention` puts back, while a rank generates, the function the wrapper wraps
(the isolated sdpa), read when the trainer is built, before accelerate registers Ulysses.
"""

import contextlib


def attention_before_sp(name: str | None):
    """The function registered under `name` now: call before accelerate registers Ulysses SP (the trainer's init)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    return ALL_ATTENTION_FUNCTIONS.get(name)


@contextlib.contextmanager
def local_attention(name: str | None, function):
    """While generating, `name` runs `function` (the attention without SP) instead of the Ulysses wrapper."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if function is None or ALL_ATTENTION_FUNCTIONS.get(name) in (None, function):
        yield
        return
    wrapper = ALL_ATTENTION_FUNCTIONS[name]
    # registered in longctx/training/patches/registry.py
    ALL_ATTENTION_FUNCTIONS[name] = function
    try:
        yield
    finally:
        ALL_ATTENTION_FUNCTIONS[name] = wrapper
