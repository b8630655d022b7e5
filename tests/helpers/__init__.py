"""What every test module shares: where the repository is and the environment a test's processes run in."""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Every test, and every process a test starts, is offline: no model or dataset is ever downloaded.
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
# DeepSpeed's CPU Adam is built by torch's JIT loader on first use (minutes on 2 cores); every test and process of
# the tier loads it from this one folder, so the tier pays for the build once per checkout
# (tests/launch/test_cpu_adam.py).
TORCH_EXTENSIONS_DIR = os.environ.get("TORCH_EXTENSIONS_DIR") or str(REPO / ".cache" / "torch-extensions")
