"""Variants of the CPU topologies with another ZeRO setting, written to a temporary folder for one test."""

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHIPPED_JSON = "deepspeed_configs/zero3-cpu.json"


def zero_variant(folder: Path, sp: int, stage: int = 3, mesh: str | None = None, **zero) -> str:
    """An accelerate YAML for `cpu-{mesh}` (default `cpu-sp{sp}`) whose DeepSpeed JSON is zero3-cpu.json at `stage`
    with `zero` keys set.

    Stage 2 drops the `stage3_*` keys; everything else (precision, SP reduction dtype, batch sizes) is the shipped
    file's. Returns the YAML's path, for both `--config_file` and the recipe's `--accelerate_config`.
    """
    folder.mkdir(parents=True, exist_ok=True)
    ds = json.loads((REPO / SHIPPED_JSON).read_text())
    section = {k: v for k, v in ds["zero_optimization"].items() if stage == 3 or not k.startswith("stage3_")}
    ds["zero_optimization"] = {**section, "stage": stage, **zero}
    name = f"zero{stage}" + "".join(f"-{k}-{v}" for k, v in zero.items())
    (folder / f"{name}.json").write_text(json.dumps(ds, indent=2))
    mesh = mesh or f"sp{sp}"
    accel = (REPO / f"accelerate_configs/cpu-{mesh}.yaml").read_text()
    assert SHIPPED_JSON in accel
    path = folder / f"cpu-{mesh}-{name}.yaml"
    path.write_text(accel.replace(SHIPPED_JSON, str(folder / f"{name}.json")))
    return str(path)
