"""The launcher process of a training run: accelerate's own `launch`, in this process, plus what a cluster needs.

`python -m longctx sft` becomes `python -m longctx.launch.supervise ACCELERATE-ARGS` (the same arguments as
`accelerate launch`), which runs accelerate's launcher here: this process is torchrun's agent, the parent of every
rank of its machine, and the process a scheduler signals (Kubernetes: PID 1 of the container; Slurm: the job
step). What it adds, and why:

- Preemption: SIGTERM, SIGUSR1 and SIGINT (Ctrl-C) here are forwarded to every rank as SIGUSR1, which the ranks
  read as "stop at the end of this optimizer step with a checkpoint" (longctx/training/faults/). torchrun's agent
  would forward SIGTERM and SIGKILL the ranks 30 s later, in the middle of a save, and does not handle SIGUSR1
  (Slurm's `--signal`) at all, so that signal would kill the agent; it is told to handle only SIGHUP and SIGQUIT
  (`PET_SIGNALS_TO_HANDLE`, torchrun's own setting). Ctrl-C is a preemption like SIGTERM: a user who presses it
  wants the run to stop, not the last checkpoint's work lost or 200 lines of tracebacks (the ranks run in their
  own session, torchrun's `start_new_session`, so only this process gets the terminal's SIGINT). A second Ctrl-C
  stops at once, as torchrun would (no checkpoint of the step in progress). A signal that comes before any rank
  exists ends the launch at once.
- One exit status a job script recognises (longctx/config/exit_codes.py): PREEMPTED (75) when the ranks stopped
  for a preemption, NONFINITE (3) and SAVE_FAILED (74) as the ranks report them, FAILED (1) otherwise.
- A dead rank: torchrun's agent stops the other ranks of its machine when one dies (SIGTERM, then SIGKILL after
  `TORCH_ELASTIC_SHUTDOWN_TIMEOUT`, 30 s by default); this prints which rank died, how, and what to do, instead of
  a traceback. On NCCL, `TORCH_NCCL_ASYNC_ERROR_HANDLING=1` makes a rank blocked in a collective with a dead
  peer on another machine abort at the collective timeout (the recipe's `ddp_timeout`) instead of hanging.
"""

import os
import signal
import subprocess
import sys
from pathlib import Path

from longctx.config.exit_codes import FAILED, MEANING, NONFINITE, PREEMPTED, SAVE_FAILED
from longctx.config.paths import cli_command

