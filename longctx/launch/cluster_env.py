"""The machines of a launch as a cluster states them in the environment: Kubernetes (Kubeflow) and torchrun.

Kubeflow's PyTorchJob and TrainJob, and job templates written for torchrun, describe a multi-node launch in the
variables torchrun reads as its flags' defaults: PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT
(Kubeflow Trainer sets exactly these); PyTorchJob v1 without `nprocPerNode` sets one process per pod instead:
WORLD_SIZE (pods), RANK (this pod), MASTER_ADDR, MASTER_PORT. `accelerate launch` reads none of them: it takes the
machine count and rank from its YAML and flags, so on such a cluster every pod starts as machine 0, or, with a
one-machine config, at world size 1 (Kubeflow PR #3930). `python -m longctx sft` reads them here and passes them
as accelerate's flags (longctx/commands/sft.py), and refuses a launch whose environment counts other machines than
the recipe's accelerate YAML, naming both.
"""

import os
from dataclasses import dataclass

PET = ("PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT")
PER_POD = ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class ClusterMachines:
    num_machines: int
    machine_rank: int
    main_ip: str | None
    main_port: int | None
    names: tuple[str, ...]  # the variables they came from, for messages

    def said(self) -> str:
        return f"{self.names[0]}={self.num_machines}, {self.names[1]}={self.machine_rank}"


def _count(env, name: str, default: str | None = None) -> int | None:
    text = env.get(name, default)
    if text is None or text == "":
        return None
    if ":" in text:  # torchrun's elastic "MIN:MAX"
        low, high = text.split(":", 1)
        if low != high:
            raise ValueError(f"{name}={text}: an elastic node range; this launch needs a fixed count (MIN = MAX)")
        text = low
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a whole number") from None


def consume(env=None) -> None:
    """Remove the machine-level variables once read: in the launcher they describe machines, not its processes, yet
    anything that parses training arguments here (preflight's TrainingArguments, through accelerate's state) would
    take WORLD_SIZE/RANK/MASTER_ADDR for a process group to join and wait for the other pods; torchrun sets each
    rank's own."""
    env = os.environ if env is None else env
    for name in PET + PER_POD:
        env.pop(name, None)


def cluster_machines(env=None) -> ClusterMachines | None:
    """The machine count, this machine's rank and the rendezvous from the environment; None when it states none.

    Inside a torchrun worker (LOCAL_RANK set) WORLD_SIZE and RANK count processes, not machines: not read.
    ValueError for a value that cannot be used (named)."""
    env = os.environ if env is None else env
    if "LOCAL_RANK" in env:
        return None
    for names in (PET, PER_POD):
        count = _count(env, names[0])
        if count is None or (names is PER_POD and not env.get("MASTER_ADDR")):
            continue
        return ClusterMachines(
            count, _count(env, names[1], "0"), env.get(names[2]) or None, _count(env, names[3]), names
        )
    return None
