"""The fault handling's parts, each held to its behaviour without starting a process (docs/reliability.md); the real
launches are tests/faults/test_faults_launch.py.

- `resume_from_checkpoint: auto`: the latest complete checkpoint, or a fresh start; a folder without the completion
  mark is never chosen;
- the rotation `save_total_limit` asks for never deletes the newest complete checkpoint before a newer one is
  complete (upstream's does: the negative control), and the mark is written atomically;
- the run guard: a preemption request sets the save and the stop; a NaN loss or gradient norm stops the run naming
  step, rank and last good checkpoint, or is skipped and counted where the optimizer discarded the update;
- a save that fails for space (ENOSPC injected at the write) or permission says so and names the intact checkpoint;
- the launcher: which rank died, and one exit status per outcome; SIGTERM/SIGUSR1 forwarded to the ranks;
- Kubernetes/torchrun: the PET_* environment becomes accelerate's machine flags, a count other than the recipe's is
  refused (world size 1 for a 2-node recipe), and the mesh check names the reason; the PyTorchJob manifest;
- disk: checkpoint size per ZeRO stage x what is kept against the free space; every GPU recipe's limit is the plan's;
- staging: what a recipe needs from the Hub, fetched through stand-in downloaders, and found missing offline.
"""

import errno
import json
import os
import re
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from transformers import TrainerControl, TrainerState

from longctx.config.checkpoints import (
    SAVING_MARK,
    TOPOLOGY_FILE,
    latest_checkpoint,
    resolve_resume,
    rotation,
    write_record,
)
from longctx.config.exit_codes import FAILED, NONFINITE, PREEMPTED, SAVE_FAILED
from longctx.config.paths import REPO_ROOT, recipe_names, resolve_recipe
from longctx.config.recipe import RecipeError
from longctx.config.topology import load_yaml_mapping, read_topology
from longctx.launch import supervise
from longctx.launch.cluster_env import cluster_machines
from longctx.launch.staging import Need, fetch, missing, needs
from longctx.memory_plan.arch import Arch
from longctx.memory_plan.checkpoint_size import GIB, checkpoint_bytes, disk_plan, suggested_limit
from longctx.training.checkpoints.commit import CheckpointSaveError, explained_save_failures, failure_kind
from longctx.training.faults.run_guard import NonFiniteStop, RunGuard
from longctx.training.faults.signals import PreemptionRequest
from longctx.training.sequence_parallel.mesh import check_launched_mesh

pytestmark = pytest.mark.faults

TWO_NODES = "qwen3-32b/sft-256k-2x8-sp8-dp2"  # accelerate_configs/2x8-sp8-dp2-offload-optimizer.yaml
CLUSTER_VARS = ("PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT", "WORLD_SIZE", "RANK")
CLUSTER_VARS += ("MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK")


def checkpoint(root: Path, step: int, complete: bool = True) -> Path:
    """A `checkpoint-N` folder as a save leaves it: complete (the mark written last) or interrupted (no mark)."""
    path = root / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / SAVING_MARK).touch()
    (path / "trainer_state.json").write_text("{}")  # the Trainer's last file: a crash can come after it
    if complete:
        write_record(path / TOPOLOGY_FILE, {"world_size": 2})
        (path / SAVING_MARK).unlink()
    return path


# ---- which checkpoint `auto` resumes, and what the rotation deletes


def test_auto_starts_fresh_on_an_empty_or_missing_folder_and_resumes_the_latest_complete_one(tmp_path):
    assert resolve_resume("auto", tmp_path / "never-created") is None
    assert resolve_resume("auto", tmp_path) is None
    checkpoint(tmp_path, 2)
    checkpoint(tmp_path, 4, complete=False)  # a save interrupted in the middle: never chosen
    assert resolve_resume("auto", tmp_path) == str(tmp_path / "checkpoint-2")
    assert resolve_resume("AUTO", tmp_path) == str(tmp_path / "checkpoint-2")


