"""Where prefix sharing (DPO's and GRPO's `prefix_sharing`: a prompt laid out once, its answers as branches) is
computed, and the rule built on that.

The branches are read by sdpa's document isolation over full-attention layers
(longctx/training/attention/shared_prefix.py). A branch of a sliding-window layer would need the prompt's window,
of a linear-attention layer the prompt's recurrent state, and a sink's softmax is not a branch's: none is
implemented. One reason function serves preflight (this rule) and the run-time refusal
(longctx/training/attention/stack.py), so they cannot disagree: the run time once refused what preflight had passed.
Pure data: nothing here imports torch.
"""

from longctx.config.families.registry import family_of
from longctx.config.model.linear_layers import text_config
from longctx.config.problems import Problem, error
from longctx.config.rules.attention.attention_patterns import recipe_model_config

FIX = "set `prefix_sharing: false`"


def prefix_sharing_refusal(config: dict, attn_implementation: str | None) -> str | None:
    """Why prefix sharing cannot run on this model config with this attention, or None where it can."""
    if attn_implementation != "sdpa":
        return f"attention {attn_implementation!r} (prefix sharing runs on sdpa's document isolation)"
    text = text_config(config)
    layer_types = text.get("layer_types")
    if layer_types is None:  # no per-layer types: a sliding window applies to every layer
        sliding = text.get("sliding_window") is not None and text.get("use_sliding_window", True)
        layer_types = ["sliding_attention" if sliding else "full_attention"]
    if set(layer_types) != {"full_attention"}:
        return "sliding-window or linear-attention layers (a branch would need the prompt's state: not implemented)"
    family = family_of(config)
    if family is not None and family.sinks:
        return f"attention sinks ({family.name})"
    return None


def prefix_sharing_problems(recipe, args, model, topo, source: str) -> list[Problem]:
    """A recipe with `prefix_sharing: true` on a model or attention that does not compute it (any trainer that has
    the key: DPO, GRPO)."""
    if not getattr(args, "prefix_sharing", False):
        return []
    config, name = recipe_model_config(recipe, model)
    if config is None:  # not on disk yet: the entrypoint refuses it with the config it builds the model from
        return []
    why = prefix_sharing_refusal(config, getattr(model, "attn_implementation", None))
    if why is None:
        return []
    return [error(source, "prefix_sharing", f"is on, but {name} has {why}", FIX)]
