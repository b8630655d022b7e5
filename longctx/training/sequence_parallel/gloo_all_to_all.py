"""A correct gloo all-to-all for process groups smaller than the world (SP groups under sp x dp on CPU).

Why this exists: the SP loss (transformers' `deepspeed_sp_compute_loss`) gathers the per-rank losses with
`torch.distributed.nn.functional.all_gather`, whose backward on gloo is `_AlltoAll`. Its gloo branch
emulates all-to-all with one `dist.scatter` per group member and passes the group-LOCAL index `i` as `src`,
which `dist.scatter` reads as a GLOBAL rank. When the group is the whole world the two coincide; in any
smaller group (sp=2 x dp=2: groups {0,1} and {2,3}) the second group fails its first backward with
"Global rank 0 is not part of group", and a group {2,3} that happened to contain rank i would scatter from
the wrong rank. NCCL takes the `all_to_all` branch and is unaffected.

`install(sp_size)` replaces `_AlltoAll.forward` only when this run's SP groups are gloo groups smaller than
the world (it runs before DeepSpeed creates them, so it decides from the backend and the sizes), and the
replacement itself checks every call's group and defers to the upstream forward for every other group, so a run on the
whole world, or on NCCL, executes torch's own code. Registered in longctx/training/patches/registry.py.
"""

import torch.distributed as dist
from torch.distributed.nn import functional as dist_fn

UPSTREAM_FORWARD = dist_fn._AlltoAll.forward


def upstream_is_wrong_for(group) -> bool:
    """True for a gloo group that is not the whole world: where local index != global rank."""
    if group is None or not dist.is_initialized():
        return False
    return dist.get_backend(group) == dist.Backend.GLOO and dist.get_world_size(group) < dist.get_world_size()


def scatter_all_to_all(out_tensor_list, tensors, group) -> None:
    """All-to-all as one scatter per member, each from that member's GLOBAL rank (the fix)."""
    my_rank = dist.get_rank(group=group)
    for i in range(dist.get_world_size(group=group)):
        to_send = list(tensors) if i == my_rank else None
        dist.scatter(out_tensor_list[i], to_send, dist.get_global_rank(group, i), group=group)


def forward(ctx, group, out_tensor_list, *tensors):
    """`_AlltoAll.forward` with the source rank mapped to the global rank; upstream for every other group."""
    if not upstream_is_wrong_for(group):
        return UPSTREAM_FORWARD(ctx, group, out_tensor_list, *tensors)
    ctx.group = group
    ctx.input_tensor_size_list = [tensors[i].size() for i in range(dist.get_world_size(group=group))]
    tensors = tuple(t.contiguous() for t in tensors)
    scatter_all_to_all(out_tensor_list, tensors, group)
    return tuple(out_tensor_list)


def install_gloo_all_to_all(sp_size: int) -> bool:
    """Replace `_AlltoAll.forward` if (and only if) this run's SP groups are ones the upstream code gets wrong."""
    if not dist.is_initialized() or dist.get_backend() != dist.Backend.GLOO:
        return False
    if not 1 < sp_size < dist.get_world_size():
        return False
    dist_fn._AlltoAll.forward = staticmethod(forward)  # registered in longctx/training/patches/registry.py
    return True


def uninstall() -> None:
    dist_fn._AlltoAll.forward = staticmethod(UPSTREAM_FORWARD)
