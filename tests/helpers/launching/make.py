"""Run a make target from a test, as a user types it in the repository root."""

import os
import shlex
import subprocess

from tests.helpers import REPO

TAIL = 6000  # characters of output in a failure message


def run_make(
    *words: str, check: bool = True, env: dict | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    """`make -o .venv/.installed WORDS...` (targets, `VAR=value`, make's own options such as `-s` or `-n`).

    `-o .venv/.installed`: the tests run in an installed venv; make must not reinstall it (a network call) when
    pyproject.toml is newer than the stamp in a fresh checkout. The environment is `env`, by default this
    process's (offline: tests/conftest.py). check=True: the test fails unless make exits 0, with the command and
    the tail of its output; check=False hands back whatever happened (a refusal the caller expects).
    """
    argv = ["make", "-o", ".venv/.installed", *words]
    environ = os.environ if env is None else env
    proc = subprocess.run(argv, check=False, cwd=REPO, env=environ, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        output = (proc.stdout + proc.stderr)[-TAIL:]
        raise AssertionError(f"`{shlex.join(argv)}` exited {proc.returncode}; output tail:\n{output}")
    return proc
