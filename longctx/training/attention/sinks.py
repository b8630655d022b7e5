"""Attention sinks (gpt-oss) and sliding windows under `sdpa`, packed or not, at any sp size.

Why: gpt-oss hands its attention function `s_aux`, one learned sink logit per query head, and half its layers
a 128-token `sliding_window`. Stock sdpa ignores both without a word (transformers therefore refuses sdpa for
gpt-oss), DeepSpeed's Ulysses wrapper refuses eager, flex refuses sinks on CPU, and the GPU flash kernels
with sinks are a Hub download. Under Ulysses each rank also holds only `heads / sp` query heads after the
all-to-all, while `s_aux` still has all of them: used as is, the sinks do not line up with their heads.

What: `sink_sdpa_attention` takes over `sdpa` calls that carry sinks or a window (all others go to the `sdpa`
registered before it: the isolated sdpa of longctx/training/attention/isolation.py, or stock). It
- slices the sinks to this rank's heads: Ulysses gives SP rank r the contiguous query heads
  [r * H / sp, (r + 1) * H / sp) (KV heads are repeated first when fewer than sp; sinks belong to query
  heads, so only the query split matters);
- splits rows into documents where position_ids do not step by +1 (packed rows, right padding), so no
  document sees another, and applies the window inside each document;
- runs a kernel that returns the log-sum-exp (longctx/training/attention/kernels.py) and rescales by the sink:
  out * exp(lse - logaddexp(lse, sink)); the backward reuses the kernel's backward with the rescaled output
  and lse, which is exactly attention-with-sink's gradient, plus the sink's own gradient;
- at sp=1 with a padding mask and unpacked rows, runs the dense eager formula of gpt-oss instead (the mask
  is then the exact reference; it is never there under SP, where masks are dropped).
`enable_sinks_and_windows` registers it and lets gpt-oss load with `attn_implementation: sdpa`.
"""

import torch
from transformers import AttentionInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from longctx.config.families.registry import family_of
from longctx.training.attention.document_layout import LAYOUT_KWARG, layout_for
from longctx.training.attention.isolation import isolation_enabled, sliding_window_layers
from longctx.training.attention.kernels import document_attention

_state = {"inner": None}  # the `sdpa` function calls without sinks or windows go to


def dense_attention(query, key, value, mask, scaling, sinks=None) -> torch.Tensor:
    """gpt-oss's eager formula (scores + mask, sink column, softmax, drop the sink) for a mask of this length."""
    groups = query.shape[1] // key.shape[1]
    key, value = (t.repeat_interleave(groups, dim=1) for t in (key, value))
    scores = query @ key.transpose(2, 3) * scaling
    scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    if sinks is not None:
        column = sinks.reshape(1, -1, 1, 1).expand(*scores.shape[:-1], 1).to(scores.dtype)
        scores = torch.cat([scores, column], dim=-1)
    probs = torch.softmax(scores - scores.max(dim=-1, keepdim=True).values, dim=-1)
    probs = probs[..., :-1] if sinks is not None else probs
    return (probs.to(value.dtype) @ value).transpose(1, 2).contiguous()


def local_sinks(sinks: torch.Tensor, heads: int) -> torch.Tensor:
    """The sinks of the query heads this rank holds: all of them without SP, Ulysses' contiguous block under it."""
    if sinks.numel() == heads:
        return sinks
    import torch.distributed as dist
    from deepspeed.runtime.sequence_parallel import parallel_state_sp as mpu

    group = mpu.get_sequence_parallel_group()
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    if sinks.numel() != heads * world:
        raise ValueError(f"{sinks.numel()} sinks for {heads} local heads at sp={world}: heads / sp must be local")
    return sinks[rank * heads : (rank + 1) * heads]


def sink_sdpa_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """`sdpa` for gpt-oss-style layers: sinks (`s_aux`) and sliding windows, each document alone."""
    sinks, window = kwargs.pop("s_aux", None), kwargs.get("sliding_window")
    if sinks is None and not window:
        return _state["inner"](module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    if dropout:
        raise ValueError("attention dropout is not supported with sinks or sliding windows; set attention_dropout: 0")
    sinks = None if sinks is None else local_sinks(sinks, query.shape[1])
    position_ids, holder = kwargs.get("position_ids"), kwargs.get(LAYOUT_KWARG)
    length = query.shape[2]
    if position_ids is None or position_ids.shape[-1] != length or not isolation_enabled():
        position_ids, holder = torch.arange(length, device=query.device)[None], None  # one document a row
    # the forward's documents, read once for all layers and the recompute (document_layout.py)
    layout = layout_for(holder, position_ids, query.shape[0])
    if attention_mask is not None and attention_mask.shape[-1] == key.shape[2] and not layout.packed:
        scaling = scaling if scaling is not None else query.shape[-1] ** -0.5
        return dense_attention(query, key, value, attention_mask, scaling, sinks), None
    return document_attention(query, key, value, position_ids, scaling, window, sinks, layout), None


def sink_family(config):
    """The family row of a model whose attention takes `s_aux` (its `sinks`, which preflight also reads), or None."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    family = family_of(text)
    return family if family is not None and family.sinks else None


def needs_sink_attention(config) -> bool:
    """Whether this config's attention has sinks or sliding-window layers (both need `sink_sdpa_attention`)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return sink_family(config) is not None or sliding_window_layers(text)


def enable_sinks_and_windows(config, attn_implementation: str | None) -> str | None:
    """Route sdpa calls with sinks or windows through `sink_sdpa_attention` (idempotent; wraps the current `sdpa`).

    Call it before the model is built (gpt-oss declares no sdpa support until then) and again after anything
    that re-registers `sdpa` (document isolation). Returns the line the entrypoint prints, or None.
    """
    if attn_implementation != "sdpa" or config is None or not needs_sink_attention(config):
        return None
    current = ALL_ATTENTION_FUNCTIONS["sdpa"]
    if current is not sink_sdpa_attention:
        _state["inner"] = current
        AttentionInterface.register("sdpa", sink_sdpa_attention)  # registered in longctx/training/patches/registry.py
    family = sink_family(config)
    if family is not None:
        from longctx.training.patches.check import resolve

        # the class refuses sdpa only because stock sdpa ignores the sinks, which this `sdpa` applies
        model_class = resolve(family.sink_model_class)
        model_class._supports_sdpa = True  # registered in longctx/training/patches/registry.py
        return "[sinks] sdpa: each rank's heads get their own sinks; sliding windows and documents kept per document"
    return "[sinks] sdpa: sliding windows applied inside each document"


def install_sink_attention(recipe, model_args, model) -> str:
    """The entrypoint's one call, after document isolation registered `sdpa`: "" or a line to print after it."""
    config = getattr(model, "config", None)
    if config is None:  # a pretrained path: the architecture it will load (local or cached)
        from transformers import AutoConfig

        source = getattr(recipe, "model_config_source", None) or model_args.model_name_or_path
        try:
            config = AutoConfig.from_pretrained(source, revision=model_args.model_revision)
        except (OSError, ValueError):
            config = None
    line = enable_sinks_and_windows(config, model_args.attn_implementation)
    return f"\n{line}" if line else ""
