"""`python -m data_prep`, unchanged, except that each Arrow shard written pauses the run for 2 s.

The interruption test must land its signal while shards are being written; on a busy machine a real
write phase can be shorter than the poll that watches for it. Slowing only the gap after each shard
makes "mid-write" certain without touching what is written.

It also gives SIGINT Python's own handler, as a terminal's Ctrl-C finds it: a test run started in the
background (`cmd &`, nohup, some CI runners) has SIGINT ignored, every child inherits that, and Python then
never raises KeyboardInterrupt (measured: the prep went on writing for 60 s after the signal).
"""

import runpy
import signal
import sys
import time

from data_prep.output.writer import AtomicWriter

original_add = AtomicWriter.add


def slow_add(self, table):
    original_add(self, table)
    time.sleep(2.0)


AtomicWriter.add = slow_add
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.argv = ["data_prep", *sys.argv[1:]]
runpy.run_module("data_prep", run_name="__main__", alter_sys=True)
