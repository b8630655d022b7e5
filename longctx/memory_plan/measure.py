"""Peak bytes of tensors allocated on any device while a function runs: the plan's terms, measured on CPU.

Why a dispatch mode: torch's CUDA allocator counts its own peak (`max_memory_allocated`), the CPU one does
not. Below autograd every op's outputs pass through `__torch_dispatch__`; each output's storage is counted
once while any tensor that uses it is alive (a weak reference per tensor; PyTorch keeps a tensor's Python
object alive as long as autograd or a view still holds the tensor, so the reference dies with the memory).
What it cannot see: scratch memory inside one fused kernel (e.g. sdpa's flash kernel on CPU), which is
also what `max_memory_allocated` on a GPU would add for a moment. Tensors that exist before the call
(parameters, inputs) are not counted: the result is what the call adds at its peak.
"""

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class PeakBytes(TorchDispatchMode):
    """`with PeakBytes() as m: ...` then `m.peak` (bytes) and `m.live` (bytes still allocated at exit)."""

    def __init__(self):
        super().__init__()
        self.owners: dict[int, int] = {}  # storage address -> live tensors using it
        self.sizes: dict[int, int] = {}
        self.live = self.peak = 0

    def _release(self, key: int) -> None:
        self.owners[key] -= 1
        if self.owners[key] == 0:
            self.live -= self.sizes.pop(key)
            del self.owners[key]

    def _track(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        key, size = storage.data_ptr(), storage.nbytes()
        if size == 0:
            return
        if key not in self.owners:
            self.owners[key], self.sizes[key] = 0, size
            self.live += size
            self.peak = max(self.peak, self.live)
        self.owners[key] += 1
        weakref.finalize(tensor, self._release, key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for item in tree_flatten(out)[0]:
            if isinstance(item, torch.Tensor):
                self._track(item)
        return out


def peak_bytes(fn) -> tuple[int, int]:
    """(peak, still live at the end) bytes that `fn()` allocates."""
    with PeakBytes() as mode:
        fn()
    return mode.peak, mode.live
