"""Activation-checkpoint offload (`activation_checkpoint_offload`): each checkpointed layer's input in host memory.

With gradient checkpointing, what stays on the accelerator between forward and backward is each layer's input
(L x tokens x hidden: 32 GiB for Llama-8B at 128K). A saved-tensor hook around each checkpointed layer moves
exactly those tensors to host memory and brings them back when backward recomputes the layer. Inside the
checkpoint torch's own hooks take precedence, so only the layer inputs go through this one (also under
reentrant checkpointing, PEFT's under ZeRO-3, and with TiledMLP and selective checkpointing inside the layer).

Ours, not transformers' built-in `activation_checkpointing_kwargs: {offload: true}` (5.23), decided by
benchmarks/checkpoint_offload.py (host bytes and step time side by side in one run; figures in
benchmarks/README.md). The built-in wraps the checkpoint in torch's `save_on_cpu(pin_memory=True)`: it offloads
the same tensors and runs with ZeRO-3, SP, TiledMLP and LoRA, but each tensor gets a fresh `torch.empty(...,
pin_memory=True)`, which torch's pinned host allocator rounds up to a power of two (c10 CachingHostAllocator,
`PowerOf2Ceil`) and caches, so the host holds up to twice the checkpoints (Llama-8B at 96K: 1 GiB a layer for
768 MiB of data, 8 GiB more over 32 layers), and both copies are issued on the compute stream, where the
backward waits for each layer's input to come back. Here instead:

- an exact-size pool: host buffers of exactly the bytes asked for (pinned by `cudaHostRegister` on a plain host
  allocation, so no rounding), kept and reused by every later step;
- the copies on a transfer stream of their own, ordered against the compute stream by stream waits (no host
  sync); each device tensor is marked used by that stream so its memory is not reused before the copy ends;
- in backward, when a layer's input is brought back, the next one (backward runs the layers in reverse) is
  prefetched on the transfer stream, so its copy overlaps this layer's recompute and backward: two layer
  inputs are on the accelerator at a time, what the memory plan's `checkpoints` term counts.

A pool buffer goes back to the pool when autograd lets go of its saved tensor (after that layer's backward):
every later write to it is a copy on the same transfer stream, which runs after the copy back read it. On CPU
the "offload" is a copy into the pool and a copy back, so the same bookkeeping runs and is tested.
"""

import weakref
from collections import defaultdict
from dataclasses import dataclass

import torch


class PinnedPool:
    """Host buffers of exactly the bytes asked for, reused across steps; `held_bytes` is what the host holds."""

    def __init__(self):
        self.free: dict[int, list[torch.Tensor]] = defaultdict(list)
        self.held_bytes = 0
        self.allocations = 0

    def take(self, nbytes: int, pin: bool) -> torch.Tensor:
        if self.free[nbytes]:
            return self.free[nbytes].pop()
        buffer = torch.empty(nbytes, dtype=torch.uint8)
        if pin:
            code = torch.cuda.cudart().cudaHostRegister(buffer.data_ptr(), nbytes, 0)
            if int(code) != 0:
                raise RuntimeError(f"activation_checkpoint_offload: cudaHostRegister({nbytes} bytes) failed: {code}")
        self.held_bytes += nbytes
        self.allocations += 1
        return buffer

    def give(self, buffer: torch.Tensor) -> None:
        self.free[buffer.numel()].append(buffer)


@dataclass
class Packed:
    """A layer input in host memory, and its copy back when it was prefetched."""

    device: torch.device
    host: torch.Tensor  # a typed view of `buffer`
    buffer: torch.Tensor
    prefetched: torch.Tensor | None = None


class HostOffload:
    """Pack/unpack hooks (module docstring); `offloaded` counts the tensors packed (the tests read it)."""

    def __init__(self):
        self.offloaded = 0
        self.pool = PinnedPool()
        self.streams: dict[torch.device, torch.cuda.Stream] = {}
        self.order: list[weakref.ref] = []  # packed in forward order; backward unpacks them in reverse

    def _stream(self, device: torch.device):
        if device not in self.streams:
            self.streams[device] = torch.cuda.Stream(device)
        return self.streams[device]

    def pack(self, tensor: torch.Tensor):
        if isinstance(tensor, torch.nn.Parameter):
            return tensor  # ZeRO-3 owns parameters; never copy them
        self.offloaded += 1
        cuda = tensor.is_cuda
        buffer = self.pool.take(tensor.numel() * tensor.element_size(), pin=cuda)
        host = buffer.view(tensor.dtype).view(tensor.shape)
        if cuda:
            stream = self._stream(tensor.device)
            stream.wait_stream(torch.cuda.current_stream(tensor.device))  # the tensor is written by then
            with torch.cuda.stream(stream):
                host.copy_(tensor, non_blocking=True)
            tensor.record_stream(stream)  # its memory is not handed out again before the copy ends
        else:
            host.copy_(tensor)
        packed = Packed(tensor.device, host, buffer)
        weakref.finalize(packed, self.pool.give, buffer)  # back to the pool when autograd drops it
        self.order = [ref for ref in self.order if ref() is not None] + [weakref.ref(packed)]
        return packed

    def _copy_back(self, packed: Packed) -> torch.Tensor:
        """Issue the copy to the accelerator (on the transfer stream)."""
        if packed.device.type != "cuda":
            out = packed.host.clone()
        else:
            out = torch.empty(packed.host.shape, dtype=packed.host.dtype, device=packed.device)
            stream = self._stream(packed.device)
            stream.wait_stream(torch.cuda.current_stream(packed.device))  # `out`'s memory is free by then
            with torch.cuda.stream(stream):
                out.copy_(packed.host, non_blocking=True)
            out.record_stream(stream)
        return out

    def unpack(self, packed):
        if isinstance(packed, torch.Tensor):
            return packed
        out = packed.prefetched if packed.prefetched is not None else self._copy_back(packed)
        packed.prefetched = None
        if packed.device.type == "cuda":
            torch.cuda.current_stream(packed.device).wait_stream(self._stream(packed.device))
            self._prefetch_before(packed)
        return out

    def _prefetch_before(self, packed: Packed) -> None:
        """Start bringing back the input packed just before this one: backward needs it next."""
        alive = [ref() for ref in self.order]
        index = next((i for i, p in enumerate(alive) if p is packed), None)
        previous = alive[index - 1] if index else None
        if previous is not None and previous.prefetched is None and previous.device == packed.device:
            previous.prefetched = self._copy_back(previous)


def enable_activation_checkpoint_offload(model) -> HostOffload:
    """Wrap each checkpointed layer's forward in the offload hooks; returns the hooks (for their counts)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    hooks = HostOffload()
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    if not layers:
        raise ValueError(f"activation_checkpoint_offload: no checkpointable layer in {type(model).__name__}")
    for layer in layers:
        forward = layer.forward  # the class's checkpointing wrapper, bound; module hooks stay outside

        def offloaded(*args, _forward=forward, **kwargs):
            with torch.autograd.graph.saved_tensors_hooks(hooks.pack, hooks.unpack):
                return _forward(*args, **kwargs)

        layer.forward = offloaded  # registered in longctx/training/patches/registry.py
    return hooks
