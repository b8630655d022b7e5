"""A rank that only reports what tests/helpers/launching/ranks.py handed it, for tests/launch/test_plumbing.py.

`python -m tests.helpers.workers.echo_rank OUT_DIR`: writes OUT_DIR/rank{r}.json with the rank's view of its
environment; the rank named by ECHO_FAIL_RANK instead prints to stderr and exits 1, the one named by ECHO_HANG_RANK
writes its process id to OUT_DIR/rank{r}.pid and sleeps.
"""

import json
import os
import sys
import time
from pathlib import Path

KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")

if __name__ == "__main__":
    rank = os.environ["RANK"]
    if rank == os.environ.get("ECHO_FAIL_RANK"):
        sys.exit(f"rank {rank} refuses on purpose")
    if rank == os.environ.get("ECHO_HANG_RANK"):
        (Path(sys.argv[1]) / f"rank{rank}.pid").write_text(str(os.getpid()))
        time.sleep(600)
    result = {key: os.environ.get(key) for key in (*KEYS, "ECHO_EXTRA")}
    (Path(sys.argv[1]) / f"rank{rank}.json").write_text(json.dumps(result))
