"""Keep packed documents apart in sdpa attention, including inside DeepSpeed's Ulysses wrapper.

Why: under Ulysses SP, DeepSpeed's `UlyssesSPAttentionHF` drops the attention mask (it was built for
the local shard) and calls the core `sdpa` function on the full, all-gathered sequence with
`is_causal`. Packed documents then attend across their boundaries and nothing warns. The
wrapper does pass the all-gathered global `position_ids`, and a packed document starts where they
restart at 0, so the core attention has everything it needs to keep documents apart.

How: `isolated_sdpa_attention` replaces transformers' `sdpa` entry in `AttentionInterface` (the name
stays `sdpa`, which the accelerate YAML's `sp_attn_implementation` must match; DeepSpeed wraps whatever
`sdpa` names when accelerate prepares the model). A document starts wherever position_ids do not step by
+1 (transformers' own rule). On a GPU in bf16/fp16 the packed rows go to one varlen kernel call per layer
(longctx/training/attention/varlen.py). Elsewhere (the CPU fallback) each row is split into documents and
transformers' own
sdpa runs on them: a long document alone with `is_causal`, consecutive short ones together under a small
block-diagonal causal mask (at most `GROUP_TOKENS` squared), runs of one-token documents (right padding
has position 0) without any kernel, since a token that sees only itself outputs its own value. Rows
without a break go to stock sdpa unchanged.

No S x S mask: transformers' `create_causal_mask` would build a [B, 1, S, S] boolean mask for packed rows
(1 GiB at 32K tokens a rank) that this function never reads. `isolated_sdpa_mask` replaces the `sdpa`
entry of `AttentionMaskInterface` and returns no mask when the 2-D attention mask has no padding to
express (None or all ones), which is what packed and SP batches carry.
"""

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from longctx.training.attention.document_layout import LAYOUT_KWARG, DocumentLayout, layout_for
from longctx.training.attention.kernels import document_attention
from longctx.training.attention.shared_prefix import shared_prefix_attention, shared_prefix_varlen
from longctx.training.attention.varlen import save_in_selective_checkpointing, varlen_attention, varlen_kernel

# Only tiny documents are grouped into one sdpa call, while the group spans at most this many tokens. A masked call
# runs sdpa's math path over the whole L x L block, an unmasked causal call the fused kernel: measured on CPU
# (4096 tokens, 4 heads of 64), one fused call per document beat 256- and 512-token groups down to 16-token
# documents. Grouping still bounds the number of calls for sequences of thousands of tiny documents.
GROUP_TOKENS = 128

_state = {"enabled": True}


class IsolationError(ValueError):
    """Document isolation cannot be guaranteed for this model or call; the message says why and the fix."""


def document_spans(position_ids: torch.Tensor) -> list[tuple[int, int]]:
    """[start, end) of each document in one row: a document starts at 0 and wherever position_ids do not step by 1."""
    return DocumentLayout().fill(position_ids[None], 1).spans[0]


def plan_calls(spans: list[tuple[int, int]], group_tokens: int | None = None) -> list[list[tuple[int, int]]]:
    """Consecutive spans grouped into attention calls: one-token runs, short-document groups, long documents alone."""
    group_tokens = group_tokens or GROUP_TOKENS
    calls: list[list[tuple[int, int]]] = []
    for span in spans:
        last = calls[-1] if calls else None
        single = span[1] - span[0] == 1
        if last is not None and single and all(e - s == 1 for s, e in last):
            last.append(span)  # extend a run of one-token documents
        elif (
            last is not None and not single and last[-1][1] - last[-1][0] > 1 and span[1] - last[0][0] <= group_tokens
        ):
            last.append(span)
        else:
            calls.append([span])
    return calls


def block_causal_mask(spans: list[tuple[int, int]], device) -> torch.Tensor:
    """Bool [1, 1, L, L] mask, True where a query may attend: same document and not in the future."""
    offset = spans[0][0]
    doc = torch.cat([torch.full((e - s,), i, device=device) for i, (s, e) in enumerate(spans)])
    length = spans[-1][1] - offset
    causal = torch.ones(length, length, dtype=torch.bool, device=device).tril()
    return (causal & (doc[:, None] == doc[None, :]))[None, None]


