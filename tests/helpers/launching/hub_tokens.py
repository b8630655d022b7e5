"""A fake Hub token for the tests that pass one through every make target and subcommand, and where to look for it.

The token goes in ARGS (`--hub_token`, a recipe override) and in the environment (HF_TOKEN); the runs that carry
it must not show it in their output, nor write it into any file they leave (logs, `training_args.bin`,
`trainer_state.json`, `results.json`, derived recipes, checkpoints). Files are searched as bytes, so pickles and
binary checkpoints count too.
"""

import os
from pathlib import Path

TOKEN = "hf_FakeTokenNeverShown0123456789abcdef"
ENV_TOKEN = "hf_FakeEnvTokenNeverShown0123456789ab"
ARGS = f"--hub_token {TOKEN}"


def env_with_tokens() -> dict:
    """The environment of a run that carries HF_TOKEN: this process's (offline: tests/conftest.py) plus it."""
    return {**os.environ, "HF_TOKEN": ENV_TOKEN}


def args_with_token(overrides: str = "") -> str:
    """The make variable ARGS carrying the token, then `overrides`: pass to run_make (tests/helpers/launching/make.py)
    without `-s`, as a user types it, so anything make echoes is in the output."""
    return f"ARGS={ARGS} {overrides}".rstrip()


def secret_leaks(output: str = "", *folders: Path) -> list[str]:
    """Where either token appears: in `output`, or in a file under one of `folders` (as bytes)."""
    found = [f"{name} in the output" for name, t in (("TOKEN", TOKEN), ("ENV_TOKEN", ENV_TOKEN)) if t in output]
    for folder in folders:
        for path in sorted(Path(folder).rglob("*")):
            if path.is_file():
                data = path.read_bytes()
                found += [
                    f"{name} in {path}"
                    for name, t in (("TOKEN", TOKEN), ("ENV_TOKEN", ENV_TOKEN))
                    if t.encode() in data
                ]
    return found
