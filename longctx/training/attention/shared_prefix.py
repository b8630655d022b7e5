"""A shared prompt in a packed row: both answers attend to it, never to each other (preference prefix sharing).

Why: a DPO pair is two sequences with the same prompt, `prompt + chosen` and `prompt + rejected`. At long context the
prompt is nearly all of both, so computing it twice doubles the work for nothing: its tokens see the same context
either way. With prefix sharing (data_prep/trainers/preference.py) a pair's row holds `prompt[:-1]`, then the branch
`prompt[-1] + chosen` at positions P-1.., then the branch `prompt[-1] + rejected` at positions P-1.. again. The
position_ids say it all: the first branch continues the prompt (+1 steps: one document with it), the second restarts
at p = P-1 > 0. The rule added to document isolation (longctx/training/attention/isolation.py): a span whose
position_ids
restart at p > 0 is a branch; its queries see the first p tokens of their document (the shared prompt) and the
branch itself causally, nothing else. Each answer token then sees exactly the tokens it sees unshared, at the same
positions, so its log-prob is the same (tests/attention/test_shared_prefix.py, on the CPU path and the varlen path).

Only rows the preference trainer marks (`DocumentLayout(shared_prefix=True)`, one decoder hook) get the rule; every
other row keeps "a break starts a document", whatever its positions.

Kernels: on the CPU path each span is one sdpa call, a branch's keys being its prefix's followed by its own under a
lower-right causal mask (query i of an L-token branch sees all p prefix keys and branch keys 0..i). On a GPU (bf16)
the whole row is one call of torch's varlen kernel with separate query and key offsets: each branch's key segment
is its prefix's keys gathered before its own, and FlashAttention's causal mask, for a query segment shorter than its
key segment, is aligned to the lower right (torch's own `causal_lower_right` dispatches to the same kernel with
`is_causal=True` for that reason), which is exactly the rule above. Under Ulysses SP the attention sees the whole
row with the all-gathered position_ids, so the same rule holds at every sp.
"""

import numpy as np
import torch
from transformers.integrations.sdpa_attention import repeat_kv


class SharedPrefixError(ValueError):
    """A row's position_ids describe a branch whose prefix is not in its document."""


Span = tuple[int, int]


def find_prefixes(spans: list[list[Span]], first_positions: list[int]) -> list[list[Span | None]]:
    """Per row and span: None for a span that starts a document (position 0), else (start, end) of the first p
    tokens of its document, p being the span's first position."""
    out, k = [], 0
    for row in spans:
        prefixes, trunk = [], None
        for start, end in row:
            p = first_positions[k]
            k += 1
            if p == 0 or trunk is None:
                trunk = (start, end)
                prefixes.append(None)
                continue
            if p > trunk[1] - trunk[0]:
                raise SharedPrefixError(
                    f"a branch at tokens {start}..{end} restarts at position {p}, beyond its document's "
                    f"{trunk[1] - trunk[0]} leading tokens: rows with a shared prefix come from data_prep's layout"
                )
            prefixes.append((trunk[0], trunk[0] + p))
        out.append(prefixes)
    return out


def _span_attention(q, k, v, prefix_len: int, dropout: float, scaling) -> torch.Tensor:
    """q [1, H, L, D], k/v [1, Hkv, p + L, D] -> [1, L, H, D]: all p prefix keys, then the span's causally."""
    k, v = (repeat_kv(t, q.shape[1] // k.shape[1]) for t in (k, v))
    length = q.shape[2]
    mask = None
    if prefix_len:  # lower-right causal: query i sees keys 0 .. p + i
        mask = torch.ones(length, prefix_len + length, dtype=torch.bool, device=q.device).tril(prefix_len)
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=mask is None, scale=scaling
    )
    return out.transpose(1, 2)


def shared_prefix_attention(query, key, value, layout, dropout: float = 0.0, scaling=None) -> torch.Tensor:
    """The CPU path: [B, H, S, D] in (K/V may have fewer heads), [B, S, H, D] out, one sdpa call per span."""
    rows = []
    for b, (spans, prefixes) in enumerate(zip(layout.spans, layout.prefixes, strict=True)):
        q, k, v = query[b : b + 1], key[b : b + 1], value[b : b + 1]
        parts = []
        for (start, end), prefix in zip(spans, prefixes, strict=True):
            keys = [(start, end)] if prefix is None else [prefix, (start, end)]
            k_span = torch.cat([k[:, :, a:c] for a, c in keys], dim=2)
            v_span = torch.cat([v[:, :, a:c] for a, c in keys], dim=2)
            width = 0 if prefix is None else prefix[1] - prefix[0]
            parts.append(_span_attention(q[:, :, start:end], k_span, v_span, width, dropout, scaling))
        rows.append(torch.cat(parts, dim=1))
    return torch.cat(rows, dim=0)


def key_segments(layout, device) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(token index of every key segment's keys over the flattened batch, int32 key offsets, longest key segment),
    computed once per forward (cached on the layout, which the recompute reuses)."""
    cached = getattr(layout, "_key_segments", None)
    if cached is not None:
        return cached
    index, lengths = [], []
    for b, (spans, prefixes) in enumerate(zip(layout.spans, layout.prefixes, strict=True)):
        base = b * layout.length
        for (start, end), prefix in zip(spans, prefixes, strict=True):
            pieces = [(start, end)] if prefix is None else [prefix, (start, end)]
            index += [np.arange(base + a, base + c) for a, c in pieces]
            lengths.append(sum(c - a for a, c in pieces))
    flat = torch.from_numpy(np.concatenate(index)).to(device)
    offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)).to(device)
    layout._key_segments = (flat, offsets, max(lengths))
    return layout._key_segments


def shared_prefix_varlen(kernel, query, key, value, layout, scaling=None) -> torch.Tensor:
    """The GPU path: one varlen call, branch key segments gathered as prefix + branch; [B, S, H, D] out."""
    batch, heads, length, dim = query.shape

    def flat(t):
        return t.transpose(1, 2).reshape(batch * length, t.shape[1], dim)

    index, cu_k, longest_k = key_segments(layout, query.device)
    out = kernel(
        flat(query),
        flat(key).index_select(0, index),
        flat(value).index_select(0, index),
        layout.cu_seqlens,
        cu_k,
        layout.longest,
        longest_k,
        scale=scaling,
        window_size=(-1, 0),
        enable_gqa=key.shape[1] != heads,
    )
    return out.view(batch, length, heads, dim)
