"""Faults injected into real launches, each showing that nothing is lost (docs/reliability.md).

Every run here is tests/recipes/resume.yaml (the tiny Llama, sp=2 over 2 CPU processes, DeepSpeed ZeRO-3 over gloo,
AdamW, a cosine schedule) through the launch process of `python -m longctx sft` (longctx/launch/supervise.py), and
"nothing lost" means: the run that finally ends has every step's loss, the data order of both ranks and the final
weights of the uninterrupted run (`uninterrupted_resume_run`, tests/conftest.py), step for step.

Quick tier: one chain of three launches of the same command (`--resume_from_checkpoint auto --save_total_limit 1`)
into one output folder, as a requeued job would run it:
  1. the folder is empty, so `auto` starts fresh; rank 0 sends SIGTERM to the launcher entering step 2: every rank
     stops after step 2 with a complete checkpoint-2, and the launch exits 75 (PREEMPTED);
  2. `auto` resumes checkpoint-2; rank 0 is SIGKILLed in the middle of the save of checkpoint-3 (every file written,
     not yet marked complete): the launch exits 1 naming rank 0, checkpoint-2 survives (upstream's rotation, with
     save_total_limit 1, deletes it before checkpoint-3 is complete) and checkpoint-3 carries no mark;
  3. `auto` resumes checkpoint-2 again, never the partial checkpoint-3, and trains to the end.
Slow tier: SIGUSR1 to one rank only; a NaN loss stopping the run, or skipped when the recipe asks; a save into a
full filesystem and into a read-only one (a real tmpfs, mounted where the user may: root here); the PyTorchJob
manifest's command and environment as two pods on one host, and the world-size-1 refusal.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from longctx.config.checkpoints import TOPOLOGY_FILE, latest_checkpoint, resolve_resume
from longctx.config.exit_codes import FAILED, NONFINITE, PREEMPTED, SAVE_FAILED
from longctx.launch.accelerate_launch import free_port
from longctx.memory_plan.arch import Arch
from longctx.memory_plan.checkpoint_size import checkpoint_bytes
from tests.helpers import REPO
from tests.helpers.checkpoints.resume_runs import RECIPE, computed_steps, fingerprints, launch_resume, losses
from tests.helpers.launching.launch import assert_ok, log_history

pytestmark = [pytest.mark.distributed, pytest.mark.faults]

AUTO = ("--resume_from_checkpoint", "auto")
DEATH_BUDGET_S = 150  # start-up (~25-40 s on 2 busy cores) + 3 steps + a save + torchrun's teardown (30 s at most)


def same_as_uninterrupted(reference: dict, out: Path, probe: Path) -> None:
    """Every step's loss (fp32 on CPU, the same reductions in the same order: equal to rounding), both ranks' data
    order and the final weights of the run in `out` are the uninterrupted run's."""
    full, resumed = losses(log_history(reference["out"])), losses(log_history(out))
    assert sorted(resumed) == sorted(full) == [1, 2, 3, 4, 5, 6]
    for step in full:
        assert resumed[step] == pytest.approx(full[step], rel=1e-6, abs=0), step
    assert fingerprints(probe) == fingerprints(reference["probe"])
    weights, expected = load_file(out / "model.safetensors"), load_file(reference["out"] / "model.safetensors")
    assert sorted(weights) == sorted(expected)
    for name, tensor in expected.items():
        torch.testing.assert_close(weights[name], tensor, rtol=1e-6, atol=1e-7, msg=name)


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults-chain")
    out, probe = root / "out", root / "probe"
    command = (*AUTO, "--save_total_limit", "1")
    runs = {"out": out, "probe": probe}
    preempt = {
        "PROBE_SIGNAL_RANK": "0",
        "PROBE_SIGNAL_STEP": "2",
        "PROBE_SIGNAL": "SIGTERM",
        "PROBE_SIGNAL_TO": "launcher",
    }
    runs["preempted"] = launch_resume(out, probe, *command, env=preempt, launcher=True)
    runs["after_preemption"] = {path.name: (path / TOPOLOGY_FILE).is_file() for path in out.glob("checkpoint-*")}
    start = time.monotonic()
    crash = {"PROBE_KILL_SAVE_RANK": "0", "PROBE_KILL_SAVE_STEP": "3"}
    runs["crashed"] = launch_resume(out, probe, *command, env=crash, launcher=True, timeout=DEATH_BUDGET_S + 60)
    runs["crashed_after_s"] = time.monotonic() - start
    runs["after_crash"] = {path.name: (path / TOPOLOGY_FILE).is_file() for path in out.glob("checkpoint-*")}
    runs["finished"] = launch_resume(out, probe, *command, launcher=True)
    return runs


