"""DeepSpeed's communication layer attached to the gloo process group on CPU, as accelerate does on GPUs.

Why: on GPUs accelerate's `PartialState` calls `deepspeed.comm.init_distributed` when `ACCELERATE_USE_DEEPSPEED`
is set, but only `if not cpu`; a CPU run gets torch's gloo process group and no DeepSpeed communication backend.
ZeRO-3 hides this (building the model under `zero.Init` initializes it), but ZeRO-1/2 do not, and accelerate's
`_prepare_deepspeed` registers Ulysses SP, whose `initialize_sequence_parallel` asserts `deepspeed.comm` is
initialized, before `deepspeed.initialize` would do it: a ZeRO-2 SP run on CPU died there. Attaching DeepSpeed to
the process group that already exists (no new rendezvous) gives CPU the state GPU runs start in. On GPUs (and
under ZeRO-3) `deepspeed.comm` is already initialized and this does nothing.
"""

import os

import torch.distributed as dist


def attach_deepspeed_comm() -> bool:
    """On a DeepSpeed run whose process group exists without `deepspeed.comm`, initialize it on that group; True
    if it did. Call after the training arguments created the process group (accelerate's PartialState)."""
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() != "true" or not dist.is_initialized():
        return False
    from deepspeed import comm as ds_comm

    if ds_comm.is_initialized():
        return False
    ds_comm.init_distributed(dist_backend=dist.get_backend(), auto_mpi_discovery=False, verbose=False)
    return True