def _attend(module, q, k, v, group, dropout, scaling, kwargs) -> torch.Tensor:
    """Attention output [1, L, H, D] for one planned call, given that call's [1, H, L, D] pieces."""
    if k.shape[2] == len(group) and dropout == 0.0:
        # every document is one token: softmax over a single key is 1, so the output is the value itself
        return repeat_kv(v, q.shape[1] // k.shape[1]).transpose(1, 2)
    mask = None if len(group) == 1 else block_causal_mask(group, q.device)
    out, _ = sdpa_attention_forward(module, q, k, v, mask, dropout=dropout, scaling=scaling, is_causal=True, **kwargs)
    return out


def _attend_row(module, q, k, v, spans, dropout, scaling, kwargs) -> torch.Tensor:
    """One row, document by document. `split` rather than slicing: its backward concatenates the pieces'
    gradients once, where each slice's backward would write a zero-filled full-size gradient."""
    calls = plan_calls(spans)
    sizes = [g[-1][1] - g[0][0] for g in calls]
    pieces = zip(*(t.split(sizes, dim=2) for t in (q, k, v)), strict=True)
    parts = [_attend(module, *qkv, g, dropout, scaling, kwargs) for qkv, g in zip(pieces, calls, strict=True)]
    return torch.cat(parts, dim=1)


def isolated_sdpa_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """transformers' sdpa, with packed documents (restarting `position_ids`) attending only within themselves.

    Where the documents start comes from the forward's `DocumentLayout`
    (longctx/training/attention/document_layout.py):
    read to the host by the first call of a forward, reused by the other layers and the recompute.
    """
    position_ids = kwargs.pop("position_ids", None)
    holder = kwargs.pop(LAYOUT_KWARG, None)
    checkable = (
        _state["enabled"]
        and position_ids is not None
        and query.shape[2] > 1
        and position_ids.shape[-1] == query.shape[2]
    )
    layout = layout_for(holder, position_ids, query.shape[0]) if checkable else None
    packed = layout is not None and layout.packed
    window = kwargs.get("sliding_window")
    if not packed and not (window and attention_mask is None):  # a window without its mask: per document below
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    if layout is None:  # one document a row, its window applied below (else the forward's layout says so)
        position_ids = torch.arange(query.shape[2], device=query.device)[None]
        layout = DocumentLayout().fill(position_ids, query.shape[0])
    kernel = varlen_kernel(query, dropout)
    if layout.branches:  # a shared prompt's answers (preference prefix sharing): attention/shared_prefix.py
        if kernel is not None:
            return shared_prefix_varlen(kernel, query, key, value, layout, scaling), None
        return shared_prefix_attention(query, key, value, layout, dropout, scaling), None
    if kernel is not None:
        out = varlen_attention(kernel, query, key, value, layout, scaling, window)
        return out, None
    if window:  # the CPU path of a sliding-window layer: per document, in window-sized blocks
        return document_attention(query, key, value, position_ids, scaling, window, layout=layout), None
    kwargs.pop("is_causal", None)
    # The mask (if any) is the model's causal+padding mask; padding is on the right and has position 0, so the
    # per-document split below already covers it (a pad token sees only itself and no real token sees a pad).
    rows = [
        _attend_row(module, q, k, v, spans, dropout, scaling, kwargs)
        for q, k, v, spans in zip(query.split(1), key.split(1), value.split(1), layout.spans, strict=True)
    ]
    return torch.cat(rows, dim=0), None


def isolated_sdpa_mask(*args, attention_mask=None, **kwargs):
    """transformers' sdpa mask, except no mask at all when there is no padding to express.

    Without padding, the isolated sdpa needs nothing but position_ids: rows without a break run causal,
    packed rows are split at their breaks, sliding-window layers apply their window per document (so their
    `local_size` masks are not built either). Custom mask functions (`use_vmap`) keep the stock mask;
    switched off (the probe's negative control) it is stock too.
    """
    plain = not kwargs.get("use_vmap")
    if _state["enabled"] and plain and (attention_mask is None or bool(attention_mask.all())):
        return None
    return sdpa_mask(*args, attention_mask=attention_mask, **kwargs)


def sliding_window_layers(config) -> bool:
    """Whether any layer of this config uses sliding-window attention (applied per document, see above)."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        return "sliding_attention" in layer_types
    return getattr(config, "sliding_window", None) is not None and getattr(config, "use_sliding_window", True)


def install_document_isolation(attn_implementation: str, config=None, enabled: bool = True) -> str:
    """Register the isolated sdpa as `sdpa` (before accelerate prepares the model) and say what was done.

    Returns the line the entrypoint prints. Sliding-window layers are isolated too (their window applies inside
    each document: torch's varlen kernel on GPUs, longctx/training/attention/sinks.py's per-document path on CPU).
    """
    if not enabled:
        return "[isolation] off (`allow_cross_document_attention: true`): packed documents may attend to each other"
    if attn_implementation != "sdpa":
        return f"[isolation] {attn_implementation}: documents are kept apart by the backend from position_ids"
    AttentionInterface.register("sdpa", isolated_sdpa_attention)  # registered in longctx/training/patches/registry.py
    AttentionMaskInterface.register("sdpa", isolated_sdpa_mask)  # registered in longctx/training/patches/registry.py
    save_in_selective_checkpointing()  # packed rows' varlen kernel: kept, not recomputed, by selective checkpointing
    _state["enabled"] = True
    return (
        "[isolation] sdpa: packed documents attend only within themselves "
        "(a document starts wherever position_ids do not step by +1)"
    )


def isolation_enabled() -> bool:
    """Whether the registered function isolates documents now: sinks and the hybrid ring read it, so the probe's
    stock run (`set_isolation_enabled(False)`) turns isolation off in every layer of the stack at once."""
    return _state["enabled"]


def set_isolation_enabled(enabled: bool) -> None:
    """Switch the registered function to stock sdpa behaviour and back (the probe's proof that it can fail)."""
    _state["enabled"] = enabled


def install_isolation_for_recipe(recipe, model_args, model) -> str:
    """The entrypoint's one call: install per the recipe, turning a refusal into a clean RecipeError."""
    from longctx.config.recipe import RecipeError

    config = getattr(model, "config", None)
    if config is None:  # a pretrained path: read its config (local or cached); if unreadable, each call checks
        from transformers import AutoConfig

        try:
            config = AutoConfig.from_pretrained(model_args.model_name_or_path, revision=model_args.model_revision)
        except (OSError, ValueError):
            config = None
    try:
        return install_document_isolation(
            model_args.attn_implementation, config, enabled=not recipe.allow_cross_document_attention
        )
    except IsolationError as exc:
        raise RecipeError(recipe.config_source, [f"{recipe.config_source}: {exc}"]) from None


def require_position_ids(model, recipe, args) -> None:
    """A packed batch without position_ids is an error, not a silent cross-document run.

    Without them the model makes up 0..S-1 for the whole row and nothing can find the documents' starts.
    """
    from longctx.config.rules.attention.isolation import is_packed

    if getattr(recipe, "allow_cross_document_attention", False) or not is_packed(recipe, args):
        return

    def hook(module, args, kwargs):
        if module.training and kwargs.get("position_ids") is None:
            raise IsolationError(
                f"{recipe.config_source}: a packed batch reached the model without `position_ids`, so document "
                "boundaries are unknown; use the prepared-data collator (prepare_data) or TRL's packing collator, "
                "which emit them"
            )

    model.register_forward_pre_hook(hook, with_kwargs=True)


def keep_packed_positions(trainer) -> None:
    """Pre-packed rows (a `seq_lengths` column, TRL's packed format) need restarting position_ids at every sp.

    TRL's collator emits them only when SP is on; at sp=1 it would let positions run on across documents.
    """
    dataset = trainer.train_dataset
    columns = getattr(dataset, "column_names", None) or []
    if "seq_lengths" in columns and hasattr(trainer.data_collator, "return_position_ids"):
        trainer.data_collator.return_position_ids = True
