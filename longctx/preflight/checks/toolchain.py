"""Toolchain: DeepSpeed's CPU Adam, which an offloaded AdamW steps with, can be built where the run starts.

DeepSpeed compiles the op (C++, `csrc/adam/cpu_adam.cpp`) on first use through torch's JIT loader unless
deepspeed was installed with it prebuilt (`DS_BUILD_CPU_ADAM=1`, as `make install-gpu` does). The JIT build
needs a C++ compiler (`$CXX`, else `c++`), `ninja` (torch runs it by name; pip's ninja lands in the venv's
bin/, which every launch puts first on PATH) and the Python headers. Missing any of them fails every
rank of every node at engine build, after the model has loaded. Checked only with `--this-machine`: the
build happens where the launch does.
"""

import os
import shutil
import sysconfig
from pathlib import Path

from longctx.config.paths import launch_path
from longctx.config.problems import Problem, error

PREBUILD = "or prebuild the op into deepspeed: `make install-gpu` (reinstalls deepspeed with DS_BUILD_CPU_ADAM=1)"


def uses_cpu_adam(ds: dict) -> bool:
    """An Adam/AdamW named in the JSON with its states offloaded to the host: DeepSpeed steps it with CPU Adam."""
    optimizer = str((ds.get("optimizer") or {}).get("type", "")).lower()
    offload = ((ds.get("zero_optimization") or {}).get("offload_optimizer") or {}).get("device")
    return optimizer in ("adam", "adamw") and offload in ("cpu", "nvme")


def cpu_adam_prebuilt() -> bool:
    """True when the installed deepspeed carries the compiled op (no JIT build at launch)."""
    try:
        from deepspeed.git_version_info import installed_ops
    except ImportError:
        return False
    return bool(installed_ops.get("cpu_adam"))


def missing_tools(path: str | None = None) -> list[tuple[str, str]]:
    """(what is missing, how to install it) for each tool the JIT build needs that this machine lacks, looked up
    on the PATH a launch gets (the venv's bin/ first, longctx/launch/accelerate_launch.py)."""
    missing, path = [], launch_path(path)
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler, path=path) is None:
        missing.append((f"no C++ compiler `{compiler}` on PATH", "install g++ (`apt install g++`) or set CXX"))
    if shutil.which("ninja", path=path) is None:
        fix = "`pip install ninja` in the venv (a deepspeed dependency) or `apt install ninja-build`"
        missing.append(("no `ninja` on PATH or in the venv's bin/ (torch's JIT build runs it)", fix))
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not headers.is_file():
        missing.append((f"no Python headers ({headers} is missing)", "install them (`apt install python3.11-dev`)"))
    return missing


def check(launch) -> list[Problem]:
    if not launch.machine.this_machine or not isinstance(launch.ds, dict) or not uses_cpu_adam(launch.ds):
        return []
    if cpu_adam_prebuilt():
        return []
    why = "offload_optimizer with AdamW steps with DeepSpeed's CPU Adam, built at the first launch here, but"
    return [error(launch.ds_path, "optimizer", f"{why} {what}", f"{fix}, {PREBUILD}") for what, fix in missing_tools()]
