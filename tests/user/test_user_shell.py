"""The commands a user types, typed as they are written, in a shell with nothing activated (issue 42, point 1).

Before: the README's `python -m longctx ls` ended in `ModuleNotFoundError: No module named 'trl'` in a fresh shell
(that `python` is the system's, without the pinned stack), and every printed `[next]` line used the same bare
`python`. Here every README command line (`python -m longctx ...`, `longctx ...`, `.venv/bin/longctx ...`) runs
from the repository root under `env -i` with a PATH of the system's folders only; the printed command prefix
(`cli_command`) runs the same way from another folder.
"""

import re
import shlex
import subprocess

import pytest

from longctx.catalog.copy import copy_recipe
from longctx.commands.cp import run_lines
from longctx.config.paths import cli_command, resolve_recipe
from tests.helpers import OFFLINE, REPO

pytestmark = pytest.mark.subprocess
CLEAN_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", **OFFLINE}
PREFIXES = ("python -m longctx ", "python3 -m longctx ", "longctx ", ".venv/bin/longctx ")


def readme_commands() -> list[str]:
    """Every command line of the README's bash blocks that runs the longctx command line, as written."""
    blocks = re.findall(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL)
    lines = [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line.startswith(PREFIXES)]


def clean_shell(command: str, cwd=REPO, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["/bin/bash", "--noprofile", "--norc", "-c", command],
        cwd=cwd,
        env=CLEAN_ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def as_help(command: str) -> str:
    """The command's program and subcommand with `--help`: a command that needs a trained run or writes into the
    repository (`export`, `cp`, `data`) is run as far as its program resolving and parsing its subcommand."""
    words = shlex.split(command)
    at = next(i for i, word in enumerate(words) if word.endswith("longctx") and word != "-m")
    return shlex.join([*words[: at + 2], "--help"])


def test_the_readmes_commands_run_as_written_in_a_shell_with_nothing_activated():
    commands = readme_commands()
    assert len(commands) >= 4, commands
    listing = [c for c in commands if shlex.split(c)[-1] == "ls" or " ls " in f"{c} "]
    assert listing, commands
    for command in listing:  # cheap and read-only: run exactly as written
        proc = clean_shell(command)
        assert proc.returncode == 0, f"{command!r} exited {proc.returncode}: {proc.stderr[-1500:]}"
        assert "tiny-2k" in proc.stdout
    for command in commands:
        proc = clean_shell(as_help(command))
        assert proc.returncode == 0, f"{as_help(command)!r} exited {proc.returncode}: {proc.stderr[-1500:]}"
        assert "Traceback" not in proc.stderr


def test_the_printed_command_prefix_works_pasted_into_any_shell(tmp_path):
    """`[next]` lines, `[cp] run it`, `train on it:` and the missing-data fix all start with `cli_command()`."""
    assert "python -m" not in cli_command() or cli_command().startswith("/")
    proc = clean_shell(f"{cli_command()} ls tiny", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-1500:]
    assert "tiny-2k" in proc.stdout


def test_cps_by_hand_launch_line_names_an_accelerate_that_works_pasted(tmp_path):
    """`[cp] or by hand`: its `accelerate` is the environment's (a fresh shell has none on PATH)."""
    copied, _ = copy_recipe(resolve_recipe("tiny-2k"), tmp_path)
    line = run_lines(tmp_path, copied[0])[-1].strip()
    program = line.split(" launch ", 1)[0]
    assert program != "accelerate", line
    proc = clean_shell(f"{program} launch --help", cwd=tmp_path)
    assert proc.returncode == 0 and "--config_file" in proc.stdout, proc.stderr[-1500:]
