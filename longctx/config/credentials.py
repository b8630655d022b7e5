"""Keep a Hugging Face token out of everything a run prints or writes, and remote code off unless asked for.

A token passed as `hub_token` (recipe or command line) lives in the training arguments, which end up in
logs, `training_args.bin`, trackers' config dumps and model cards. The Hub client reads `HF_TOKEN` from
the environment just as well, so the token moves there and the argument is cleared before the Trainer
exists. The command line (`python -m longctx ... -- --hub_token X`) moves it there before any tool sees
its overrides (`hub_token_to_env`), so no tool can print it, record it in a results file or write it into a
derived recipe. Launch lines are printed for copying into cluster scripts, so tokens on them are masked.
"""

import os
import re

REDACTED = "REDACTED"
SECRET_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
# `--*token` flags hold secrets, except the special-token names of SFTConfig and tokenizers (`--eos_token`)
_TOKEN_FLAG = re.compile(r"^--(?!(?:eos|pad|bos|unk|sep|cls|mask)_token\b)(\w*token)(=.*)?$")
_TOKEN_VALUE = re.compile(r"hf_[A-Za-z0-9]{8,}")


def move_hub_token_to_env(training_args) -> None:
    """Move `hub_token` into HF_TOKEN (inherited by this process's Hub calls) and clear the argument."""
    token = getattr(training_args, "hub_token", None)
    if token:
        os.environ["HF_TOKEN"] = token
        training_args.hub_token = None


def hub_token_to_env(overrides: list[str], env: dict) -> list[str]:
    """The recipe overrides without `--hub_token X` (or `--hub_token=X`), whose value goes to env["HF_TOKEN"]."""
    kept, i = [], 0
    while i < len(overrides):
        arg = overrides[i]
        if arg == "--hub_token" and i + 1 < len(overrides):
            env["HF_TOKEN"], i = overrides[i + 1], i + 2
            continue
        if arg.startswith("--hub_token="):
            env["HF_TOKEN"] = arg.split("=", 1)[1]
        else:
            kept.append(arg)
        i += 1
    return kept


def redact_text(text: str, env: dict | None = None) -> str:
    """`text` with anything shaped like an `hf_` token, and the value of every secret variable of `env`, masked."""
    env = os.environ if env is None else env
    for name in SECRET_ENV:
        value = env.get(name) or ""
        if len(value) >= 8:  # shorter values would mask ordinary words
            text = text.replace(value, REDACTED)
    return _TOKEN_VALUE.sub(REDACTED, text)


def redact_argv(argv: list[str], env: dict | None = None) -> list[str]:
    """argv with the value of every secret `--*token` flag, and anything `redact_text` masks, masked."""
    shown, mask_next = [], False
    for arg in argv:
        match = _TOKEN_FLAG.match(arg)
        if mask_next:
            shown.append(REDACTED)
        elif match and match.group(2):
            shown.append(f"--{match.group(1)}={REDACTED}")
        else:
            shown.append(redact_text(arg, env))
        mask_next = bool(match and not match.group(2))
    return shown
