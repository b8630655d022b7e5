"""scripts/slurm/sft.sbatch: the per-node launch lines it prints (DRY_RUN=1) and the ones it really runs.

The real branch runs with stand-ins for `scontrol` and `srun` on PATH (srun runs its command once per node
with that node's SLURM_NODEID, from a folder whose `.venv/bin/accelerate` records its arguments), so the
test sees exactly the argv every node's launcher would get. No SLURM and no training needed.
"""

import os
import shlex
import subprocess

import pytest

from tests.helpers.launch import REPO

SCRIPT = REPO / "scripts/slurm/sft.sbatch"
RECIPE = "qwen3-32b/sft-256k-2x8-sp8-dp2"
ACCEL = "accelerate_configs/2x8-sp8-dp2-offload-optimizer.yaml"


def expected(rank: int, main: str, port: str, *overrides: str) -> list[str]:
    head = [
        ".venv/bin/accelerate",
        "launch",
        "--config_file",
        ACCEL,
        "--num_machines",
        "2",
        "--machine_rank",
        str(rank),
    ]
    rendezvous = ["--main_process_ip", main, "--main_process_port", port]
    return [*head, *rendezvous, "recipes/sft.py", "--config", str(REPO / f"recipes/{RECIPE}.yaml"), *overrides]


def sbatch(*args: str, env: dict) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PY": str(REPO / ".venv/bin/python"), **env}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.subprocess
def test_dry_run_prints_one_launch_line_per_node():
    proc = sbatch(RECIPE, "--max_steps", "20", "--run_name", "a b", env={"DRY_RUN": "1", "SLURM_NNODES": "2"})
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("[slurm] node ")]
    assert len(lines) == 2
    for rank, line in enumerate(lines):
        prefix, command = line.split(": ", 1)
        assert prefix == f"[slurm] node {rank} (node{rank})"
        assert shlex.split(command) == expected(rank, "node0", "20000", "--max_steps", "20", "--run_name", "a b")


@pytest.mark.subprocess
def test_node_count_other_than_the_configs_is_refused():
    proc = sbatch(RECIPE, env={"DRY_RUN": "1", "SLURM_NNODES": "3"})
    assert proc.returncode == 2
    assert f"{ACCEL} asks for num_machines=2 but the job has 3 nodes; use sbatch --nodes 2" in proc.stderr


@pytest.fixture
def fake_slurm(tmp_path):
    bin_dir, node_dir = tmp_path / "bin", tmp_path / "node"
    (node_dir / ".venv/bin").mkdir(parents=True)
    bin_dir.mkdir()
    record = tmp_path / "launches.txt"
    accelerate = node_dir / ".venv/bin/accelerate"
    accelerate.write_text(f'#!/bin/bash\nprintf "%q " "$@" >> {record}\necho >> {record}\n')
    (bin_dir / "scontrol").write_text("#!/bin/bash\nprintf 'gpu-a\\ngpu-b\\n'\n")
    srun = f'#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\ncd {node_dir}\n'
    srun += 'for node in 0 1; do SLURM_NODEID=$node "$@" || exit 1; done\n'
    (bin_dir / "srun").write_text(srun)
    for tool in (accelerate, bin_dir / "scontrol", bin_dir / "srun"):
        tool.chmod(0o755)
    return bin_dir, record


@pytest.mark.subprocess
def test_each_node_really_launches_with_its_own_machine_rank(fake_slurm):
    bin_dir, record = fake_slurm
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_NNODES": "2", "SLURM_JOB_ID": "1234"}
    env["SLURM_JOB_NODELIST"] = "gpu-[a-b]"
    proc = sbatch(RECIPE, "--max_steps", "5", env=env)
    assert proc.returncode == 0, proc.stderr
    launches = [shlex.split(line) for line in record.read_text().splitlines()]
    assert launches == [expected(rank, "gpu-a", "21234", "--max_steps", "5")[1:] for rank in (0, 1)]
