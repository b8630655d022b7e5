"""Attention: the FlashAttention build a recipe asks for is importable where it will run."""

import importlib.util

from config.problems import Problem, error, warning

FLASH_MODULES = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface"}
INSTALL = {
    "flash_attention_2": "`make install-gpu` (pip install --no-build-isolation flash-attn==2.8.3.post2)",
    "flash_attention_3": "build FlashAttention 3 from the `hopper/` folder of Dao-AILab/flash-attention",
}


def flash_problems(launch) -> list[Problem]:
    attn = launch.model.attn_implementation
    if attn not in FLASH_MODULES or importlib.util.find_spec(FLASH_MODULES[attn]) is not None:
        return []
    msg = f"{attn} is requested but `{FLASH_MODULES[attn]}` is not importable here"
    make = error if launch.machine.this_machine else warning
    return [make(launch.source, "attn_implementation", msg, f"install it: {INSTALL[attn]}")]


def check(launch) -> list[Problem]:
    """The kernel rules under SP are config/rules/sequence.py's; here only what this machine has installed."""
    return flash_problems(launch)
