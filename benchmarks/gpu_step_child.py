"""The parent's side of benchmarks/gpu_step_worker.py: one child process that runs jobs (`env`, `attn`) and answers
each with a JSON row; a child that dies or runs past its time is a row too. No torch in this process."""

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORKER = REPO / "benchmarks/gpu_step_worker.py"
ROW_PREFIX = "@@row "  # gpu_step_worker.ROW_PREFIX (not imported: that module imports torch)


class Worker:
    """One child process running gpu_step_worker.py; `ask` sends a job and waits for its row (or its death)."""

    def __init__(self):
        env = os.environ | {"PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen([sys.executable, str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1, cwd=REPO, env=env)  # fmt: skip
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def ask(self, job: dict, timeout_s: float) -> dict:
        """The job's row; a dead child or a job past `timeout_s` is a row too (and the child is gone after)."""
        deadline = time.monotonic() + timeout_s
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        while True:
            try:
                line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                self.proc.kill()
                self.proc.wait()
                return {"status": f"timed out after {timeout_s:.0f} s; the child was killed"}
            if line is None:
                return {"status": f"the child exited with code {self.proc.wait()} before answering"}
            if line.startswith(ROW_PREFIX):
                return json.loads(line[len(ROW_PREFIX) :])
            sys.stderr.write(line)  # what the libraries print goes to the console, not into the rows

    def close(self, grace_s: float = 60) -> None:
        """Let the child exit (stdin closed); kill it past `grace_s`."""
        if self.proc.poll() is None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
