"""Gated DeltaNet's two sequence operations, restarted at every packed document: the causal convolution and the
gated delta-rule recurrence.

Why: transformers 5.23's reference kernels (`causal_conv1d_fn`, `torch_chunk_gated_delta_rule`) run each row as
one sequence, so in a packed row the convolution window and the recurrent state run on from one document into
the next; passed `cu_seq_lens_q` they refuse ("can't keep packed sequences apart without
flash-linear-attention"), and that package is Triton, GPU only. These functions keep documents apart exactly:

- `causal_conv_restarting`: one depthwise `F.conv1d` over the row with K - 1 zeros inserted before every
  document, so each document is convolved exactly as alone (the zeros are what the reference's own padding
  gives it), device-agnostic, no per-document loop.
- `gated_delta_rule`: on a GPU in bf16/fp16 with flash-linear-attention installed (the `gpu` extra), its
  `chunk_gated_delta_rule` with `cu_seqlens` (every document of every row, one call); elsewhere the upstream
  torch reference kernel once per group of equal-length documents (batched), which is the document run
  alone, bit for bit.

A document starts at position 0 and wherever position_ids do not step by +1 (transformers' rule, and
longctx/training/attention/isolation.py's); right padding (position 0 per token) is a run of one-token documents.
"""

import inspect
from collections import defaultdict

import torch
import torch.nn.functional as F


def causal_conv_restarting(
    x: torch.Tensor, weight: torch.Tensor, doc: torch.Tensor, bias=None, documents: int | None = None
) -> torch.Tensor:
    """Depthwise causal convolution of x [B, C, S] with weight [C, K] that sees no token of an earlier document.

    Token t moves to t + (K - 1) x (its document index + 1): every document then has K - 1 zeros before it,
    one unpadded convolution runs, and each token's output is read back from its moved place. `documents`: the
    most documents a row holds (`DocumentLayout.most_documents`, on the host); without it, read from `doc` (a
    host sync, once per call).
    """
    batch, channels, length = x.shape
    gap = weight.shape[-1] - 1
    moved = torch.arange(length, device=x.device) + gap * (doc + 1)  # [B, S]
    width = length + gap * (documents if documents is not None else int(doc.max()) + 1)
    index = moved[:, None, :].expand(batch, channels, length)
    spaced = x.new_zeros(batch, channels, width).scatter(2, index, x)
    out = F.conv1d(spaced, weight[:, None, :], bias, groups=channels)  # out[u] reads spaced[u : u + K]
    return out.gather(2, index - gap)


def reference_kernel(modeling_module):
    """A model family's upstream torch chunked kernel, unwrapped from transformers' hub-kernel dispatch: with
    flash-linear-attention installed that dispatch would send CPU or fp32 tensors to its Triton kernel."""
    return inspect.unwrap(modeling_module.torch_chunk_gated_delta_rule)


def fla_kernel():
    """flash-linear-attention's chunked gated delta rule (the `gpu` extra), or None where it is not installed."""
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    except ImportError:
        return None
    return chunk_gated_delta_rule


def uses_fla(query: torch.Tensor) -> bool:
    """Whether the recurrence runs on flash-linear-attention: CUDA, half precision (it refuses fp32), installed."""
    return query.is_cuda and query.dtype in (torch.bfloat16, torch.float16) and fla_kernel() is not None


def gated_delta_rule(reference, q, k, v, g, beta, layout) -> torch.Tensor:
    """Outputs [B, S, Hv, dv] of the recurrence restarted at every document (q, k [B, S, Hk, dk], g, beta
    [B, S, Hv]; `layout` the rows' DocumentLayout, read once per forward); q and k are l2-normalised inside, as
    the model's call asks."""
    if uses_fla(q):
        return _fla_varlen(fla_kernel(), q, k, v, g, beta, layout.cu_seqlens)
    return _by_document(reference, q, k, v, g, beta, layout.spans)


def _by_document(reference, q, k, v, g, beta, spans) -> torch.Tensor:
    """The reference kernel on every document alone, batching documents of equal length into one call."""
    sizes = [[end - start for start, end in row] for row in spans]
    pieces = [[t[row : row + 1].split(sizes[row], dim=1) for t in (q, k, v, g, beta)] for row in range(len(spans))]
    groups = defaultdict(list)  # length -> [(row, document)]
    for row, lengths in enumerate(sizes):
        for doc, n in enumerate(lengths):
            groups[n].append((row, doc))
    outputs = {}
    for members in groups.values():
        inputs = [torch.cat([pieces[r][i][d] for r, d in members]) for i in range(5)]
        out, _ = reference(*inputs[:3], g=inputs[3], beta=inputs[4], use_qk_l2norm_in_kernel=True)
        outputs.update({member: out[j : j + 1] for j, member in enumerate(members)})
    rows = [torch.cat([outputs[(r, d)] for d in range(len(sizes[r]))], dim=1) for r in range(len(spans))]
    return torch.cat(rows)


def _fla_varlen(kernel, q, k, v, g, beta, cu_seqlens: torch.Tensor) -> torch.Tensor:
    """One flash-linear-attention call over every document of every row (its documented varlen form: batch 1,
    `cu_seqlens` the documents' offsets in the flattened rows, as for the varlen softmax kernel). Query/key heads
    are repeated to the value heads first, which every version of the kernel accepts (grouped value heads are
    newer). Untested here: this path needs CUDA and the `gpu` extra."""
    batch, length = q.shape[:2]
    ratio = v.shape[2] // q.shape[2]
    if ratio > 1:
        q, k = q.repeat_interleave(ratio, dim=2), k.repeat_interleave(ratio, dim=2)
    offsets = cu_seqlens.long()  # the layout's, on the device: no host sync per layer
    flat = [t.reshape(1, batch * length, *t.shape[2:]) for t in (q, k, v, g, beta)]
    out, _ = kernel(*flat[:3], g=flat[3], beta=flat[4], cu_seqlens=offsets, use_qk_l2norm_in_kernel=True)
    return out.reshape(batch, length, *out.shape[2:])