def test_a_runs_first_checkpoint_interrupted_after_the_trainers_last_file_is_not_resumed(tmp_path):
    """With no complete checkpoint yet, the Trainer's last file would pass a folder saved elsewhere as complete;
    the in-progress mark keeps a save this repository began out."""
    first = checkpoint(tmp_path, 3, complete=False)
    assert resolve_resume("auto", tmp_path) is None
    (first / SAVING_MARK).unlink()  # a checkpoint another trainer saved: no mark, no record
    assert resolve_resume("auto", tmp_path) == str(first)
    with pytest.raises(ValueError, match="use `auto` to start fresh"):
        resolve_resume("true", tmp_path / "never-created")


def test_the_rotation_keeps_the_newest_complete_checkpoint_until_a_newer_one_is_complete(tmp_path):
    checkpoint(tmp_path, 1, complete=False)  # left by an older crash
    two = checkpoint(tmp_path, 2)
    three = checkpoint(tmp_path, 3, complete=False)  # being written
    assert rotation(tmp_path, keep=1) == [tmp_path / "checkpoint-1"]  # stale partial only; 2 stays, 3 is in flight
    write_record(three / TOPOLOGY_FILE, {"world_size": 2})  # the commit
    (three / SAVING_MARK).unlink()
    assert sorted(rotation(tmp_path, keep=1)) == [tmp_path / "checkpoint-1", two]
    assert rotation(tmp_path, keep=1, protect=two) == [tmp_path / "checkpoint-1"]  # the Trainer's best checkpoint
    assert rotation(tmp_path, keep=None) == []


def test_upstreams_rotation_deletes_the_only_complete_checkpoint_before_the_new_one_is_complete(tmp_path):
    """The negative control: what transformers 5.23 runs at the end of its save, before anything marks the new
    folder complete (and on rank 0 without waiting for the others): with save_total_limit 1 a crash after it
    leaves nothing to resume. The trainer turns it off (longctx/training/checkpoints/commit.py)."""
    from transformers.trainer_utils import rotate_checkpoints

    checkpoint(tmp_path, 2)
    os.utime(tmp_path / "checkpoint-2", (1, 1))
    checkpoint(tmp_path, 3, complete=False)
    rotate_checkpoints(output_dir=str(tmp_path), save_total_limit=1, use_mtime=True)
    assert latest_checkpoint(tmp_path) is None


