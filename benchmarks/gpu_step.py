"""Training steps of a recipe's own path on one GPU, each measurement a JSON line flushed as it completes.

What runs, in order (what is needed most first, so a run cut short keeps it):
1. `env`: Python, torch, CUDA and the carried pins' versions, the GPU and the host's memory (a child process).
2. `step`: the recipe (default llama3.1-8b/sft-192k-1gpu-h200) through its own entrypoint, recipes/sft.py, launched by
   the launch home (longctx/launch/) with the few changes benchmarks/gpu_step_recipe.py lists (random weights,
   the benchmark's rows as its data, no checkpoint): 4K twice (warm-up), 128K as 16 documents of 8K, 128K as one
   document, then the recipe's max_length as one document and packed, one optimizer step each. Per row:
   length, documents, loss, seconds, the trainer's own tokens/s per GPU, MFU and HFU, the GPU's peak allocated and
   reserved memory and the host's (each step starts from released caches: longctx/training/metrics/step_record.py),
   and the memory plan of exactly that run (GPU and host terms; the host with the Adam states, since every row is
   an optimizer step) with plan/measured ratios.
3. `attn` (CUDA only, if time is left): attention alone at 32K, sdpa unpacked against torch's varlen kernel packed
   (benchmarks/gpu_step_attention.py).

Budget (`--budget-s`, wall clock from the start): once a long row has been measured, the next row starts only if
its time, scaled from the last row by hardware FLOPs, fits what is left; otherwise the run is ended and each
remaining row says so. At the budget the run is ended whatever it is doing. After its last row the run is ended
before the recipe's final save (a 16 GB checkpoint measures nothing). A run that dies (out of memory on the GPU,
the OOM killer on the host) leaves its rows so far and a row with the tail of its output.

    python benchmarks/gpu_step.py --out OUT.jsonl [--budget-s 240] [--recipe R] [--work DIR] [--no-attention]
    python benchmarks/gpu_step.py --tiny --out tiny.jsonl     # CPU: the recipe in miniature, rows 256x shorter

On the GPU machine (its own python3 and torch, the other pins carried as wheels): `make gpu-bench`, which runs
benchmarks/gpu_step.sh (benchmarks/README.md, "GPU step benchmark").
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gpu_step_child import Worker  # noqa: E402  (benchmarks/: no torch in this process)

from longctx.launch.accelerate_launch import runtime_env  # noqa: E402

K = 1024
ATTENTION_CASES = ("sdpa_unpacked", "varlen_packed", "varlen_1doc")
POLL_S = 0.5


class Session:
    """The rows of one run, each printed and appended to the output file, flushed, as it completes."""

    def __init__(self, out, budget_s: float):
        self.out, self.start, self.deadline = out, time.monotonic(), time.monotonic() + budget_s

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def emit(self, row: dict) -> dict:
        row = row | {"t_s": round(time.monotonic() - self.start, 1)}
        line = json.dumps(row)
        print(line, flush=True)
        self.out.write(line + "\n")
        self.out.flush()
        return row


def prepare(args, work: Path) -> dict:
    """benchmarks/gpu_step_recipe.py prepare, in a child (it imports torch and the recipe's stack)."""
    argv = [sys.executable, str(REPO / "benchmarks/gpu_step_recipe.py"), "prepare", "--work", str(work)]
    argv += ["--recipe", args.recipe, "--repeat", str(args.repeat)] + (["--tiny"] if args.tiny else [])
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False, env=child_env())
    if proc.returncode != 0:
        raise RuntimeError(f"prepare failed (exit {proc.returncode}): {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def child_env() -> dict:
    """The launch's environment (longctx/launch/): offline, the allocator setting; this checkout first on the path."""
    env = runtime_env(offline=True)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def measured(spec: dict, step: dict) -> dict:
    """A step row: the row's spec and plan, the step record, and plan over measured."""
    row = {"row": "step", "status": "ok", **spec, **step, "seconds": step.get("step_s")}
    if step.get("peak_reserved_gib"):
        row["plan_over_reserved"] = round(spec["plan_gib"] / step["peak_reserved_gib"], 3)
        row["plan_over_allocated"] = round(spec["plan_gib"] / step["peak_alloc_gib"], 3)
    if step.get("rss_peak_gib"):
        row["plan_host_over_rss_peak"] = round(spec["plan_host_gib"] / step["rss_peak_gib"], 3)
    return row


class RecipeRun:
    """The recipe's launch, followed through its step record; ended by signal to its whole process group."""

    def __init__(self, prepared: dict, work: Path):
        self.rows, self.record = prepared["rows"], Path(prepared["record"])
        self.log = work / "launch.log"
        self.done, self.offset, self.last = 0, 0, None
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(prepared["argv"], cwd=REPO, env=child_env(), stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip

    def new_steps(self) -> list[dict]:
        """Step-record lines written since the last call (complete lines only)."""
        if not self.record.is_file():
            return []
        text = self.record.read_text()[self.offset :]
        complete = text[: text.rfind("\n") + 1]
        self.offset += len(complete)
        return [json.loads(line) for line in complete.splitlines() if line.strip()]

    def end(self) -> int | None:
        """Stop the launch and every process under it (SIGTERM, then SIGKILL after 20 s)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-1500:] if self.log.is_file() else ""

    def predicted_s(self, spec: dict) -> float | None:
        """The next row's seconds, scaled by hardware FLOPs from the last long row (None before one: a 4K step is
        mostly fixed costs, the optimizer's above all, which do not scale with the row)."""
        last = self.last
        if last is None or last["seq"] < max(row["seq"] for row in self.rows) // 2:
            return None
        return last["seconds"] * spec["flops"] / last["flops"]


def follow(session: Session, run: RecipeRun) -> None:
    """Emit each step row as its record appears; end the run after the last row, at the budget, or when the next
    row is predicted past it."""
    while run.done < len(run.rows):
        for step in run.new_steps():
            run.last = session.emit(measured(run.rows[run.done], step))
            run.done += 1
        if run.done == len(run.rows):
            break
        spec, code = run.rows[run.done], run.proc.poll()
        if code is not None:
            session.emit({"row": "step", **spec, "status": f"the run exited with code {code}", "log": run.tail()})
            return skip(session, run, "the run had ended")
        predicted = run.predicted_s(spec)
        if session.left() <= 0 or (predicted is not None and predicted > session.left()):
            run.end()
            why = "the budget ran out in it" if session.left() <= 0 else f"predicted {predicted:.0f} s, past budget"
            session.emit({"row": "step", **spec, "status": f"not measured: {why}", "left_s": round(session.left())})
            return skip(session, run, "the run was ended before it")
        time.sleep(POLL_S)
    code = run.end()
    session.emit({"row": "run", "status": "every row measured; the run was ended before its final save", "exit": code})


def skip(session: Session, run: RecipeRun, why: str) -> None:
    code = run.end()
    for spec in run.rows[run.done + 1 :]:
        session.emit({"row": "step", **spec, "status": f"not measured: {why}"})
    session.emit({"row": "run", "status": "ended early", "exit": code})


def attention(session: Session, env: dict) -> None:
    """Attention alone (CUDA only), each case in the worker child, while the budget lasts."""
    if not env.get("gpu"):
        session.emit({"row": "attn", "status": "skipped: no CUDA device"})
        return
    worker = Worker()
    try:
        for case in ATTENTION_CASES:
            if session.left() <= 10:
                session.emit({"row": "attn", "case": case, "status": "skipped: the budget is spent"})
                continue
            worker = worker if worker.alive() else Worker()  # a failed case ends its child
            session.emit({"row": "attn", **worker.ask({"job": "attn", "case": case, "seq": 32 * K}, session.left())})
    finally:
        worker.close()


def stop(signum, _frame):
    """SIGTERM (a `timeout` around this script) ends this process through `finally`, which ends the recipe run."""
    raise SystemExit(128 + signum)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="JSON lines, appended and flushed row by row")
    parser.add_argument("--budget-s", type=float, default=240.0, help="wall clock for every row (default 240)")
    parser.add_argument("--recipe", default="llama3.1-8b/sft-192k-1gpu-h200", help="the recipe whose path is measured")
    parser.add_argument("--work", help="folder for the run's recipe, data and log (default: a temporary one)")
    parser.add_argument("--repeat", type=int, default=1, help="optimizer steps of each long row (default 1)")
    parser.add_argument("--tiny", action="store_true", help="CPU: the recipe in miniature, rows 256x shorter")
    parser.add_argument("--no-attention", action="store_true", help="leave out attention alone")
    args = parser.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="gpu-step-")).resolve()
    with open(args.out, "a") as out:
        session = Session(out, args.budget_s)
        worker = Worker()
        env = session.emit({"row": "env", **worker.ask({"job": "env"}, 120)})
        worker.close()
        try:
            prepared = prepare(args, work)
        except RuntimeError as exc:  # a recipe the benchmark cannot set up: say so in the rows
            session.emit({"row": "recipe", "recipe": args.recipe, "status": "failed", "error": str(exc)})
            return 1
        session.emit({"row": "recipe", "recipe": args.recipe, "work": str(work), "changes": prepared["changes"],
                      "launch": " ".join(prepared["argv"][1:])})  # fmt: skip
        run = RecipeRun(prepared, work)
        signal.signal(signal.SIGTERM, stop)  # `timeout` around this script: the run's process group goes too
        try:
            follow(session, run)
        finally:
            run.end()
        if not args.no_attention and not args.tiny:
            attention(session, env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
