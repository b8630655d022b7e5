"""scripts/slurm/sft.sbatch: the per-node launch lines it prints (DRY_RUN=1) and the commands it really runs.

Both go through `python -m longctx sft` (the one launch home). The real branch runs with stand-ins for `scontrol`,
`srun` and the job's Python on PATH (srun runs its command once per node with that node's SLURM_NODEID; the
stand-in Python records its arguments), so the test sees exactly what the batch node and every node run; the
node command then goes through the real CLI's `--dry-run` to show the accelerate line it becomes. No SLURM and no
training needed.
"""

import os
import shlex
import subprocess
import sys

import pytest

from tests.helpers.launch import REPO

SCRIPT = REPO / "scripts/slurm/sft.sbatch"
RECIPE = "qwen3-32b/sft-256k-2x8-sp8-dp2"
ACCEL = "accelerate_configs/2x8-sp8-dp2-offload-optimizer.yaml"
TOKEN = "hf_SlurmNeverPrintThis0123456789"


def expected(rank: int, main: str, port: str, *overrides: str) -> list[str]:
    head = ["accelerate", "launch", "--config_file", ACCEL, "--num_machines", "2", "--machine_rank", str(rank)]
    rendezvous = ["--main_process_ip", main, "--main_process_port", port]
    return [*head, *rendezvous, "recipes/sft.py", "--config", f"recipes/{RECIPE}.yaml", *overrides]


def sbatch(*args: str, env: dict) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PY": str(REPO / ".venv/bin/python"), **env}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def launch_lines(stdout: str) -> list[list[str]]:
    return [shlex.split(line.removeprefix("[launch] ")) for line in stdout.splitlines() if line.startswith("[launch]")]


@pytest.mark.subprocess
def test_dry_run_prints_one_launch_line_per_node_and_no_token():
    overrides = ("--max_steps", "20", "--run_name", "a b")
    proc = sbatch("qwen32b-256k", *overrides, "--hub_token", TOKEN, env={"DRY_RUN": "1", "SLURM_NNODES": "2"})
    assert proc.returncode == 0, proc.stderr
    assert [line for line in proc.stdout.splitlines() if line.startswith("[slurm] node ")] == [
        "[slurm] node 0 (node0):",
        "[slurm] node 1 (node1):",
    ]
    assert launch_lines(proc.stdout) == [expected(rank, "node0", "20000", *overrides) for rank in (0, 1)]
    assert TOKEN not in proc.stdout + proc.stderr


@pytest.mark.subprocess
def test_node_count_other_than_the_configs_is_refused():
    proc = sbatch(RECIPE, env={"DRY_RUN": "1", "SLURM_NNODES": "3"})
    assert proc.returncode == 2
    assert f"{ACCEL}: recipe cannot run:\n  asks for num_machines=2 but the launch has 3" in proc.stderr
    assert "sbatch --nodes 2" in proc.stderr


@pytest.fixture
def fake_slurm(tmp_path):
    bin_dir, record = tmp_path / "bin", tmp_path / "commands.txt"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(f'#!/bin/bash\nprintf "%q " "$@" >> {record}\necho >> {record}\n')
    (bin_dir / "scontrol").write_text("#!/bin/bash\nprintf 'gpu-a\\ngpu-b\\n'\n")
    srun = '#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\n'
    srun += 'for node in 0 1; do SLURM_NODEID=$node "$@" || exit 1; done\n'
    (bin_dir / "srun").write_text(srun)
    for tool in ("python", "scontrol", "srun"):
        (bin_dir / tool).chmod(0o755)
    return bin_dir, record


@pytest.mark.subprocess
def test_batch_node_checks_once_then_each_node_launches_with_its_own_rank(fake_slurm):
    bin_dir, record = fake_slurm
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_NNODES": "2", "SLURM_JOB_ID": "1234"}
    env.update(SLURM_JOB_NODELIST="gpu-[a-b]", PY=str(bin_dir / "python"))
    proc = sbatch(RECIPE, "--max_steps", "5", env=env)
    assert proc.returncode == 0, proc.stderr
    batch, *nodes = [shlex.split(line) for line in record.read_text().splitlines()]
    sft = ["-m", "longctx", "sft", RECIPE]
    assert batch == [*sft, "--no-launch", "--num-machines", "2", "--", "--max_steps", "5"]
    rendezvous = ["--num-machines", "2", "--main-process-ip", "gpu-a", "--main-process-port", "21234"]
    assert nodes == [
        [*sft, "--no-checks", *rendezvous, "--machine-rank", str(r), "--", "--max_steps", "5"] for r in "01"
    ]
    for rank, node in enumerate(nodes):  # what each node's command becomes: the CLI's own line for it
        shown = subprocess.run(
            [sys.executable, *node[:4], "--dry-run", *node[5:]], cwd=REPO, capture_output=True, text=True, check=True
        )
        assert launch_lines(shown.stdout) == [expected(rank, "gpu-a", "21234", "--max_steps", "5")]