def test_the_completion_mark_is_whole_or_absent(tmp_path, monkeypatch):
    path = tmp_path / TOPOLOGY_FILE
    write_record(path, {"world_size": 2})

    def full_disk(fd):  # the new record is written, but cannot reach the disk
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError):
        write_record(path, {"world_size": 4})
    assert json.loads(path.read_text()) == {"world_size": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == [TOPOLOGY_FILE]  # no temporary file left


@pytest.mark.parametrize("rank", [0, 1])
def test_every_ranks_files_are_durable_before_the_barrier_and_the_mark_after_it(tmp_path, monkeypatch, rank):
    """The commit on each rank, in order: its own sync (its files are written by then), the barrier, and only on the
    saving rank the mark, flushed before the rotation. Before: only each node's local main rank synced, before the
    barrier, while the node's other ranks could still be writing (rank 1 here never synced)."""
    from types import SimpleNamespace

    from longctx.training.checkpoints import commit as commit_module

    events = []
    folder = checkpoint(tmp_path, 3, complete=False)
    monkeypatch.setattr(os, "sync", lambda: events.append("sync"))
    monkeypatch.setattr(commit_module, "topology_record", lambda *args: {"world_size": 2})
    monkeypatch.setattr(commit_module, "write_record", lambda path, record: events.append("mark"))
    acc = SimpleNamespace(
        is_local_main_process=rank == 0, is_main_process=rank == 0, wait_for_everyone=lambda: events.append("barrier")
    )
    trainer = SimpleNamespace(
        accelerator=acc, args=SimpleNamespace(should_save=rank == 0), recipe=SimpleNamespace(config_source="r.yaml"),
        state=None,
    )  # fmt: skip
    commit_module.commit(trainer, folder)
    assert events == (["sync", "barrier", "mark", "sync"] if rank == 0 else ["sync", "barrier"])
    assert (folder / SAVING_MARK).exists() == (rank != 0)


def test_a_crash_in_the_middle_of_a_universal_conversion_leaves_nothing_a_resume_would_load(tmp_path, monkeypatch):
    """DeepSpeed's converter stood in for (it writes its output folder, then `latest_universal` beside it): killed
    half-way, no `latest_universal` names a folder; the next conversion completes and names the renamed folder."""
    from deepspeed.checkpoint import ds_to_universal

    from longctx.config.checkpoints import UNIVERSAL_LATEST
    from longctx.training.checkpoints.universal import convert

    folder = checkpoint(tmp_path, 3)
    (folder / "latest").write_text("global_step3")

    def crashed(args):
        Path(args.output_folder, "zero").mkdir(parents=True)
        raise KeyboardInterrupt  # the process dies here

    def converter(args):
        Path(args.output_folder, "zero").mkdir(parents=True)
        Path(args.output_folder, "zero", "optimizer_state.pt").write_text("merged")
        Path(args.output_folder).parent.joinpath(UNIVERSAL_LATEST).write_text(Path(args.output_folder).name)

    monkeypatch.setattr(ds_to_universal, "main", crashed)
    with pytest.raises(KeyboardInterrupt):
        convert(folder)
    assert not (folder / UNIVERSAL_LATEST).exists() and not (folder / "global_step3_universal").exists()
    monkeypatch.setattr(ds_to_universal, "main", converter)
    assert convert(folder) == folder / "global_step3_universal"
    assert (folder / UNIVERSAL_LATEST).read_text() == "global_step3_universal"
    assert (folder / "global_step3_universal" / "zero" / "optimizer_state.pt").read_text() == "merged"
    assert not (folder / ".universal-staging").exists()


# ---- the run guard (preemption and non-finite numbers), on one process


class Accelerator:
    num_processes, process_index, device, is_main_process = 1, 0, torch.device("cpu"), True

    def __init__(self):
        self.lines = []

    def print(self, *args):
        self.lines.append(" ".join(map(str, args)))


class Engine:
    def __init__(self, norm):
        self.norm = norm

    def get_global_grad_norm(self):
        return self.norm


def guard_at(tmp_path, step=2, policy="stop", norm=1.0, asked=None):
    trainer = SimpleNamespace(accelerator=Accelerator(), model_wrapped=Engine(norm))
    preemption = PreemptionRequest()
    preemption.signal_name = asked
    guard = RunGuard(trainer, policy, preemption)
    args = SimpleNamespace(output_dir=str(tmp_path))
    return guard, args, TrainerState(global_step=step, max_steps=6), TrainerControl()


def test_a_preemption_request_saves_and_stops_at_the_step_end(tmp_path):
    guard, args, state, control = guard_at(tmp_path, asked="SIGUSR1")
    guard.on_step_end(args, state, control)
    assert control.should_save and control.should_training_stop and guard.preempted_at == 2
    guard, args, state, control = guard_at(tmp_path)
    guard.on_step_end(args, state, control)
    assert not control.should_save and not control.should_training_stop and guard.preempted_at is None


def test_a_signal_only_sets_the_request(tmp_path):
    request = PreemptionRequest()
    old = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR1)}
    try:
        request.install()
        os.kill(os.getpid(), signal.SIGUSR1)  # this process survives: Python's default would end it
        assert request.signal_name == "SIGUSR1" and request.requested
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def test_a_nan_loss_stops_the_run_naming_step_rank_and_last_good_checkpoint(tmp_path):
    checkpoint(tmp_path, 1)
    guard, args, state, control = guard_at(tmp_path)
    guard.see_loss(torch.tensor(2.0))
    guard.see_loss(torch.tensor(float("nan")))  # a later micro-batch of the same step
    with pytest.raises(NonFiniteStop) as stop:
        guard.on_step_end(args, state, control)
    said = str(stop.value)
    assert said.startswith("step 2: the loss is NaN or Inf on rank(s) 0. The run stops at this step")
    assert f"last good checkpoint: {tmp_path}/checkpoint-1 (`--resume_from_checkpoint auto` resumes it)" in said


def test_an_infinite_gradient_norm_stops_the_run_too(tmp_path):
    guard, args, state, control = guard_at(tmp_path, norm=float("inf"))
    guard.see_loss(torch.tensor(2.0))
    with pytest.raises(NonFiniteStop, match=r"step 2: the gradient norm is inf.*last good checkpoint: none"):
        guard.on_step_end(args, state, control)


