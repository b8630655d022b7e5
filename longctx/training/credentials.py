"""Keep a Hugging Face token out of everything a run prints or writes, and remote code off unless asked for.

A token passed as `hub_token` (recipe or command line) lives in the training arguments, which end up in
logs, `training_args.bin`, trackers' config dumps and model cards. The Hub client reads `HF_TOKEN` from
the environment just as well, so the token moves there and the argument is cleared before the Trainer
exists. The launch line is printed for copying into cluster scripts, so tokens on it are masked.
"""

import os
import re

REDACTED = "REDACTED"
_TOKEN_FLAG = re.compile(r"^--(\w*token)(=.*)?$")
_TOKEN_VALUE = re.compile(r"hf_[A-Za-z0-9]{8,}")


def move_hub_token_to_env(training_args) -> None:
    """Move `hub_token` into HF_TOKEN (inherited by this process's Hub calls) and clear the argument."""
    token = getattr(training_args, "hub_token", None)
    if token:
        os.environ["HF_TOKEN"] = token
        training_args.hub_token = None


def redact_argv(argv: list[str]) -> list[str]:
    """argv with the value of every `--*token` flag, and anything shaped like an `hf_` token, masked."""
    shown, mask_next = [], False
    for arg in argv:
        match = _TOKEN_FLAG.match(arg)
        if mask_next:
            shown.append(REDACTED)
        elif match and match.group(2):
            shown.append(f"--{match.group(1)}={REDACTED}")
        else:
            shown.append(_TOKEN_VALUE.sub(REDACTED, arg))
        mask_next = bool(match and not match.group(2))
    return shown
