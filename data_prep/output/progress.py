"""Progress of a long prep on stderr: a live bar on a terminal, a line every so often in a batch log.

Two phases: reading and tokenizing (documents, tokens, rate, and the share of the input's bytes read, which
gives an ETA for local files; a Hub stream has no known size, so only counts and rate), then packing and
writing (rows, tokens, rate, ETA from the rows planned). On a terminal the line is redrawn at most ten times
a second; elsewhere (a log file, a pipe) one line is printed every `interval` seconds and when a phase ends,
so a job's log shows it is alive without filling up. `quiet` turns both off.
"""

import sys
import time


def _si(n: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class Progress:
    def __init__(self, quiet: bool = False, stream=None, interval: float = 30.0):
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.every = 0.1 if self.tty else interval
        self.phase, self.start, self.last = "", 0.0, 0.0
        self.width = 0

    def begin(self, phase: str) -> None:
        self.phase, self.start = phase, time.monotonic()
        self.last = self.start

    def update(self, done: float | None, total: float | None, **counts: float) -> None:
        """Show the phase's counts; `done`/`total` (any unit) give the fraction and ETA when total is known."""
        now = time.monotonic()
        if self.quiet or now - self.last < self.every or (total and done is not None and done >= total):
            return  # at 100% the phase's end() prints the last line, once
        self.last = now
        self._show(self._line(now, done, total, counts))

    def end(self, done: float | None, total: float | None, **counts: float) -> None:
        if self.quiet:
            return
        self._show(self._line(time.monotonic(), done, total, counts))
        if self.tty:
            self.stream.write("\n")
            self.width = 0
        self.stream.flush()

    def _line(self, now: float, done, total, counts: dict) -> str:
        elapsed = max(now - self.start, 1e-9)
        parts = [f"{_si(v)} {k}" for k, v in counts.items()]
        if "tokens" in counts:
            parts.append(f"{_si(counts['tokens'] / elapsed)} tokens/s")
        if done is not None and total:
            frac = min(done / total, 1.0)
            eta = elapsed * (1 - frac) / frac if frac > 0 else float("inf")
            bar = ("#" * int(20 * frac)).ljust(20, ".") if self.tty else ""
            parts.append(f"{bar} {frac:.0%}".strip())
            parts.append(f"ETA {_clock(eta)}" if eta != float("inf") else "ETA ?")
        return f"[data] {self.phase}: " + " | ".join(parts) + f" | {_clock(elapsed)} elapsed"

    def _show(self, line: str) -> None:
        if self.tty:
            self.stream.write("\r" + line.ljust(self.width))
            self.width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
