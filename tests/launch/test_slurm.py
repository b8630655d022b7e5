"""scripts/slurm/sft.sbatch: the per-node launch lines it prints (DRY_RUN=1) and the commands it really runs.

Both go through `python -m longctx sft` (the one launch home). The real branch runs with stand-ins for `scontrol`,
`srun` and the job's Python on PATH (srun runs its command once per node with that node's SLURM_NODEID; the
stand-in Python records its arguments), so the test sees exactly what the batch node and every node run; the
node command then goes through the real CLI's `--dry-run` to show the accelerate line it becomes. No SLURM and no
training needed.
"""

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.launching.launch import REPO

SCRIPT = REPO / "scripts/slurm/sft.sbatch"
RECIPE = "qwen3-32b/sft-256k-2x8-sp8-dp2"
ACCEL = "accelerate_configs/2x8-sp8-dp2-offload-optimizer.yaml"
TOKEN = "hf_SlurmNeverPrintThis0123456789"


AUTO = ("--resume_from_checkpoint", "auto")  # the script's: one command starts and resumes (a requeued job)


def expected(rank: int, main: str, port: str, *overrides: str) -> list[str]:
    head = ["accelerate", "launch", "--config_file", ACCEL, "--num_machines", "2", "--machine_rank", str(rank)]
    rendezvous = ["--main_process_ip", main, "--main_process_port", port]
    return [*head, *rendezvous, "recipes/sft.py", "--config", f"recipes/{RECIPE}.yaml", *AUTO, *overrides]


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
    """Stand-ins on PATH: `python` records its arguments and exits with $FAKE_EXIT on the nodes (0 by default) after
    $FAKE_SLEEP seconds; `scontrol` lists two hosts and records a requeue; `scancel` records the signal it sends."""
    bin_dir, record = tmp_path / "bin", tmp_path / "commands.txt"
    bin_dir.mkdir()
    python = f'#!/bin/bash\nprintf "%q " "$@" >> {record}\necho >> {record}\n'
    python += '[ -n "${SLURM_NODEID:-}" ] && sleep "${FAKE_SLEEP:-0}" && exit "${FAKE_EXIT:-0}"\nexit 0\n'
    (bin_dir / "python").write_text(python)
    scontrol = f'#!/bin/bash\n[ "$1" = requeue ] && echo "scontrol $*" >> {record}.slurm\n'
    (bin_dir / "scontrol").write_text(scontrol + "[ \"$1\" = show ] && printf 'gpu-a\\ngpu-b\\n'\nexit 0\n")
    (bin_dir / "scancel").write_text(f'#!/bin/bash\necho "scancel $*" >> {record}.slurm\n')
    srun = '#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\nstatus=0\n'
    srun += 'for node in 0 1; do SLURM_NODEID=$node "$@" || status=$?; done\nexit $status\n'
    (bin_dir / "srun").write_text(srun)
    for tool in ("python", "scontrol", "scancel", "srun"):
        (bin_dir / tool).chmod(0o755)
    return bin_dir, record


def slurm_env(bin_dir, **extra) -> dict:
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_NNODES": "2", "SLURM_JOB_ID": "1234"}
    return {**env, "SLURM_JOB_NODELIST": "gpu-[a-b]", "PY": str(bin_dir / "python"), **extra}


@pytest.mark.subprocess
@pytest.mark.slow  # not in make test-quick; there: the dry run's per-node lines and the requeue on a signal
def test_batch_node_checks_once_then_each_node_launches_with_its_own_rank(fake_slurm):
    bin_dir, record = fake_slurm
    proc = sbatch(RECIPE, "--max_steps", "5", env=slurm_env(bin_dir))
    assert proc.returncode == 0, proc.stderr
    batch, *nodes = [shlex.split(line) for line in record.read_text().splitlines()]
    sft = ["-m", "longctx", "sft", RECIPE]
    assert batch == [*sft, "--no-launch", "--num-machines", "2", "--", *AUTO, "--max_steps", "5"]
    rendezvous = ["--num-machines", "2", "--main-process-ip", "gpu-a", "--main-process-port", "21234"]
    assert nodes == [
        [*sft, "--no-checks", *rendezvous, "--machine-rank", str(r), "--", *AUTO, "--max_steps", "5"] for r in "01"
    ]
    assert not Path(f"{record}.slurm").exists()  # finished: no requeue
    for rank, node in enumerate(nodes):  # what each node's command becomes: the CLI's own line for it
        shown = subprocess.run(
            [sys.executable, *node[:4], "--dry-run", *node[5:]], cwd=REPO, capture_output=True, text=True, check=True
        )
        assert launch_lines(shown.stdout) == [expected(rank, "gpu-a", "21234", "--max_steps", "5")]


@pytest.mark.subprocess
@pytest.mark.faults
def test_a_preempted_run_is_requeued_and_a_failed_one_is_not(fake_slurm):
    """The ranks' PREEMPTED status (75) requeues the job, whose same command resumes (`auto`); a failure does not."""
    bin_dir, record = fake_slurm
    preempted = sbatch(RECIPE, env=slurm_env(bin_dir, FAKE_EXIT="75"))
    assert preempted.returncode == 75, preempted.stderr
    assert Path(f"{record}.slurm").read_text() == "scontrol requeue 1234\n"
    assert "[slurm] preempted (exit 75): requeueing job 1234" in preempted.stdout
    Path(f"{record}.slurm").unlink()
    failed = sbatch(RECIPE, env=slurm_env(bin_dir, FAKE_EXIT="1"))
    assert failed.returncode == 1 and not Path(f"{record}.slurm").exists()


@pytest.mark.subprocess
@pytest.mark.faults
def test_the_warning_signal_reaches_every_process_of_the_step_and_requeues(fake_slurm):
    """`--signal=B:USR1@600` reaches the batch script: it passes SIGUSR1 to the job step (scancel) while the step
    runs, and requeues once the step has ended, whatever status the step ended with."""
    bin_dir, record = fake_slurm
    env = {**os.environ, "PYTHONPATH": str(REPO), **slurm_env(bin_dir, FAKE_SLEEP="3", FAKE_EXIT="75")}
    job = subprocess.Popen(
        ["bash", str(SCRIPT), RECIPE], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(record.read_text().splitlines() if record.exists() else []) < 2:
        time.sleep(0.2)  # the batch step ran preflight; node 0's launch has started
    job.send_signal(signal.SIGUSR1)
    out, err = job.communicate(timeout=120)
    assert job.returncode == 75, err
    assert Path(f"{record}.slurm").read_text().splitlines() == ["scancel --signal=USR1 1234", "scontrol requeue 1234"]
    assert "[slurm] SIGUSR1" in out


def test_the_job_asks_for_the_signal_ahead_of_the_kill_and_writes_its_log_where_a_fresh_clone_has_a_folder():
    head = [line for line in SCRIPT.read_text().splitlines() if line.startswith("#SBATCH")]
    assert {"#SBATCH --signal=B:USR1@600", "#SBATCH --requeue", "#SBATCH --open-mode=append"} <= set(head)
    (output,) = [line.split("=", 1)[1] for line in head if line.startswith("#SBATCH --output=")]
    assert "/" not in output  # the submit directory itself: `outputs/` does not exist on a fresh clone