def test_skip_goes_on_only_where_the_optimizer_discarded_the_update(tmp_path):
    guard, args, state, control = guard_at(tmp_path, policy="skip", norm=float("inf"))
    guard.see_loss(torch.tensor(float("nan")))
    guard.on_step_end(args, state, control, optimizer=SimpleNamespace(step_was_skipped=True))
    assert guard.skipped == 1 and "its update was discarded (on_nonfinite: skip)" in guard.trainer.accelerator.lines[0]
    logs = {"loss": 1.0}
    state.log_history.append({**logs, "step": state.global_step})  # what Trainer.log does before on_log
    guard.on_log(args, state, control, logs=logs)
    assert logs["nonfinite_skipped"] == 1 and state.log_history[-1]["nonfinite_skipped"] == 1
    guard.see_loss(torch.tensor(float("nan")))
    with pytest.raises(NonFiniteStop, match="the optimizer applied the update"):
        guard.on_step_end(args, state, control, optimizer=SimpleNamespace(step_was_skipped=False))


# ---- a save that fails for space or permission


def test_a_save_without_space_says_so_and_names_the_intact_checkpoint(tmp_path):
    """ENOSPC injected at the write (tests/faults/test_faults_launch.py fills a real tmpfs where it may mount one)."""
    previous = checkpoint(tmp_path, 1)
    folder = tmp_path / "checkpoint-2"
    with pytest.raises(CheckpointSaveError) as failed, explained_save_failures(folder, str(tmp_path)):
        raise OSError(errno.ENOSPC, "No space left on device")
    said = str(failed.value)
    assert said.startswith(f"saving {folder} failed: no space left (") and "GiB free of" in said
    assert f"The previous complete checkpoint {previous} is intact" in said and "save_total_limit" in said
    wrapped = RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 64 vs 0")
    wrapped.__cause__ = OSError(errno.EDQUOT, "Disk quota exceeded")
    assert failure_kind(wrapped, folder) == "space"  # torch's zip writer, with the errno in its chain


def test_a_save_without_permission_says_so(tmp_path):
    refused = pytest.raises(CheckpointSaveError, match="no permission to write under .*No complete checkpoint")
    with refused, explained_save_failures(tmp_path / "checkpoint-2", str(tmp_path)):
        raise PermissionError(errno.EROFS, "Read-only file system")


def test_other_save_errors_pass_through_unchanged(tmp_path):
    passed = pytest.raises(RuntimeError, match="file write failed")  # the filesystem has room and is writable here
    with passed, explained_save_failures(tmp_path / "checkpoint-2", str(tmp_path)):
        raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")


# ---- the launcher: which rank died, one exit status per outcome, signals forwarded


def failures(*rows: tuple[int, int, int]) -> dict:
    """{rank: ProcessFailure} from (rank, exit code, timestamp) rows, as torchrun records them."""
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    out = {}
    for rank, code, stamp in rows:
        out[rank] = ProcessFailure(local_rank=rank, pid=1000 + rank, exitcode=code, error_file="<N/A>")
        out[rank].timestamp = stamp
    return out


def test_the_launcher_names_the_rank_that_died_first(capsys):
    # rank 1 killed; rank 0 failed in its next collective, the same second; rank 2 then stopped by torchrun
    code = supervise.report(failures((0, 1, 100), (1, -9, 100), (2, -15, 101)), None, [])
    said = capsys.readouterr().err
    assert code == FAILED and said.startswith("[launch] rank 1 (local rank 1, pid 1001) killed by SIGKILL"), said
    assert "also failed: rank(s) 0, 2" in said and "--resume_from_checkpoint auto" in said
    supervise.report(failures((0, 1, 99), (1, -9, 100)), None, [])  # an error a second earlier came first
    assert capsys.readouterr().err.startswith("[launch] rank 0 (local rank 0, pid 1000) exited with status 1")