def test_sigterm_to_the_launcher_stops_every_rank_with_a_checkpoint_and_exit_75(chain):
    run = chain["preempted"]
    assert run.returncode == PREEMPTED, run.stderr[-3000:]
    assert (
        f"[resume] auto: {chain['out']} holds no complete checkpoint-N folder, so the run starts fresh" in run.stdout
    )
    assert "[launch] SIGTERM: asked 2 rank(s) to stop" in run.stderr
    assert "[preempt] rank(s) 0, 1 asked to stop: saving checkpoint-2, then exiting" in run.stdout
    assert (
        f"[launch] preempted (SIGTERM received); latest complete checkpoint: {chain['out']}/checkpoint-2" in run.stderr
    )
    assert chain["after_preemption"] == {"checkpoint-2": True}  # stopped after step 2, complete


def test_a_kill_in_the_middle_of_a_save_leaves_the_previous_checkpoint_and_names_the_rank(chain):
    run = chain["crashed"]
    assert run.returncode == FAILED, run.stderr[-3000:]
    assert chain["crashed_after_s"] < DEATH_BUDGET_S
    assert f"[resume] auto: resuming from {chain['out']}/checkpoint-2, the latest complete checkpoint" in run.stdout
    (said,) = [line for line in run.stderr.splitlines() if line.startswith("[launch] rank ")]
    assert said.startswith("[launch] rank 0 (local rank 0, pid ") and "killed by SIGKILL" in said, said
    assert chain["after_crash"] == {"checkpoint-2": True, "checkpoint-3": False}


def test_the_same_command_then_resumes_the_last_complete_checkpoint_and_loses_nothing(chain, uninterrupted_resume_run):
    run = chain["finished"]
    assert_ok(run)
    assert f"[resume] auto: resuming from {chain['out']}/checkpoint-2, the latest complete checkpoint" in run.stdout
    # rank 1 began: 1, 2 (preempted after 2), 3 (its save killed), then 3 again from checkpoint-2, ..., 6
    assert computed_steps(chain["probe"]) == [1, 2, 3, 3, 4, 5, 6]
    same_as_uninterrupted(uninterrupted_resume_run, chain["out"], chain["probe"])
    assert sorted(p.name for p in chain["out"].glob("checkpoint-*")) == ["checkpoint-6"]  # save_total_limit 1
    # the disk plan's count of a checkpoint (longctx/memory_plan/checkpoint_size.py) against a real one
    arch = Arch.from_config(json.loads((REPO / "recipes/assets/tiny-llama/config.json").read_text()))
    counted = checkpoint_bytes(arch, zero_stage=3, weight_bytes=4)
    on_disk = sum(f.stat().st_size for f in (chain["out"] / "checkpoint-6").rglob("*") if f.is_file())
    assert counted <= on_disk <= 1.1 * counted  # the rest: scheduler, RNG states, tokenizer, DeepSpeed's scripts


@pytest.mark.slow
def test_sigusr1_to_one_rank_stops_every_rank_and_the_run_resumes_to_the_same_result(
    tmp_path, uninterrupted_resume_run
):
    """Slurm's `--signal` or a `kill -USR1` that reaches one rank only: the per-step agreement stops both."""
    out, probe = tmp_path / "out", tmp_path / "probe"
    signal_one = {
        "PROBE_SIGNAL_RANK": "1",
        "PROBE_SIGNAL_STEP": "4",
        "PROBE_SIGNAL": "SIGUSR1",
        "PROBE_SIGNAL_TO": "self",
    }
    stopped = launch_resume(out, probe, *AUTO, env=signal_one, launcher=True)
    assert stopped.returncode == PREEMPTED, stopped.stderr[-3000:]
    assert "[preempt] rank(s) 1 asked to stop: saving checkpoint-4, then exiting" in stopped.stdout
    assert latest_checkpoint(out) == out / "checkpoint-4"
    finished = launch_resume(out, probe, *AUTO, launcher=True)
    assert_ok(finished)
    assert computed_steps(probe) == [1, 2, 3, 4, 5, 6]
    same_as_uninterrupted(uninterrupted_resume_run, out, probe)


