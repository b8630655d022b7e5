"""One rank for tests/training/test_alst.py: joins a gloo group and reports its TiledMLP tile count.

Started by tests/helpers/launching/ranks.py
(`python -m tests.helpers.workers.agree_shards OUT_DIR HIDDEN SEQLEN_0 SEQLEN_1 ...`, rank and port in the
environment): rank r holds a shard of SEQLEN_r tokens and writes OUT_DIR/rank{r}.json with the count the group
agreed on. Its own small module, so a rank imports torch and longctx.training.memory.alst only.
"""

import json
import sys
from pathlib import Path

import torch.distributed as dist

from longctx.training.memory.alst import agreed_shard_count


def main(out: Path, hidden: int, seqlens: list[int]) -> None:
    dist.init_process_group("gloo")  # env://: RANK, WORLD_SIZE, MASTER_PORT
    rank = dist.get_rank()
    count = agreed_shard_count(seqlens[rank], hidden, None, "cpu")
    (out / f"rank{rank}.json").write_text(json.dumps({"shards": count}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), [int(n) for n in sys.argv[3:]])
