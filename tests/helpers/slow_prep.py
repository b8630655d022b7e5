"""`python -m data_prep`, unchanged, except that each Arrow shard written pauses the run for 2 s.

The interruption test must land its signal while shards are being written; on a busy machine a real
write phase can be shorter than the poll that watches for it. Slowing only the gap after each shard
makes "mid-write" certain without touching what is written.
"""

import runpy
import sys
import time

from data_prep.writer import AtomicWriter

original_add = AtomicWriter.add


def slow_add(self, table):
    original_add(self, table)
    time.sleep(2.0)


AtomicWriter.add = slow_add
sys.argv = ["data_prep", *sys.argv[1:]]
runpy.run_module("data_prep", run_name="__main__", alter_sys=True)