@pytest.mark.slow
def test_a_nan_loss_stops_the_run_at_that_step_naming_the_step_rank_and_last_good_checkpoint(tmp_path):
    out, probe = tmp_path / "out", tmp_path / "probe"
    nan = {"PROBE_NAN_RANK": "1", "PROBE_NAN_STEP": "2"}
    run = launch_resume(out, probe, "--max_steps", "3", "--save_steps", "1", env=nan, launcher=True)
    assert run.returncode == NONFINITE, run.stderr[-3000:]
    (said,) = [line for line in run.stderr.splitlines() if "error: [non-finite]" in line]
    assert said.startswith(
        "error: [non-finite] step 2: the loss is NaN or Inf on rank(s) 1 and the gradient norm is inf"
    ), said
    assert "(the optimizer discarded its update)" in said  # DeepSpeed ZeRO-3 skipped it
    assert f"last good checkpoint: {out}/checkpoint-1 (`--resume_from_checkpoint auto` resumes it)" in said
    assert "[launch] rank 0: stopped on a non-finite loss or gradient norm" in run.stderr
    assert computed_steps(probe) == [1, 2]  # never trained on: no step 3
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1"]  # nothing of step 2 saved


@pytest.mark.slow
def test_a_nan_step_is_skipped_and_counted_when_the_recipe_asks(tmp_path):
    out, probe = tmp_path / "out", tmp_path / "probe"
    nan = {"PROBE_NAN_RANK": "1", "PROBE_NAN_STEP": "3"}
    args = ("--max_steps", "3", "--save_steps", "1", "--save_total_limit", "2", "--on_nonfinite", "skip")
    assert_ok(launch_resume(out, probe, *args, env=nan, launcher=True))
    history = {row["step"]: row for row in log_history(out)}
    assert history[3].get("nonfinite_skipped") == 1 and "nonfinite_skipped" not in history[2]
    # DeepSpeed discarded step 3's update: the final weights are checkpoint-2's
    after_two, final = load_file(out / "checkpoint-2" / "model.safetensors"), load_file(out / "model.safetensors")
    for name, tensor in after_two.items():
        assert torch.equal(final[name], tensor), name


