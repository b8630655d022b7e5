"""Where packed documents start, read to the host once per forward and reused by every layer and the recompute.

Why: the isolated sdpa (longctx/training/attention/isolation.py) must know, in every attention call, whether the row is
packed and where its documents start. Computed from `position_ids` in each call, that was a device-to-host
sync per layer for every row (`bool(breaks.any())`) and, for packed rows, `nonzero()` and the longest
document read back (`int(max)`) or the spans copied to the host (`tolist`): measured on the tiny Llama, 2
syncs per layer unpacked and 6 packed, forward plus recompute (tests/training/test_host_syncs.py). On a GPU each one
drains the launch queue and stalls ZeRO-3's prefetch, 32 layers x 2 passes a step for Llama-8B. Yet every
layer of one forward sees the same `position_ids`, and the recompute sees them again.

How: a forward pre-hook on the decoder (the module that runs the layers) adds an empty `DocumentLayout` to its
keyword arguments, which transformers hands unchanged to every layer and into the attention function; the
checkpoint binds them, so the recompute in backward gets the same object. The first attention call of the
forward fills it from the `position_ids` it receives (2 syncs: `nonzero` and the offsets copied to the host),
every later call and the recompute read it. Filling it inside the attention rather than in the hook matters
under Ulysses SP: the attention sees the whole sequence after the all-to-all, with the `position_ids` DeepSpeed
gathered from the SP group, so the layout describes exactly what the kernel runs on, with no extra collective.
A call whose batch or length differs from the filled layout (SP switched off in eval, a direct call) gets a
layout of its own, computed as before.
"""

from dataclasses import dataclass, field
from itertools import pairwise

import torch

LAYOUT_KWARG = "document_layout"


@dataclass
class DocumentLayout:
    """The documents of a [batch, length] block of rows: empty until the first attention call fills it."""

    batch: int | None = None
    length: int | None = None
    packed: bool = False
    cu_seqlens: torch.Tensor | None = None  # int32 [N + 1] offsets over the flattened batch, on the device
    longest: int = 0  # the longest document, on the host (the varlen kernel sizes its grid from it)
    bounds: list[int] = field(default_factory=list)  # the same offsets as cu_seqlens, on the host
    spans: list[list[tuple[int, int]]] = field(default_factory=list)  # per row, [start, end) on the host
    position_ids: torch.Tensor | None = None  # [batch, length] the layout was read from, on the device
    doc: torch.Tensor | None = None  # [batch, length] index of each token's document within its row, on the device

    # Shared prompts (preference rows with prefix sharing, longctx/training/attention/shared_prefix.py): on, a span
    # whose position_ids restart at p > 0 is a branch attending to the first p tokens of its document too
    shared_prefix: bool = False
    prefixes: list[list[tuple[int, int] | None]] = field(default_factory=list)  # per row and span: its prefix

    @property
    def most_documents(self) -> int:
        """The most documents any row holds (host): one more than `doc`'s largest value, without reading it."""
        return max(len(row) for row in self.spans)

    @property
    def branches(self) -> bool:
        return any(p is not None for row in self.prefixes for p in row)

    def describes(self, batch: int, length: int) -> bool:
        return self.batch == batch and self.length == length

    def fill(self, position_ids: torch.Tensor, batch: int) -> "DocumentLayout":
        """Read where documents start: at each row's start and wherever position_ids do not step by exactly 1
        (transformers' `find_packed_sequence_indices` rule; right padding, position 0 repeated, becomes
        one-token documents). Two host syncs: `nonzero` sizes its output from the data, `tolist` copies it."""
        pos = position_ids.expand(batch, -1)
        length = pos.shape[-1]
        starts = torch.ones_like(pos, dtype=torch.bool)
        starts[:, 1:] = pos[:, 1:] - pos[:, :-1] != 1
        offsets = starts.flatten().nonzero().flatten()
        bounds = [*offsets.tolist(), batch * length]
        self.batch, self.length, self.packed = batch, length, len(bounds) - 1 > batch
        total = torch.full((1,), batch * length, dtype=offsets.dtype, device=offsets.device)
        self.cu_seqlens = torch.cat([offsets, total]).to(torch.int32)
        self.longest, self.bounds = max(end - start for start, end in pairwise(bounds)), bounds
        docs = list(pairwise(bounds))
        self.spans = [[(s - r * length, e - r * length) for s, e in docs if s // length == r] for r in range(batch)]
        self.position_ids, self.doc = pos, starts.long().cumsum(dim=1) - 1
        if self.shared_prefix:
            from longctx.training.attention.shared_prefix import find_prefixes

            first_positions = pos.flatten()[offsets].tolist()  # one more host read, only for shared-prefix rows
            self.prefixes = find_prefixes(self.spans, first_positions)
        return self


def layout_for(holder: DocumentLayout | None, position_ids: torch.Tensor, batch: int) -> DocumentLayout:
    """The layout of this call: the forward's (filled now if this is its first call) or, for a call it does not
    describe, one computed for this call alone."""
    length = position_ids.shape[-1]
    if holder is not None and holder.describes(batch, length):
        return holder
    if holder is not None and holder.length is None:
        return holder.fill(position_ids, batch)
    return DocumentLayout().fill(position_ids, batch)


def decoder_of(model) -> torch.nn.Module | None:
    """The module that runs the checkpointable layers (LlamaModel, Qwen3Model, ...), inside any wrapper."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    for module in model.modules():
        layers = getattr(module, "layers", None)
        if isinstance(layers, torch.nn.ModuleList) and any(isinstance(m, GradientCheckpointingLayer) for m in layers):
            return module
    return None


def _add_empty_layout(module, args, kwargs):
    kwargs[LAYOUT_KWARG] = DocumentLayout()
    return args, kwargs


def install_document_layout(model, recipe, attn_implementation: str | None) -> bool:
    """Hand every forward of `model`'s decoder one layout for all its attention calls; returns whether it did.

    Only where the isolated sdpa reads it (`attn_implementation` sdpa, isolation on): another backend would
    receive a keyword it does not know.
    """
    if attn_implementation != "sdpa" or getattr(recipe, "allow_cross_document_attention", False):
        return False
    decoder = decoder_of(model)
    if decoder is None:
        return False
    decoder.register_forward_pre_hook(_add_empty_layout, with_kwargs=True)
    return True


def _add_shared_prefix_layout(module, args, kwargs):
    kwargs[LAYOUT_KWARG] = DocumentLayout(shared_prefix=True)
    return args, kwargs


def install_shared_prefix_layout(model) -> bool:
    """Mark `model`'s rows as holding shared prefixes (preference prefix sharing): every forward's layout reads
    spans restarting at p > 0 as branches (longctx/training/attention/shared_prefix.py). Runs after, and so
    replaces the layout of, install_document_layout's hook; False where there is no decoder to mark."""
    decoder = decoder_of(model)
    if decoder is None:
        return False
    decoder.register_forward_pre_hook(_add_shared_prefix_layout, with_kwargs=True)
    return True
