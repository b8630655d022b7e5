"""Count the operations that make the host wait for the device, on a CPU-only machine.

On a GPU a host sync is any operation whose result the host must read before it can go on: a tensor turned
into a Python number (`item`, `bool`, `int`, `float`: aten `_local_scalar_dense`), an op whose output shape
depends on the data (`nonzero`, boolean indexing, `masked_select`, `unique`, `repeat_interleave` without
`output_size`), a comparison read back whole (`equal`), a copy to the host (`tolist`, `cpu`, `numpy`) and
an explicit `torch.cuda.synchronize`. On CPU none of them waits, and `torch.cuda.set_sync_debug_mode` does
nothing, so this counts the calls instead: a `TorchDispatchMode` sees every aten op of forward and backward
(the autograd engine runs CPU backward on the calling thread, with the mode active), and the host copies,
which never reach the dispatcher for a CPU tensor, are counted by wrapping the Tensor methods while the
counter is active. Test-only: nothing here is installed in a training run.
"""

import contextlib
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
# ops that read device data on the host (or size their output from it) on every backend
DATA_DEPENDENT = {
    aten._local_scalar_dense.default,
    aten.nonzero.default,
    aten.nonzero_static.default,
    aten.equal.default,
    aten.masked_select.default,
    aten._unique2.default,
    aten.unique_dim.default,
    aten.unique_consecutive.default,
}
HOST_COPIES = ("tolist", "cpu", "numpy")


def _needs_host(func, args, kwargs) -> bool:
    if func in DATA_DEPENDENT:
        return True
    if func is aten.repeat_interleave.Tensor:  # the output length is the sum of the repeats unless it is given
        return kwargs.get("output_size") is None
    if func is aten.index.Tensor:  # a boolean index is a nonzero() in disguise
        return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1] if i is not None)
    return False


class SyncCounter(TorchDispatchMode):
    """`with SyncCounter() as counter:` ... `counter.total`, `counter.by_op` (op name -> count)."""

    def __init__(self):
        super().__init__()
        self.by_op: Counter = Counter()
        self.paused = 0

    @property
    def total(self) -> int:
        return sum(self.by_op.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.paused and _needs_host(func, args, kwargs):
            self.by_op[str(func.overloadpacket.__name__)] += 1
        return func(*args, **kwargs)

    @contextlib.contextmanager
    def pause(self):
        """Stop counting inside (e.g. a CPU stand-in for a GPU kernel, which syncs where the kernel would not)."""
        self.paused += 1
        try:
            yield
        finally:
            self.paused -= 1

    def __enter__(self):
        self._saved = {name: getattr(torch.Tensor, name) for name in HOST_COPIES}
        self._saved_sync = torch.cuda.synchronize
        for name, method in self._saved.items():
            setattr(torch.Tensor, name, self._counting(name, method))
        torch.cuda.synchronize = self._counting("synchronize", self._saved_sync)
        return super().__enter__()

    def __exit__(self, *exc):
        for name, method in self._saved.items():
            setattr(torch.Tensor, name, method)
        torch.cuda.synchronize = self._saved_sync
        return super().__exit__(*exc)

    def _counting(self, name, method):
        def counted(*args, **kwargs):
            if not self.paused:
                self.by_op[name] += 1
            return method(*args, **kwargs)

        return counted
