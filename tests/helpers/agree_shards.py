"""A spawned rank for tests/test_alst.py: joins a 2-process gloo group and reports its TiledMLP tile count.

Its own small module so that spawning imports torch and longctx.training.memory.alst only, not the test's transformers.
"""

import torch.distributed as dist

from longctx.training.memory.alst import agreed_shard_count


def agree(rank: int, port: int, queue, seqlens: list[int], hidden: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=len(seqlens))
    queue.put((rank, agreed_shard_count(seqlens[rank], hidden, None, "cpu")))
    dist.destroy_process_group()
