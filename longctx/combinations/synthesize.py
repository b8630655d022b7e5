"""A configuration of the combination map written out as a user would: a recipe YAML, its accelerate YAML and its
DeepSpeed JSON, in one folder.

Why files: the verdict on a configuration must be the one `python -m longctx validate` prints and the entrypoint
enforces, so it goes through the same loader (longctx/preflight/load.py), which reads files. The pairwise runs
(tests/parity/test_pairwise.py) launch the same files.
"""

import hashlib
import json
from pathlib import Path

import yaml

from longctx.config.paths import REPO_ROOT

CPU_JSON = "deepspeed_configs/zero3-cpu.json"
GPU_JSON = {None: "deepspeed_configs/zero3.json", "optimizer": "deepspeed_configs/zero3-offload-optimizer.json"}
GPU_JSON["all"] = "deepspeed_configs/zero3-offload-all.json"


def deepspeed_json(zero: dict, cpu: bool) -> dict:
    """The shipped JSON of the platform and offload, at the chosen stage (stage 2 drops the `stage3_*` keys)."""
    shipped = CPU_JSON if cpu and not zero.get("offload") else GPU_JSON[zero.get("offload")]
    ds = json.loads((REPO_ROOT / shipped).read_text())
    section = ds["zero_optimization"]
    if zero["stage"] != 3:
        section = {k: v for k, v in section.items() if not k.startswith("stage3_") and k != "offload_param"}
    ds["zero_optimization"] = {**section, "stage": zero["stage"]}
    return ds


def accelerate_yaml(mesh: dict, attn: str, ds_path: Path) -> dict:
    """The CPU topologies' YAML (accelerate_configs/cpu-*.yaml) with this mesh: sp x dp processes on one machine."""
    pc = {
        "parallelism_config_dp_replicate_size": 1, "parallelism_config_dp_shard_size": mesh["dp"],
        "parallelism_config_tp_size": 1, "parallelism_config_cp_size": 1, "parallelism_config_sp_size": mesh["sp"],
        "parallelism_config_sp_backend": "deepspeed", "parallelism_config_sp_seq_length_is_variable": True,
        "parallelism_config_sp_attn_implementation": attn,
    }  # fmt: skip
    if mesh["ring"] > 1:
        pc["parallelism_config_sp_ring_size"] = mesh["ring"]
    return {
        "compute_environment": "LOCAL_MACHINE", "distributed_type": "DEEPSPEED",
        "deepspeed_config": {"deepspeed_config_file": str(ds_path), "deepspeed_multinode_launcher": "standard"},
        "machine_rank": 0, "num_machines": 1, "num_processes": mesh["sp"] * mesh["dp"],
        "main_training_function": "main", "rdzv_backend": "static", "same_network": True, "use_cpu": False,
        "parallelism_config": pc,
    }  # fmt: skip


def write_configuration(folder: Path, recipe: dict, mesh: dict, zero: dict) -> Path:
    """Write the three files under `folder`, each named by its content less the folder (equal configurations
    share them, and the names, which messages quote, do not depend on where the folder is); the recipe's path."""
    folder.mkdir(parents=True, exist_ok=True)
    ds = deepspeed_json(zero, bool(recipe.get("use_cpu")))
    ds_name = f"ds-{digest(ds)}.json"
    accel = accelerate_yaml(mesh, recipe.get("attn_implementation", "sdpa"), Path(ds_name))
    accel_name = f"accelerate-{digest(accel)}.yaml"
    recipe = {**recipe, "accelerate_config": accel_name}
    recipe_path = folder / f"recipe-{digest(recipe)}.yaml"
    if not recipe_path.is_file():
        (folder / ds_name).write_text(json.dumps(ds, indent=2))
        accel["deepspeed_config"]["deepspeed_config_file"] = str(folder / ds_name)
        (folder / accel_name).write_text(yaml.safe_dump(accel, sort_keys=False))
        recipe["accelerate_config"] = str(folder / accel_name)
        recipe_path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return recipe_path


def digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:12]
