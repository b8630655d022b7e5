"""Single training steps of Llama-3.1-8B on one GPU, each measurement a JSON line flushed as it completes.

What it runs, in order (the first rows are the cheapest and most needed, so a cut-off run keeps them):
1. `env`: Python, torch, CUDA and the carried pins' versions; the GPU and host memory as the process sees them.
2. `attn` (CUDA only): attention alone at 32K, sdpa on an unpacked row against torch's varlen kernel on a packed
   row: forward and backward TFLOP/s and the kernel names the profiler sees (benchmarks/gpu_step_attention.py).
3. `step`: the recipes' stack (benchmarks/gpu_step_worker.py: Llama-3.1-8B architecture with random bf16 weights
   initialised on the GPU, the isolated sdpa, Liger's layer kernels, TRL's fused LM head, full gradient
   checkpointing, DeepSpeed ZeRO-3 with the optimizer offloaded as llama8b-32k-1gpu runs it; one forward +
   backward, no optimizer step) at 4K (warm-up, includes the build), 128K unpacked, 128K packed (16 documents
   of 8K), the longest of 256K / 192K whose predicted time fits `--budget-s`, then 128K with TRL's selective
   checkpointing (attention's output kept) if time is left. Per row: seconds, tokens/s, MFU, HFU, peak
   allocated and reserved GiB, the memory plan's total, terms and host figure, and host memory.

Every job runs in a child process; a GPU out-of-memory, a failed job, a child killed (the kernel's OOM killer
when host memory runs out) or a job past the budget is a row saying so, and a fresh child takes the next job.

    python benchmarks/gpu_step.py --out OUT.jsonl [--budget-s 420] [--offload-params]
    python benchmarks/gpu_step.py --tiny --out tiny.jsonl     # CPU: the tiny Llama, short rows, same code path

On the GPU node (its own python3 and torch, the other pins carried as wheels): `make gpu-bench`, which runs
benchmarks/gpu_step.sh (README: "GPU step benchmark").
"""

import argparse
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
K = 1024
ATTENTION_CASES = ("sdpa_unpacked", "varlen_packed", "varlen_1doc")


def host_avail_gib() -> float | None:
    """MemAvailable of /proc/meminfo (the parent imports neither torch nor psutil)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        return None
    return None


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
                return {"status": f"timed out after {timeout_s:.0f} s (the budget left); the child was killed"}
            if line is None:
                return {"status": died(self.proc.wait()), "host_avail_gib": host_avail_gib()}
            if line.startswith(ROW_PREFIX):
                return json.loads(line[len(ROW_PREFIX) :])
            sys.stderr.write(line)  # what the libraries print goes to the console, not into the rows

    def end(self, grace_s: float = 60) -> None:
        """Let the child exit (it does after a failed job or when stdin closes); kill it past `grace_s`."""
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        if self.alive():
            self.proc.stdin.close()
        self.end()


def died(code: int) -> str:
    if code == -9:
        return "child killed by SIGKILL (the kernel's OOM killer when host memory runs out, or a kill from outside)"
    return f"child exited with code {code} before answering"


class Session:
    """The rows of one run: each written and flushed as it completes; a fresh child after any failure."""

    def __init__(self, out, budget_s: float, kill_label: str | None = None):
        self.out, self.deadline, self.kill_label = out, time.monotonic() + budget_s, kill_label
        self.worker: Worker | None = None

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def emit(self, row: dict) -> dict:
        line = json.dumps(row)
        print(line, flush=True)
        self.out.write(line + "\n")
        self.out.flush()
        return row

    def run(self, row: str, label: str, **job) -> dict:
        """Run one job (labelled `label`) in the child, starting one if there is none; its row is emitted."""
        if self.left() <= 0:
            return self.emit({"row": row, "label": label, "status": "skipped: the budget is spent"} | job)
        if self.worker is None or not self.worker.alive():
            self.worker = Worker()
        start = time.monotonic()
        kill = {"kill": True} if label == self.kill_label else {}
        result = self.worker.ask({"job": row, **job, **kill}, self.left())
        if result.get("status") != "ok":
            self.worker.end()  # a failed child exits by itself; the next job starts a fresh one
        return self.emit({"row": row, "label": label, **job, **result, "wall_s": round(time.monotonic() - start, 1)})

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()


def steps(session: Session, tiny: bool, offload_params: bool) -> None:
    """The step rows (module docstring, 3), lengths divided by 256 with --tiny."""
    scale = 256 if tiny else 1
    job = {"tiny": tiny, "offload_params": offload_params}
    session.run("step", "4K warm-up", seq=4 * K // scale, docs=1, **job)
    first = session.run("step", "128K unpacked", seq=128 * K // scale, docs=1, **job)
    session.run("step", "128K packed 16x8K", seq=128 * K // scale, docs=16, **job)
    for long in (256 * K, 192 * K):
        if first.get("status") != "ok":
            break
        predicted = first["seconds"] * (long / (128 * K)) ** 2 * 1.15  # attention's share grows with length
        label = f"{long // K}K unpacked"
        if predicted < session.left() - 30:
            session.run("step", label, seq=long // scale, docs=1, predicted_s=round(predicted, 1), **job)
            break
        session.emit({"row": "step", "label": label, "status": "skipped: predicted past the budget",
                      "predicted_s": round(predicted, 1), "left_s": round(session.left())})  # fmt: skip
    if first.get("status") == "ok" and first["seconds"] < session.left() - 30:
        session.run("step", "128K unpacked selective", seq=128 * K // scale, docs=1, selective=True, **job)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="JSON lines, appended and flushed row by row")
    parser.add_argument("--budget-s", type=float, default=420.0, help="wall clock for all rows (default 420)")
    parser.add_argument("--offload-params", action="store_true", help="ZeRO-3 parameter offload too (the ladder's)")
    parser.add_argument("--tiny", action="store_true", help="CPU: the tiny Llama in fp32, rows 256x shorter")
    parser.add_argument("--simulate-kill", metavar="LABEL", help="test: the child SIGKILLs itself at this row")
    args = parser.parse_args(argv)
    with open(args.out, "a") as out:
        session = Session(out, args.budget_s, args.simulate_kill)
        try:
            env = session.run("env", "env")
            if env.get("gpu") and not args.tiny:
                for case in ATTENTION_CASES:
                    session.run("attn", case, case=case, seq=32 * K)
            else:
                session.emit({"row": "attn", "label": "attention alone", "status": "skipped: no CUDA device"})
            steps(session, args.tiny, args.offload_params)
        finally:
            session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
