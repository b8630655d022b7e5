"""Leave a finished distributed run without tripping over interpreter teardown.

Measured on CI (gloo, DeepSpeed's shm comm op, 2 CPU ranks): a rank that finished training while rank 0
was still writing the model tore down its process group and exited, and its teardown aborted with
"terminate called without an active exception" (SIGABRT from a still-joinable C++ communication thread),
which turned a complete, saved run into exit code 1. The entrypoint therefore waits for every rank after
saving, before `trainer.end()` destroys the group; this then tears down whatever group is left and
leaves with `os._exit` after flushing, skipping C++ static destructors. The trade-off:
atexit handlers do not run, so everything worth keeping (model, state, trackers via `trainer.end()`) is
finished before this is called.
"""

import os
import sys

import torch.distributed as dist


def exit_cleanly(code: int = 0) -> None:
    """Barrier, destroy the process group, flush, and `os._exit(code)`; a no-op-safe path at world size 1."""
    if dist.is_available() and dist.is_initialized():
        try:
            dist.barrier()
            dist.destroy_process_group()
        except (RuntimeError, ValueError) as exc:  # teardown must not fail a saved run
            print(f"[shutdown] process group teardown failed: {exc}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
