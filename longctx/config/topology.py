"""Read an accelerate YAML into the launch topology a recipe runs on.

Plain YAML reading, no accelerate import: the entrypoint and the preflight checks both need the mesh
before any process group exists, and this must stay fast enough to check a whole catalog in a second.
"""

from dataclasses import dataclass
from pathlib import Path

import yaml

PARALLELISM_PREFIX = "parallelism_config_"


class ConfigError(ValueError):
    """A config file is missing or malformed; the message names the file, the key and the fix."""


@dataclass(frozen=True)
class Topology:
    """The process layout an accelerate YAML asks for."""

    path: str
    num_processes: int
    num_machines: int
    distributed_type: str
    deepspeed_config_file: str | None
    dp_replicate_size: int
    dp_shard_size: int
    sp_size: int
    sp_attn_implementation: str | None
    sp_seq_length_is_variable: bool
    sp_seq_length: int | None
    sp_ring_size: int = 1  # R of the hybrid sp = U x R (longctx/training/sequence_parallel/hybrid.py); 1: Ulysses

    @property
    def sp_ulysses_size(self) -> int:
        """U: the ranks of one Ulysses group (heads split U ways); sp itself without a ring."""
        return self.sp_size // max(self.sp_ring_size, 1)

    @property
    def world_size(self) -> int:
        # accelerate's `num_processes` is the total over all machines (it becomes torchrun's
        # --nproc_per_node only after dividing by num_machines), so it already is the world size.
        return self.num_processes

    @property
    def processes_per_machine(self) -> int:
        return self.num_processes // max(self.num_machines, 1)


def load_yaml_mapping(path: str | Path) -> dict:
    """Load a YAML file that must hold a mapping, with a clear error otherwise."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: file not found")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: must hold a YAML mapping of keys to values")
    return data


def read_topology(path: str | Path) -> Topology:
    """Parse the keys of an accelerate YAML that decide the mesh; absent SP keys mean sp=1."""
    data = load_yaml_mapping(path)
    pc = data.get("parallelism_config") or {}
    if not isinstance(pc, dict):
        raise ConfigError(f"{path}: `parallelism_config` must be a mapping of parallelism_config_* keys")
    ds = data.get("deepspeed_config") or {}
    seq_length = pc.get(PARALLELISM_PREFIX + "sp_seq_length")
    try:
        return Topology(
            path=str(path),
            num_processes=int(data.get("num_processes", 1)),
            num_machines=int(data.get("num_machines", 1)),
            distributed_type=str(data.get("distributed_type", "NO")),
            deepspeed_config_file=ds.get("deepspeed_config_file") if isinstance(ds, dict) else None,
            dp_replicate_size=int(pc.get(PARALLELISM_PREFIX + "dp_replicate_size", 1)),
            dp_shard_size=int(pc.get(PARALLELISM_PREFIX + "dp_shard_size", 1)),
            sp_size=int(pc.get(PARALLELISM_PREFIX + "sp_size", 1)),
            sp_attn_implementation=pc.get(PARALLELISM_PREFIX + "sp_attn_implementation"),
            sp_seq_length_is_variable=bool(pc.get(PARALLELISM_PREFIX + "sp_seq_length_is_variable", True)),
            sp_seq_length=int(seq_length) if seq_length is not None else None,
            sp_ring_size=int(pc.get(PARALLELISM_PREFIX + "sp_ring_size", 1)),
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: a size key is not an integer ({exc}); sizes must be whole numbers") from None
