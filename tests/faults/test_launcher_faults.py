"""The launch process and the cluster environment, each held to its behaviour without starting a process
(docs/reliability.md); the real launches are tests/faults/test_faults_launch.py.

- the launcher: which rank died, and one exit status per outcome; SIGTERM/SIGUSR1 forwarded to the ranks;
- Kubernetes/torchrun: the PET_* environment becomes accelerate's machine flags, a count other than the recipe's is
  refused (world size 1 for a 2-node recipe), and the mesh check names the reason; the PyTorchJob manifest.
"""

import os
import signal

import pytest
import yaml

from longctx.config.exit_codes import FAILED, NONFINITE, PREEMPTED, SAVE_FAILED
from longctx.config.paths import REPO_ROOT, resolve_recipe
from longctx.config.recipe import RecipeError
from longctx.config.topology import read_topology
from longctx.launch import supervise
from longctx.launch.cluster_env import cluster_machines
from longctx.training.sequence_parallel.mesh import check_launched_mesh

pytestmark = pytest.mark.faults

TWO_NODES = "qwen3-32b/sft-256k-2x8-sp8-dp2"  # accelerate_configs/2x8-sp8-dp2-offload-optimizer.yaml
CLUSTER_VARS = ("PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT", "WORLD_SIZE", "RANK")
CLUSTER_VARS += ("MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK")


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