def test_the_launcher_exit_status_says_what_ended_the_run(capsys):
    assert supervise.report(failures((0, PREEMPTED, 1), (1, PREEMPTED, 1)), None, []) == PREEMPTED
    assert supervise.report(failures((1, -9, 1)), "SIGTERM", []) == PREEMPTED  # a rank killed during a preemption
    assert supervise.report(failures((0, NONFINITE, 1), (1, NONFINITE, 1)), None, []) == NONFINITE
    assert supervise.report(failures((1, SAVE_FAILED, 1), (0, 1, 1)), None, []) == SAVE_FAILED
    assert "[launch] preempted (rank 0 asked to stop)" in capsys.readouterr().err


def test_the_launcher_forwards_preemption_to_every_rank_and_ends_a_launch_with_none(monkeypatch):
    from torch.distributed.elastic.multiprocessing.api import SignalException

    sent = []
    monkeypatch.setattr(supervise, "child_pids", lambda parent: [11, 12])
    monkeypatch.setattr(supervise.os, "kill", lambda pid, sig: sent.append((pid, sig)))
    forwarder = supervise.Forwarder()
    forwarder.forward(signal.SIGTERM, None)
    assert sent == [(11, signal.SIGUSR1), (12, signal.SIGUSR1)] and forwarder.received == "SIGTERM"
    monkeypatch.setattr(supervise, "child_pids", lambda parent: [])
    with pytest.raises(SignalException):
        supervise.Forwarder().forward(signal.SIGUSR1, None)
    monkeypatch.setattr(supervise, "child_pids", lambda parent: [11, 12])
    sent.clear()
    ctrl_c = supervise.Forwarder()
    ctrl_c.forward(signal.SIGINT, None)  # Ctrl-C: a preemption like SIGTERM (the agreed stop, then the resume line)
    assert sent == [(11, signal.SIGUSR1), (12, signal.SIGUSR1)] and ctrl_c.received == "SIGINT"
    # torchrun's agent leaves TERM, USR1 and INT to this process
    assert supervise.ENV_DEFAULTS["PET_SIGNALS_TO_HANDLE"] == "SIGHUP,SIGQUIT"


# ---- Kubernetes and torchrun: the machines from the environment


