"""An all-gather of unequal shapes over gloo, so SP runs on CPU take the variable-length path the GPU recipes take.

Why this exists: DeepSpeed's `UlyssesSPDataLoaderAdapter.refill` gathers every SP rank's batch to every other rank
(each rank's row becomes one micro-batch the whole group computes). It first all-gathers the ranks' sequence lengths,
then calls `deepspeed.comm.all_gather` with one output tensor per rank sized to that rank's length. NCCL gathers
unequal sizes; gloo refuses them (`ProcessGroupGloo::allgather: invalid tensor size at index 1`), so until now a CPU
SP run had to pad every batch to max_length, and the path the GPU recipes take (batches padded to a multiple of sp
only, SP-group members holding rows of different lengths, Ulysses recomputing shapes per call) never ran on CPU.

`install(sp_size)` replaces `deepspeed.comm.torch.TorchBackend.all_gather` only on a gloo run with SP. The
replacement calls the upstream method for every call it can serve (equal output shapes, another backend, an async
call), and only where gloo would refuse does it pad each rank's flattened tensor to the largest, gather those with
the upstream method, and copy each rank's part back into its output tensor: what NCCL delivers, so every
micro-batch keeps its own length. The first such gather prints one line on rank 0. Registered in
longctx/training/patches/registry.py.
"""

import torch
import torch.distributed as dist
from deepspeed.comm.torch import TorchBackend

UPSTREAM_ALL_GATHER = TorchBackend.all_gather
_announced = {"done": False}


def needs_padding(tensor_list, group, async_op: bool) -> bool:
    """True where the upstream gather would fail: gloo, synchronous, output tensors of more than one shape."""
    if async_op or len({tuple(t.shape) for t in tensor_list}) <= 1:
        return False
    return dist.get_backend(group) == dist.Backend.GLOO


def padded_all_gather(backend, tensor_list, tensor, group) -> None:
    """Gather tensors of unequal sizes: each padded (flattened) to the largest, gathered, then cut back."""
    width = max(t.numel() for t in tensor_list)
    send = torch.zeros(width, dtype=tensor.dtype, device=tensor.device)
    send[: tensor.numel()] = tensor.reshape(-1)
    received = [torch.empty_like(send) for _ in tensor_list]
    UPSTREAM_ALL_GATHER(backend, received, send, group=group)
    for out, got in zip(tensor_list, received, strict=True):
        out.copy_(got[: out.numel()].view(out.shape))
    if not _announced["done"] and dist.get_rank() == 0:
        lengths = ", ".join(str(tuple(t.shape)) for t in tensor_list)
        print(f"[gloo] SP ranks hold batches of different shapes ({lengths}): gathered with transport padding")
    _announced["done"] = True


def all_gather(self, tensor_list, tensor, group=None, async_op=False):
    """`TorchBackend.all_gather`, also for output tensors of unequal shapes on gloo."""
    if not needs_padding(tensor_list, group, async_op):
        return UPSTREAM_ALL_GATHER(self, tensor_list, tensor, group=group, async_op=async_op)
    padded_all_gather(self, tensor_list, tensor, group)
    return None


def install_gloo_uneven_gather(sp_size: int) -> bool:
    """Replace `TorchBackend.all_gather` if (and only if) this is a gloo run with SP, where the adapter needs it."""
    if sp_size <= 1 or not dist.is_initialized() or dist.get_backend() != dist.Backend.GLOO:
        return False
    TorchBackend.all_gather = all_gather  # registered in longctx/training/patches/registry.py
    return True


def uninstall() -> None:
    TorchBackend.all_gather = UPSTREAM_ALL_GATHER