AGENT_SIGNALS = "SIGHUP,SIGQUIT"  # what torchrun's agent still handles itself
FORWARDED = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
RUN_STATUSES = (NONFINITE, SAVE_FAILED, PREEMPTED)  # a rank's own account of why it stopped
ENV_DEFAULTS = {"PET_SIGNALS_TO_HANDLE": AGENT_SIGNALS, "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}


def child_pids(parent: int) -> list[int]:
    """The processes whose parent is `parent` (Linux /proc): the ranks torchrun started from this process."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            found.append(int(entry))
    return found


class Forwarder:
    """SIGTERM/SIGUSR1/SIGINT handler: SIGUSR1 to every rank; with no rank started yet, or at a second SIGINT, end
    the launch (torchrun's own `SignalException`, which its agent answers by stopping whatever it started)."""

    def __init__(self):
        self.received: str | None = None
        self.at_once = False  # a second Ctrl-C: the ranks are stopped without waiting for the step's end

    def install(self) -> "Forwarder":
        for sig in FORWARDED:
            signal.signal(sig, self.forward)
        return self

    def forward(self, signum, frame) -> None:
        from torch.distributed.elastic.multiprocessing.api import SignalException

        name = signal.Signals(signum).name
        again = signum == signal.SIGINT and self.received == name
        self.received = self.received or name
        ranks = child_pids(os.getpid())
        if again:
            self.at_once = True
            os.write(2, b"[launch] SIGINT again: stopping every rank now, without a checkpoint of this step\n")
            raise SignalException("SIGINT twice", sigval=signal.Signals(signum))
        for pid in ranks:
            try:
                os.kill(pid, signal.SIGUSR1)
            except ProcessLookupError:
                pass
        if not ranks:
            raise SignalException(f"{name} before any rank started", sigval=signal.Signals(signum))
        again = " (Ctrl-C again: stop at once, without it)" if signum == signal.SIGINT else ""
        line = (
            f"[launch] {name}: asked {len(ranks)} rank(s) to stop at the end of this step with a checkpoint{again}\n"
        )
        os.write(2, line.encode())


def died_how(exitcode: int) -> str:
    if exitcode < 0:
        name = signal.Signals(-exitcode).name if -exitcode in signal.valid_signals() else f"signal {-exitcode}"
        return f"killed by {name} (the kernel's OOM killer, a node failure or a `kill`)"
    return f"exited with status {exitcode} (its error is printed above)"


def root_failure(failures: dict) -> tuple[int, object]:
    """The rank whose failure came first. torchrun stamps failures to the second and, once one rank failed,
    SIGTERMs the others and records them too; within a second, a rank killed by another signal (SIGKILL: the OOM
    killer) comes first, then one that exited with a status of ours (it says what happened), then one that exited
    with an error (a survivor fails in its next collective with the dead peer), then one ended by torchrun's
    SIGTERM; then the lowest rank."""

    def order(item):
        rank, failure = item
        code = failure.exitcode
        cause = 0 if code < 0 and code != -signal.SIGTERM else 1 if code in RUN_STATUSES else 2 if code > 0 else 3
        return failure.timestamp, cause, rank

    return min(failures.items(), key=order)


def latest_of(target: list[str]) -> str:
    """The latest complete checkpoint of the recipe the launched script trains (`--config X [overrides]`)."""
    try:
        from longctx.config.checkpoints import latest_checkpoint
        from longctx.config.keys import recipe_with_overrides

        recipe = target[target.index("--config") + 1]
        overrides = [a for a in target[1:] if a not in ("--config", recipe)]
        found = latest_checkpoint(recipe_with_overrides(Path(recipe), overrides).get("output_dir") or ".")
    except (ValueError, IndexError, OSError):
        return "unknown (see output_dir)"
    return str(found) if found else "none yet"


def report(failures: dict, received: str | None, target: list[str]) -> int:
    """Print what ended the run and return its exit status (longctx/config/exit_codes.py)."""
    rank, failure = root_failure(failures)
    if failure.exitcode == PREEMPTED or received:
        why = f"{received} received" if received else f"rank {rank} asked to stop"
        print(
            f"[launch] preempted ({why}); latest complete checkpoint: {latest_of(target)}. Run the same command "
            f"with `--resume_from_checkpoint auto` to resume (exit {PREEMPTED})",
            file=sys.stderr,
            flush=True,
        )
        return PREEMPTED
    if failure.exitcode in (NONFINITE, SAVE_FAILED):
        print(f"[launch] rank {rank}: {MEANING[failure.exitcode]} (its message is above)", file=sys.stderr, flush=True)
        return failure.exitcode
    others = sorted(set(failures) - {rank})
    also = f"; also failed: rank(s) {', '.join(map(str, others))}" if others else ""
    print(
        f"[launch] rank {rank} (local rank {failure.local_rank}, pid {failure.pid}) {died_how(failure.exitcode)}; "
        f"the other ranks were stopped{also}.\n"
        "  what to do: read that rank's last lines above; if it was killed, look for the OOM killer in the "
        f"machine's kernel log (`dmesg | grep -i -e oom -e killed`) and compare with `{cli_command()} plan RECIPE`'s "
        f"memory; then run the same command with `--resume_from_checkpoint auto` to resume from the latest complete "
        f"checkpoint ({latest_of(target)})",
        file=sys.stderr,
        flush=True,
    )
    return FAILED


def main(argv: list[str]) -> int:
    for key, value in ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)  # read by torchrun's parser and by torch's NCCL process group
    forwarder = Forwarder().install()
    from accelerate.commands.launch import launch_command, launch_command_parser
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    args = launch_command_parser().parse_args(argv)
    target = [args.training_script, *args.training_script_args]
    try:
        launch_command(args)
    except ChildFailedError as exc:
        return report(exc.failures, forwarder.received, target)
    except SignalException as exc:
        if forwarder.at_once:
            print(
                f"[launch] stopped by a second Ctrl-C; latest complete checkpoint: {latest_of(target)}. Run the same "
                f"command with `--resume_from_checkpoint auto` to resume (exit {PREEMPTED})",
                file=sys.stderr,
                flush=True,
            )
            return PREEMPTED
        print(f"[launch] stopped by {exc.sigval.name} before training started", file=sys.stderr, flush=True)
        return PREEMPTED if forwarder.received else FAILED
    except subprocess.CalledProcessError as exc:  # accelerate's launchers that start one child process
        return PREEMPTED if exc.returncode == PREEMPTED else exc.returncode or FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
