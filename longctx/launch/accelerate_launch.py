"""The one place an `accelerate launch` command line is built, shown and started.

Every tool that starts processes (`make sft`, `make eval`, the leak probe, the CPU rehearsal, the SLURM
script through `python -m longctx sft --dry-run`) goes through here, so they share one set of rules:
- the argv is `python -m accelerate.commands.launch --config_file X ... target`, never with `--cpu` (it turns
  DeepSpeed off) or `--use_deepspeed` (it can drop the YAML's SP keys);
- the line a person sees is `accelerate launch ...` with every secret masked (longctx/config/credentials.py);
- the children's environment: `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` unless the user set it (long
  sequences allocate blocks of many sizes; expandable segments stop the fragmentation that otherwise runs out
  of memory with GiBs free), unbuffered output, the Hub off for tools that never download, and the venv's bin/
  first on PATH (ninja for DeepSpeed's JIT-built CPU Adam, longctx/config/paths.py `launch_path`);
- a free port for the rendezvous of a one-machine launch;
- the mesh a run really got is read back from its `[mesh]` line (printed by recipes/sft.py from the accelerator).
"""

import os
import re
import shlex
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from longctx.config.credentials import redact_argv
from longctx.config.paths import launch_path

ACCELERATE = ("-m", "accelerate.commands.launch")
SUPERVISOR = ("-m", "longctx.launch.supervise")  # accelerate's launcher in-process, plus faults
REFUSED_FLAGS = ("--cpu", "--use_deepspeed")
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def free_port() -> int:
    """A TCP port free on this host now, for the rendezvous of a launch on one machine."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def python_exec() -> str:
    """The interpreter of every Python process a launch starts (accelerate's launcher, data preparation, the
    rehearsal's steps): PYTHON_EXEC where it is set, the variable torch's elastic agent starts each rank with (a
    cluster's wrapper; the test session's warm zygote, tests/helpers/launching/zygote.py), else this one."""
    return os.environ.get("PYTHON_EXEC") or sys.executable


def accelerate_argv(config_file: str | None, target: list[str], launch_flags=(), port: int | None = None) -> list[str]:
    """`accelerate launch [--config_file X] [flags] [--main_process_port P] target...` as an argv to exec."""
    refused = [f for f in launch_flags if f.split("=")[0] in REFUSED_FLAGS]
    if refused:
        raise ValueError(f"{refused}: --cpu turns DeepSpeed off and --use_deepspeed can drop the YAML's SP keys")
    argv = [python_exec(), *ACCELERATE, *(["--config_file", str(config_file)] if config_file else []), *launch_flags]
    return argv + (["--main_process_port", str(port)] if port is not None else []) + list(target)


def supervised(argv: list[str]) -> list[str]:
    """The same launch as a training run's launcher (longctx/launch/supervise.py: accelerate's own launcher in this
    process, plus preemption forwarding, one exit status per outcome and the name of a rank that died)."""
    return [argv[0], *SUPERVISOR, *argv[3:]] if tuple(argv[1:3]) == ACCELERATE else argv


def shown(argv: list[str]) -> str:
    """The line as a person types it (`accelerate launch ...`), every secret masked."""
    if tuple(argv[1:3]) in (ACCELERATE, SUPERVISOR):
        argv = ["accelerate", "launch", *argv[3:]]
    return shlex.join(redact_argv(argv))


def announce(argv: list[str]) -> None:
    print("[launch]", shown(argv), flush=True)


def runtime_env(offline: bool, base: dict | None = None) -> dict:
    """The environment a launched run gets: the caller's, plus the allocator setting and the offline flags."""
    env = dict(os.environ if base is None else base)
    env.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")  # a value the user exported wins
    env["PYTHONUNBUFFERED"] = "1"
    env["PATH"] = launch_path(env.get("PATH", ""))
    return {**env, **OFFLINE} if offline else env


def quiet_env(argv: list[str], env: dict) -> dict:
    """Defaults that stop two warnings nobody can act on, without changing what runs (a value the user set wins):
    `OMP_NUM_THREADS=1` where a machine starts several processes (what torchrun sets anyway, after a banner) and
    `DS_ACCELERATOR=cpu` for a recipe with `use_cpu` (what DeepSpeed picks anyway, after a warning per process)."""
    import yaml

    from longctx.config.keys import recipe_with_overrides
    from longctx.config.topology import ConfigError

    env = dict(env)
    if "--config_file" in argv:
        try:
            accel = yaml.safe_load(Path(argv[argv.index("--config_file") + 1]).read_text()) or {}
        except (OSError, yaml.YAMLError, IndexError):
            accel = {}
        per_machine = int(accel.get("num_processes") or 1) // max(int(accel.get("num_machines") or 1), 1)
        if per_machine > 1:
            env.setdefault("OMP_NUM_THREADS", "1")
    if "--config" in argv:
        at = argv.index("--config")
        try:
            use_cpu = recipe_with_overrides(argv[at + 1], argv[at + 2 :]).get("use_cpu")
        except (ConfigError, OSError, IndexError):
            use_cpu = None
        if str(use_cpu).lower() == "true":
            env.setdefault("DS_ACCELERATOR", "cpu")
    return env


def run(argv: list[str], offline: bool, capture: bool = False, timeout: float | None = None, env=None):
    """Start the launch from the working folder, the recipe's root (longctx/commands/workdir.py moved there), and
    wait for it."""
    env = quiet_env(argv, runtime_env(offline, env))
    return subprocess.run(argv, env=env, capture_output=capture, text=True, timeout=timeout, check=False)


def replace_process(argv: list[str], offline: bool = False) -> None:
    """Become the launch (no parent left waiting: signals reach accelerate directly), in the working folder (the
    recipe's root); never returns."""
    sys.stdout.flush()
    os.execve(argv[0], argv, quiet_env(argv, runtime_env(offline)))


@dataclass(frozen=True)
class Mesh:
    world: int
    dp_replicate: int
    dp_shard: int
    sp: int


_MESH = re.compile(r"\[mesh\] world=(\d+): dp_replicate=(\d+) x dp_shard=(\d+) x sp=(\d+);")


def read_mesh(output: str) -> Mesh | None:
    """The mesh a run reported (its first `[mesh] world=...` line), None when it printed none."""
    found = _MESH.search(output)
    return Mesh(*map(int, found.groups())) if found else None
