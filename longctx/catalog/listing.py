"""Every shipped recipe as one row: short name, model, max_length, mesh, GPUs, memory plan, predicted step, measured.

The model, length and mesh are read from the recipe and its accelerate YAML, the memory from preflight's plan at
the recipe's own topology on the catalog's 80 GB GPUs (as recipes/README.md's preflight column), the predicted step
from preflight's step-time plan on the same GPUs' profile (H100 SXM; one document a row; predicted, never measured:
longctx/memory_plan/step_time.py), and the measured status from the catalog table's last column in
recipes/README.md, the one place it is recorded.
"""

import re

from longctx.config.families.registry import short_names
from longctx.config.paths import RECIPES_DIR, recipe_names

CATALOG_GPU_GB = 80.0  # the catalog's target GPU (recipes/README.md)


def measured_status() -> dict[str, str]:
    """recipe name -> the `measured` cell of recipes/README.md's catalog table."""
    text = (RECIPES_DIR / "README.md").read_text()
    rows = re.findall(r"^\| `([\w.\-/]+)` \|(.*)\|\s*$", text, re.MULTILINE)
    return {name: cells.split("|")[-1].strip() for name, cells in rows if len(cells.split("|")) >= 7}


def length(tokens: int) -> str:
    return f"{tokens / 2**20:.2f}M" if tokens >= 2**20 else f"{tokens // 1024}K"


def recipe_row(name: str, measured: dict[str, str]) -> dict:
    """One recipe, as the listing shows it (values stay None where an input could not be read)."""
    from longctx.preflight.load import Machine, load_launch
    from longctx.preflight.plan import plan_dict

    short = {full: s for s, full in short_names().items()}
    launch = load_launch(str(RECIPES_DIR / f"{name}.yaml"), [], Machine(source="intended"))
    row = {"short_name": short.get(name), "recipe": name, "measured": measured.get(name, "not in the catalog")}
    if launch.model is None or launch.topo is None:
        return {**row, "model": None, "max_length": None, "mesh": None, "gpus": None, "memory": None, "step": None}
    topo, cpu = launch.topo, bool(launch.sft.use_cpu)
    dp = topo.dp_replicate_size * topo.dp_shard_size
    per = topo.processes_per_machine
    plural = "s" if per > 1 else ""
    gpus = f"{topo.world_size} CPU processes" if cpu else f"{per} GPU{plural}" if topo.num_machines == 1 else None
    launch.machine.gpus_per_node, launch.machine.gpu_memory_gb = per, CATALOG_GPU_GB
    plan = None if cpu else plan_dict(launch)
    memory = None
    if plan:
        fit, host = length(plan["max_length_that_fits"]), plan["host_per_node_gib"]
        memory = f"{plan['total_gib']:.1f} GiB/GPU (fits {fit}), host {host:.0f} GiB/node"
    step = predicted_step(plan["step_time"]) if plan and plan["step_time"] else None
    grpo = getattr(launch.recipe, "trainer", "sft") == "grpo"  # longctx/preflight/plan.py GRPO_NOT_TIMED
    return {
        **row,
        "step": step or ("n/a (CPU)" if cpu else "not predicted (GRPO: generation)" if grpo else "not planned"),
        "model": launch.model.model_name_or_path,
        "max_length": launch.sft.max_length,
        "mesh": f"sp={topo.sp_size}" + (f" x dp={dp}" if dp > 1 else ""),
        "gpus": gpus or f"{topo.num_machines} nodes x {per} GPUs",
        "memory": memory or ("n/a (CPU)" if cpu else "not planned"),
    }


def predicted_step(step: dict) -> str:
    """The step-time plan's figures as the catalog shows them, marked predicted with their profile."""
    return (
        f"predicted {step['step_s']:,.1f} s/step, {step['tokens_per_s_per_gpu']:,.0f} tok/s/GPU, "
        f"MFU {step['mfu']:.0%} ({step['profile']})"
    )


def rows(pattern: str | None = None) -> list[dict]:
    """Every recipe whose name or short name contains `pattern` (all without one)."""
    measured = measured_status()
    short = {full: s for s, full in short_names().items()}
    names = [n for n in recipe_names() if not pattern or pattern in n or pattern in (short.get(n) or "")]
    return [recipe_row(name, measured) for name in names]


COLUMNS = (("short_name", "short name"), ("model", "model"), ("max_length", "max_length"), ("mesh", "mesh"))
COLUMNS += (("gpus", "GPUs"), ("memory", f"memory plan ({CATALOG_GPU_GB:.0f} GB GPUs)"))
COLUMNS += (("step", "step time (predicted, one document a row)"), ("measured", "measured"))


def table(found: list[dict]) -> str:
    """The rows as an aligned text table, one recipe a line."""
    cells = [[label for _, label in COLUMNS]]
    for row in found:
        value = {**row, "max_length": f"{row['max_length']:,}" if row["max_length"] else "?"}
        cells.append([str(value.get(key) or "?") for key, _ in COLUMNS])
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in cells)
