"""What every test module shares: where the repository is and the environment a test's processes run in."""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Every test, and every process a test starts, is offline: no model or dataset is ever downloaded.
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}


def offline_env(**extra: str) -> dict[str, str]:
    """This process's environment, offline, plus `extra`: the environment for a child process of a test."""
    return {**os.environ, **OFFLINE, **extra}
