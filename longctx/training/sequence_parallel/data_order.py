"""Make an sp x dp run train on the same rows at every step as a dp run without SP.

Why: under DeepSpeed accelerate shards the loader over ALL world ranks (rank r loads batches r, r+W, ...)
and DeepSpeed's SP adapter makes each SP group compute its members' batches one per step. With SP groups
of consecutive ranks, step j of a cycle trains on the batches of ranks {g*sp + j : g < dp}: at sp=2 x dp=2,
batches (0, 2) then (1, 3), where a dp=2 run without SP trains on (0, 1) then (2, 3). Same rows per epoch,
different steps: per-step parity with the dp-only run, and the data order across a topology change,
would both be lost.

The fix relabels which shard each rank loads: rank g*sp + j (SP group g, SP rank j) loads data shard
j*dp + g, so micro-step j of a cycle trains on shards {j*dp + g : g < dp}, i.e. consecutive batches, as
the dp-only run does. With dp=1 the relabel is the identity (nothing changes for plain SP runs). Rows
that do not fill a whole cycle of W batches are padded by accelerate by cycling from the start of the
epoch, which depends on W: the last partial cycle is the one place a different world size sees other rows.
"""


def data_shard(rank: int, sp: int, world: int) -> int:
    """The data shard the rank at SP group `rank // sp`, SP rank `rank % sp` loads (see module docstring)."""
    dp = world // sp
    group, sp_rank = divmod(rank, sp)
    return sp_rank * dp + group


def reorder_shards(dataloader, rank: int, sp: int, world: int) -> bool:
    """Point accelerate's shard sampler of `dataloader` at this rank's relabelled shard.

    Works on the sampler object the loader iterates (accelerate's `BatchSamplerShard`, or the
    `IterableDatasetShard` of a streamed dataset); accelerate's own `skip_first_batches` wraps that same
    object, so a resumed loader keeps the relabel. Returns False where there is nothing to relabel.
    """
    shard = data_shard(rank, sp, world)
    target = getattr(dataloader, "batch_sampler", None)
    if not hasattr(target, "process_index"):
        target = getattr(dataloader, "dataset", None)
    if not hasattr(target, "process_index") or getattr(target, "num_processes", None) != world:
        return False
    target.process_index = shard
    return True