@pytest.fixture
def cluster(monkeypatch):
    for name in CLUSTER_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_cluster_environment_gives_the_machines():
    pet = {"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "job-master-0", "PET_MASTER_PORT": "23456"}
    machines = cluster_machines({**pet, "WORLD_SIZE": "16", "RANK": "1"})  # v1.7+: WORLD_SIZE counts processes
    assert (machines.num_machines, machines.machine_rank, machines.main_ip, machines.main_port) == (
        2,
        1,
        "job-master-0",
        23456,
    )
    per_pod = cluster_machines({"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "m", "MASTER_PORT": "1"})
    assert (per_pod.num_machines, per_pod.machine_rank, per_pod.said()) == (2, 1, "WORLD_SIZE=2, RANK=1")
    assert cluster_machines({**pet, "LOCAL_RANK": "0"}) is None  # inside a torchrun worker
    assert cluster_machines({}) is None
    with pytest.raises(ValueError, match="PET_NNODES=1:4: an elastic node range"):
        cluster_machines({"PET_NNODES": "1:4"})


def test_the_launch_passes_the_pet_environment_to_accelerate(cluster, capsys):
    from longctx.commands.sft import main

    pet = {"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "10.0.0.1", "PET_MASTER_PORT": "29500"}
    per_pod = {"WORLD_SIZE": "16", "RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}  # set too
    for name, value in {**pet, **per_pod}.items():
        cluster.setenv(name, value)
    assert main([TWO_NODES, "--dry-run"]) == 0
    line = capsys.readouterr().out
    assert "--num_machines 2 --machine_rank 1 --main_process_ip 10.0.0.1 --main_process_port 29500" in line
    # consumed: left in the launcher, preflight's TrainingArguments would join a process group of WORLD_SIZE and wait
    assert not {*pet, *per_pod} & set(os.environ)


def test_a_two_node_recipe_at_one_node_is_refused_with_the_reason(cluster, capsys):
    from longctx.commands.sft import main

    cluster.setenv("PET_NNODES", "1")
    with pytest.raises(SystemExit) as exit_:
        main([TWO_NODES, "--dry-run"])
    said = capsys.readouterr().err
    assert exit_.value.code == 2
    assert "asks for num_machines=2 but PET_NNODES=1, PET_NODE_RANK=0 has 1 (world size 8)" in said, said
    assert "Kubeflow: 2 pods / numNodes" in said


def test_the_mesh_check_names_why_a_two_node_recipe_started_at_world_size_1(cluster):
    cluster.setenv("WORLD_SIZE", "1")
    topo = read_topology(REPO_ROOT / "accelerate_configs/2x8-sp8-dp2-offload-optimizer.yaml")
    with pytest.raises(RecipeError) as refused:
        check_launched_mesh(topo, "recipe.yaml", "relaunch", use_cpu=True)
    said = str(refused.value)
    assert "launched with world size 1 and sp=1" in said and "asks for world size 16 and sp=8" in said
    assert "It spans 2 machines" in said and "PET_NNODES/PET_NODE_RANK/PET_MASTER_ADDR/PET_MASTER_PORT" in said


def test_the_pytorchjob_manifest_runs_a_two_node_recipe_with_auto_resume():
    job = yaml.safe_load((REPO_ROOT / "scripts/kubernetes/pytorchjob.yaml").read_text())
    replicas = job["spec"]["pytorchReplicaSpecs"]
    pod = replicas["Master"]["template"]["spec"]
    assert replicas["Worker"]["template"]["spec"] == pod  # every pod runs the same command
    command = pod["containers"][0]["command"]
    assert command[:4] == ["python", "-m", "longctx", "sft"] and command[5:] == [
        "--",
        "--resume_from_checkpoint",
        "auto",
    ]
    topo = read_topology(REPO_ROOT / "accelerate_configs/2x8-sp8-dp2-offload-optimizer.yaml")
    assert resolve_recipe(command[4]).is_file() and command[4] == TWO_NODES
    assert sum(spec["replicas"] for spec in replicas.values()) == topo.num_machines
    assert int(job["spec"]["nprocPerNode"]) == topo.processes_per_machine
    assert pod["containers"][0]["ports"] == [{"name": "pytorchjob-port", "containerPort": 23456}]
    assert pod["terminationGracePeriodSeconds"] >= 600  # a step and a save before SIGKILL


# ---- disk: the plan's checkpoint size, and every GPU recipe keeps what fits


def gpu_recipes() -> list[str]:
    return [name for name in recipe_names() if not load_yaml_mapping(resolve_recipe(name)).get("use_cpu")]


@pytest.mark.parametrize("name", gpu_recipes())
def test_every_gpu_recipe_keeps_the_checkpoints_the_plan_sizes_and_sets_a_collective_timeout(name):
    from longctx.preflight.load import Machine, load_launch

    launch = load_launch(name, [], Machine())
    zero = int(launch.ds["zero_optimization"]["stage"])
    lora = int(launch.model.lora_r) if launch.model.use_peft else None
    plan, _ = disk_plan(Arch.from_config(launch.facts.config), launch.sft, zero, lora)
    assert launch.sft.save_total_limit == suggested_limit(plan.checkpoint, plan.model)
    text = resolve_recipe(name).read_text()
    assert f"{plan.checkpoint / GIB:.2f} GiB a checkpoint" in re.search(r"save_total_limit:.*", text).group(0)
    assert launch.sft.ddp_timeout <= 1200  # not HF's 30 minutes


def test_the_checkpoint_size_counts_weights_and_optimizer_states_per_zero_stage():
    arch = Arch.from_config(json.loads((REPO_ROOT / "recipes/assets/tiny-llama/config.json").read_text()))
    assert checkpoint_bytes(arch, 3, weight_bytes=4) == 16 * arch.params  # fp32 weights + 12 bytes of AdamW
    assert checkpoint_bytes(arch, 2, weight_bytes=2) == 16 * arch.params  # bf16 file + module copy + 12
    assert checkpoint_bytes(arch, 3, weight_bytes=2, lora_rank=8) == 14 * arch.lora_params(8)


def test_preflight_refuses_a_run_whose_checkpoints_do_not_fit(monkeypatch, tmp_path):
    from longctx.preflight.checks import disk
    from longctx.preflight.run import preflight_parser, run_preflight

    recipe = "tiny-llama/sft-2k-cpu-sp2"  # fp32: 16 bytes a parameter a checkpoint, 4 the final model
    arch = Arch.from_config(json.loads((REPO_ROOT / "recipes/assets/tiny-llama/config.json").read_text()))
    one_kept = 2 * checkpoint_bytes(arch, 3, weight_bytes=4) + 4 * arch.params  # 1 kept + 1 being written + model
    free = int(one_kept / 0.95)  # fits one kept checkpoint, tightly; not two
    monkeypatch.setattr(disk.shutil, "disk_usage", lambda path: SimpleNamespace(free=free, total=2 * free))
    args = preflight_parser().parse_args([recipe, "--this-machine"])
    overrides = ["--output_dir", str(tmp_path / "out"), "--save_strategy", "steps", "--save_steps", "1"]
    problems = run_preflight(recipe, [*overrides, "--save_total_limit", "2"], args)[1]
    (refused,) = [p for p in problems if p.key == "output_dir"]
    assert refused.severity == "error" and "x 3 (save_total_limit 2 + 1 being written)" in refused.message
    assert refused.message.endswith("free: a save would fail") and "save_total_limit" in refused.fix
    tight = run_preflight(recipe, [*overrides, "--save_total_limit", "1"], args)[1]
    assert [p.message.endswith(": tight") for p in tight if p.key == "output_dir"] == [True]


# ---- staging a recipe for an offline node


def test_fetch_downloads_what_the_recipe_reads_and_nothing_local(capsys, monkeypatch):
    from longctx.commands.fetch import main

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # a machine with network; the downloads are stand-ins
    calls = []
    downloaders = {kind: (lambda need, kind=kind: calls.append((kind, need.name))) for kind in ("model", "tokenizer")}
    downloaders["dataset"] = lambda need: calls.append(("dataset", need.name, need.config))
    assert main(["llama8b-256k"], downloaders=downloaders) == 0
    assert calls == [("model", "meta-llama/Llama-3.1-8B-Instruct"), ("dataset", "THUDM/LongAlign-10k", None)]
    assert main(["tiny-llama/sft-2k-cpu-sp2"], downloaders=downloaders) == 0
    assert "reads only local files: nothing to fetch" in capsys.readouterr().out
    random = needs({"model_name_or_path": "org/model", "model_init": "random", "dataset_name": "org/data"})
    assert [n.kind for n in random] == ["tokenizer", "dataset"] and "config.json" in random[0].patterns
    assert fetch(random, {"tokenizer": lambda n: "t", "dataset": lambda n: "d"}, say=lambda line: None) == ["t", "d"]


def test_offline_the_missing_items_are_named_with_the_command_that_stages_them(capsys):
    from longctx.commands.fetch import main

    # the real probes: the cache only (`local_files_only`, datasets offline), never the network
    gone = missing([Need("model", "longctx-tests/never-cached"), Need("dataset", "longctx-tests/never-cached")])
    assert [n.kind for n in gone] == ["model", "dataset"]
    assert main(["llama8b-256k", "--check"], probes={"model": lambda n: False, "dataset": lambda n: True}) == 1
    said = capsys.readouterr().err
    assert "this machine is offline: model weights and config meta-llama/Llama-3.1-8B-Instruct." in said
    assert "`python -m longctx fetch llama8b-256k`" in said and "LongAlign" not in said


def test_eval_needs_no_staged_training_dataset_where_a_training_run_does():
    """`longctx eval` reads prepared rows only: offline, the recipe's uncached `dataset_name` must not stop it (it
    did: the Qwen3.5 eval test failed on `set-by-the-test`), while `make sft`'s preflight still names it."""
    from longctx.preflight.run import preflight_parser, run_preflight

    recipe = "tests/recipes/qwen35-parity.yaml"

    def dataset_problems(*flags: str) -> list:
        args = preflight_parser().parse_args([recipe, "--this-machine", *flags])
        _, problems, _ = run_preflight(recipe, [], args)
        return [p for p in problems if p.key == "dataset_name" and "not in the Hugging Face cache" in p.message]

    assert dataset_problems(), "a training launch must name the unstaged dataset"
    assert dataset_problems("--no-dataset") == []
