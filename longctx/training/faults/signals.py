"""Preemption signals on a rank: note them, never die of them mid-step.

A scheduler asks a job to stop with a signal: Kubernetes sends SIGTERM to the pod, Slurm sends the signal named in
`--signal` (SIGUSR1 in scripts/slurm/sft.sbatch) ahead of the time limit and SIGTERM at it, and the launcher
(longctx/launch/supervise.py) forwards either to every rank as SIGUSR1. Python's default for both is to end the
process at once, whatever it is doing (in the middle of a step, or of a save). Here both only set a flag; the run
reads it once per optimizer step, all ranks together (longctx/training/faults/run_guard.py), and stops at that step's
end with a checkpoint. SIGINT (Ctrl-C) keeps its meaning: stop now, nothing saved.

Installed by recipes/sft.py before the model is loaded; a signal before that ends the rank (nothing to save yet).
"""

import os
import signal

PREEMPTION_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class PreemptionRequest:
    """The first preemption signal this process received (`signal_name`), None while there was none."""

    def __init__(self):
        self.signal_name: str | None = None

    def install(self) -> "PreemptionRequest":
        for sig in PREEMPTION_SIGNALS:
            signal.signal(sig, self.note)
        return self

    def note(self, signum, frame) -> None:
        """The handler: record and say so once (os.write: a handler may interrupt a print in progress)."""
        if self.signal_name is not None:
            return
        self.signal_name = signal.Signals(signum).name
        rank = os.environ.get("RANK", "0")
        line = f"[preempt] rank {rank}: {self.signal_name} received; stopping at the end of this optimizer step\n"
        os.write(2, line.encode())

    @property
    def requested(self) -> bool:
        return self.signal_name is not None


PREEMPTION = PreemptionRequest()


def watch_for_preemption() -> PreemptionRequest:
    """Turn SIGTERM and SIGUSR1 into a request to stop at the next step boundary (process-wide, idempotent)."""
    return PREEMPTION.install()
