"""Packed attention in one variable-length kernel call per layer, on the GPU.

Why: the per-document path of longctx/training/attention/isolation.py makes one attention call per document (or small
group) per layer, with device-to-host syncs in between. At 256K tokens of ~200-token documents that is
over a thousand launches per layer per pass: launch-bound on a GPU. A varlen kernel takes the whole
packed row once, with `cu_seqlens` (the cumulative document offsets) telling it where each document
starts, and never builds a mask.

Which kernel: torch's own `torch.nn.attention.varlen.varlen_attn` (FlashAttention kernels shipped in the
torch wheel, CUDA only, bf16/fp16; GQA through `enable_gqa`, causal and sliding windows through
`window_size`), so isolated packing on a GPU needs no flash-attn build. It has no dropout; a layer with
attention dropout, an fp32 tensor, a CPU tensor or a head wider than 256 (its kernels' limit) takes the
per-document path instead (`varlen_kernel` returns None there).

Boundaries: any break in `position_ids` (a step other than +1) starts a document, the rule transformers'
own `find_packed_sequence_indices` uses; right padding (position 0 repeated) becomes one-token documents.
"""

import functools
import inspect

import torch

from longctx.config.rules.attention.head_shapes import FLASH_MAX_HEAD_DIM
from longctx.training.attention.document_layout import DocumentLayout

_kernel_override: dict = {"fn": None}  # tests dispatch to a CPU reference with the kernel's signature


def cu_seqlens(position_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(int32 cumulative offsets [N + 1] over the flattened [B, S] batch, longest document length).

    A document starts at the start of each row and wherever position_ids do not step by exactly 1
    (longctx/training/attention/document_layout.py holds the rule; in training it is read once per forward).
    """
    layout = DocumentLayout().fill(position_ids, position_ids.shape[0])
    return layout.cu_seqlens, layout.longest


def varlen_kernel(query: torch.Tensor, dropout: float):
    """The varlen function to call for these tensors, or None when only the per-document path can run.

    Heads wider than FlashAttention's 256 (Gemma 4's global layers: 512) take the per-document path, where sdpa
    picks a kernel that takes them (memory-efficient attention on a GPU)."""
    if query.shape[-1] > FLASH_MAX_HEAD_DIM:
        return None
    if _kernel_override["fn"] is not None:
        return _kernel_override["fn"]
    if not query.is_cuda or query.dtype not in (torch.float16, torch.bfloat16) or dropout:
        return None
    return _torch_kernel()


@functools.cache
def _torch_kernel():
    """torch's varlen_attn, adapted once per process (this is asked for in every layer of every step)."""
    from torch.nn.attention.varlen import varlen_attn

    return with_gqa(varlen_attn)


def with_gqa(kernel):
    """`kernel` where it takes `enable_gqa` (torch 2.13, the pin); else one that repeats the KV heads first.

    torch 2.11's varlen_attn has no `enable_gqa` (seen on an H200 image with torch 2.11: TypeError), and GPU
    clusters often run a container's own torch rather than the pin. Repeating K and V costs their memory
    times the group size for the call, instead of failing the step.
    """
    if "enable_gqa" in inspect.signature(kernel).parameters:
        return kernel

    def repeat_kv(query, key, value, *args, enable_gqa: bool = False, **kwargs):
        if enable_gqa:
            group = query.shape[1] // key.shape[1]
            key, value = key.repeat_interleave(group, dim=1), value.repeat_interleave(group, dim=1)
        return kernel(query, key, value, *args, **kwargs)

    return repeat_kv


def set_kernel(fn) -> None:
    """Use `fn` (same signature as varlen_attn) on every device; None restores the automatic choice."""
    _kernel_override["fn"] = fn


def varlen_attention(kernel, query, key, value, layout: DocumentLayout, scaling=None, sliding_window=None):
    """Isolated causal attention over packed rows in one kernel call: [B, H, S, D] in, [B, S, H, D] out.

    `layout` (longctx/training/attention/document_layout.py) holds the offsets on the device and the longest document
    on
    the host, read once per forward, so this call makes no host sync. `sliding_window` follows transformers (a
    query sees at most that many keys, itself included), so the kernel's left window is one less, as
    transformers' FlashAttention integration passes it.
    """
    batch, heads, length, dim = query.shape

    def flat(t):
        return t.transpose(1, 2).reshape(batch * length, t.shape[1], dim)

    window = (sliding_window - 1, 0) if sliding_window else (-1, 0)
    out = kernel(
        flat(query),
        flat(key),
        flat(value),
        layout.cu_seqlens,
        layout.cu_seqlens,
        layout.longest,
        layout.longest,
        scale=scaling,
        window_size=window,
        enable_gqa=key.shape[1] != heads,
    )
    return out.view(batch, length, heads, dim)


def save_in_selective_checkpointing() -> None:
    """Make TRL's selective activation checkpointing keep this kernel's output, as it keeps sdpa's (idempotent).

    TRL 1.16 (`gradient_checkpointing_kwargs: {selective: true}`) saves the attention op's outputs through torch's
    selective-checkpoint API, and recognises attention by sdpa's aten overloads or by "flash_attn" in the op's
    name. Torch's varlen kernel, which packed rows run on a GPU, is the custom op `torch_attn::_varlen_attn`:
    neither, so packed attention would still be recomputed. TRL builds its policy from the module-level
    `_aten_attention_ops()` when it enables checkpointing, so adding the op there covers it.
    """
    from trl.models import selective_activation_checkpointing as sac

    if getattr(sac._aten_attention_ops, "with_varlen", False):
        return
    upstream = sac._aten_attention_ops

    def attention_ops() -> set:
        ops = upstream()
        try:
            import torch.nn.attention.varlen  # defines the torch_attn ops

            return ops | {torch.ops.torch_attn._varlen_attn.default}
        except (ImportError, AttributeError):  # a torch without (this name of) the op: packed rows never reach it
            return ops

    attention_ops.with_varlen = True
    sac._aten_attention_ops = attention_ops  # registered in longctx/training/patches/registry.py
