"""The ALST memory features as recipe switches: TiledMLP and activation-checkpoint CPU offload.

Transformers ships Ulysses SP but not these two parts of Arctic Long Sequence Training (its docs say so),
and they are what moves one GPU from ~65K to ~1M tokens (the ALST paper, arXiv 2506.13996). Liger's fused
linear cross-entropy, the third, is TRL's own `use_liger_kernel` key; here it is only checked.

- `tiled_mlp`: each MLP runs through DeepSpeed's `TiledMLP` autograd function, a few thousand tokens at a
  time, recomputing each tile in backward, so the 3 x tokens x intermediate_size activations never exist
  at once. Under ZeRO-3 every tile gathers the MLP weights, so every rank must run the same number of
  tiles or the gathers stop matching and training deadlocks. The count is therefore max-reduced over all
  ranks, and the input is zero-padded to a whole number of equal tiles, because `torch.chunk` returns
  fewer chunks than asked when the length does not divide (DeepSpeed's own example has that gap).
- `activation_checkpoint_offload`: with gradient checkpointing, what stays on the accelerator between forward
  and backward is each layer's input; longctx/training/memory/checkpoint_offload.py keeps those in host memory (an
  exact-size pinned pool, copies on a transfer stream) until backward recomputes the layer.
"""

import math

import torch
import torch.distributed as dist

from longctx.training.attention.document_layout import decoder_of
from longctx.training.memory.checkpoint_offload import enable_activation_checkpoint_offload

MLP_PROJECTIONS = ("gate_proj", "up_proj", "down_proj")


# ---------------------------------------------------------------- TiledMLP


def agreed_shard_count(seqlen: int, hidden: int, requested: int | None, device) -> int:
    """Tiles for this call, identical on every rank: the max over ranks of each rank's own count."""
    shards = requested or math.ceil(seqlen / hidden)
    shards = max(1, min(shards, seqlen))
    if dist.is_available() and dist.is_initialized():
        count = torch.tensor(shards, device=device)
        dist.all_reduce(count, op=dist.ReduceOp.MAX)
        shards = int(count.item())
    return shards


class TileAgreement:
    """The tile count of each sequence length in this forward: agreed over all ranks by its first MLP call.

    Agreeing costs an all-reduce and a host read (`.item()`), which per MLP call meant 32 syncs a forward and 32
    more in the recompute for Llama-8B, even at world size 1. Every MLP of one forward (and its recompute) sees
    the same length, so the decoder's forward pre-hook clears the counts and the first call agrees for all.
    Cleared per forward on every rank, never kept across steps: the max over ranks changes with their batches.
    """

    def __init__(self, requested: int | None, per_call: bool = False):
        self.requested, self.per_call = requested, per_call
        self.counts: dict[int, int] = {}

    def forget(self, *_hook_args) -> None:
        self.counts.clear()

    def shards(self, seqlen: int, hidden: int, device) -> int:
        if self.per_call or seqlen not in self.counts:
            self.counts[seqlen] = agreed_shard_count(seqlen, hidden, self.requested, device)
        return self.counts[seqlen]


def tiled_forward(mlp, forward, x, agreement: TileAgreement):
    """`forward(x)` in equal sequence tiles through DeepSpeed's TiledMLP; padding rows are zeros and dropped."""
    from deepspeed.runtime.sequence_parallel.ulysses_sp import TiledMLP

    seqlen = x.shape[-2]
    shards = agreement.shards(seqlen, x.shape[-1], x.device)
    tile = math.ceil(seqlen / shards)
    pad = tile * shards - seqlen
    if pad:  # zero rows give zero MLP output (no biases) and receive zero gradient, since they are sliced off
        x = torch.nn.functional.pad(x, (0, 0, 0, pad))
    # All trainable weights of the block (LoRA adapters included): ZeRO-3 must see their gradient once, after
    # the last tile, not once per tile.
    params = list(mlp.parameters())
    out = TiledMLP.apply(lambda _mlp, tile_x: forward(tile_x), mlp, x, shards, params)
    return out[..., :seqlen, :] if pad else out


def is_gated_mlp(module) -> bool:
    return all(isinstance(getattr(module, name, None), torch.nn.Module) for name in MLP_PROJECTIONS)


def enable_tiled_mlp(model, shards: int | None = None) -> int:
    """Route every gated MLP (Llama, Qwen3, Mistral layout) through `tiled_forward`; returns how many.

    The module's current forward (Liger's SwiGLU when `use_liger_kernel` patched it) runs on each tile.
    """
    decoder = decoder_of(model)
    agreement = TileAgreement(shards, per_call=decoder is None)  # no decoder to hook: agree in every call
    if decoder is not None:
        decoder.register_forward_pre_hook(agreement.forget)
    patched = 0
    for module in model.modules():
        if not is_gated_mlp(module):
            continue
        if any(getattr(getattr(module, name), "bias", None) is not None for name in MLP_PROJECTIONS):
            raise ValueError(f"tiled_mlp: {type(module).__name__} has biases; zero padding would not give zeros")
        # registered in longctx/training/patches/registry.py
        module.forward = lambda x, _m=module, _f=module.forward: tiled_forward(_m, _f, x, agreement)
        patched += 1
    if not patched:
        raise ValueError(f"tiled_mlp: no gate/up/down MLP found in {type(model).__name__}")
    return patched


def apply_alst(model, recipe) -> None:
    """Switch on what the recipe asks for, on the model instance (after TRL applied Liger/PEFT, before
    DeepSpeed wraps it in `train()`); patches are per instance, so other models in the process are untouched."""
    if recipe.tiled_mlp:
        enable_tiled_mlp(model, recipe.tiled_mlp_shards)
    if recipe.activation_checkpoint_offload:
        model._alst_offload = enable_activation_checkpoint_offload(model)