def mount_tmpfs(where: Path, size_kib: int) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(where)], capture_output=True, check=False
    )
    return proc.returncode == 0


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 4 MiB tmpfs: room for one checkpoint of the tiny model (2.6 MB), not two. Mounting needs root."""
    where = tmp_path / "disk"
    if shutil.which("mount") is None or not mount_tmpfs(where, 4096):
        pytest.skip(
            "cannot mount a tmpfs here (needs root): tests/faults/test_checkpoint_faults.py injects ENOSPC instead"
        )
    yield where
    subprocess.run(["umount", str(where)], check=False)


@pytest.mark.slow
def test_a_save_into_a_full_disk_or_a_read_only_one_fails_clearly_and_keeps_the_previous_checkpoint(
    small_tmpfs, tmp_path
):
    from longctx.preflight.run import preflight_parser, run_preflight

    out = small_tmpfs / "out"
    args = ("--max_steps", "3", "--save_steps", "1", "--save_total_limit", "1")
    refused = run_preflight(
        RECIPE, ["--output_dir", str(out), *args], preflight_parser().parse_args([RECIPE, "--this-machine"])
    )[1]
    assert [p for p in refused if p.key == "output_dir" and "a save would fail" in p.message], refused
    full = launch_resume(out, tmp_path / "probe", *args, launcher=True)
    assert full.returncode == SAVE_FAILED, full.stderr[-3000:]
    said = [line for line in full.stderr.splitlines() if "error: [checkpoint]" in line]  # every rank that failed
    assert said and all(f"saving {out}/checkpoint-2 failed: no space left" in line for line in said), said
    assert all(f"The previous complete checkpoint {out}/checkpoint-1 is intact" in line for line in said)
    assert resolve_resume("auto", out) == str(out / "checkpoint-1")
    shutil.rmtree(out / "checkpoint-2")
    subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
    read_only = launch_resume(out, tmp_path / "probe", *args, *AUTO, launcher=True)
    assert read_only.returncode == SAVE_FAILED, read_only.stderr[-3000:]
    said = [line for line in read_only.stderr.splitlines() if "error: [checkpoint]" in line]
    assert said and all("no permission to write" in line and "checkpoint-1 is intact" in line for line in said), said
    assert resolve_resume("auto", out) == str(out / "checkpoint-1")


MANIFEST = REPO / "scripts/kubernetes/pytorchjob.yaml"
TWO_MACHINES = "tests/accelerate_configs/cpu-2x1-sp2.yaml"


def pod_environment(job: dict, node_rank: int, port: int) -> dict:
    """What training-operator v1.7+ sets in a pod of this PyTorchJob (pkg/controller.v1/pytorch/envvar.go), with
    the Master's service at 127.0.0.1: two pods on one host."""
    replicas = sum(spec["replicas"] for spec in job["spec"]["pytorchReplicaSpecs"].values())
    nproc = int(job["spec"]["nprocPerNode"])
    env = {"PET_NNODES": str(replicas), "PET_NODE_RANK": str(node_rank), "PET_NPROC_PER_NODE": str(nproc)}
    env |= {"PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": str(port), "MASTER_ADDR": "127.0.0.1"}
    return env | {"MASTER_PORT": str(port), "WORLD_SIZE": str(replicas * nproc), "RANK": str(node_rank)}


def pod_command(job: dict, out: Path) -> list[str]:
    """The manifest's command with its GPU recipe swapped for the CPU stand-in on two machines of one process."""
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    command = list(container["command"])
    assert command[:4] == ["python", "-m", "longctx", "sft"]
    overrides = command[command.index("--") + 1 :]
    stand_in = ["--accelerate_config", TWO_MACHINES, "--output_dir", str(out), "--max_steps", "2", "--save_steps", "9"]
    return [sys.executable, "-m", "longctx", "sft", RECIPE, "--", *overrides, *stand_in]


@pytest.mark.slow
def test_the_pytorchjob_environment_of_two_pods_on_one_host_starts_a_two_node_mesh(tmp_path):
    job = yaml.safe_load(MANIFEST.read_text())
    port, out = free_port(), tmp_path / "out"
    pods = []
    for rank in (0, 1):
        env = {**os.environ, **pod_environment(job, rank, port), "PYTHONPATH": str(REPO)}  # offline: conftest
        log = open(tmp_path / f"pod{rank}.log", "w+")  # noqa: SIM115 - closed below
        pods.append(
            (subprocess.Popen(pod_command(job, out), cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT), log)
        )
    outputs = []
    for proc, log in pods:
        proc.wait(timeout=600)
        log.seek(0)
        outputs.append(log.read())
        log.close()
        assert proc.returncode == 0, outputs[-1][-3000:]
    for rank, text in enumerate(outputs):
        assert f"--num_machines 2 --machine_rank {rank}" in text and "--main_process_ip 127.0.0.1" in text
    assert "[mesh] world=2: dp_replicate=1 x dp_shard=1 x sp=2" in outputs[0]
    assert [row["step"] for row in log_history(out)] == [1, 2]


@pytest.mark.slow
def test_a_two_node_recipe_at_world_size_1_is_refused_with_the_reason(tmp_path):
    job = yaml.safe_load(MANIFEST.read_text())
    env = {**os.environ, **pod_environment(job, 0, free_port()), "PET_NNODES": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        pod_command(job, tmp_path / "out"), cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 2, proc.stderr
    assert (
        f"{TWO_MACHINES}: recipe cannot run:\n  asks for num_machines=2 but PET_NNODES=1, PET_NODE_RANK=0 has 1"
        in proc.stderr
    )
    assert not (tmp_path / "out").exists()
