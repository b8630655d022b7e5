"""Files: every referenced file exists and parses, and unknown keys are errors with the nearest valid key.

Known keys come from the installed libraries where that is cheap (TRL's dataclasses, accelerate's
`ClusterConfig`); DeepSpeed's import costs seconds, so its keys are a list (longctx/config/key_homes.py) checked
against the installed DeepSpeed by a test (tests/preflight/test_preflight_files.py).
"""

import dataclasses
import glob
from pathlib import Path

from longctx.config.key_homes import (
    ACCELERATE_DEEPSPEED_KEYS,
    DEEPSPEED_TOP_KEYS,
    DEEPSPEED_ZERO_KEYS,
    PARALLELISM_KEYS,
)
from longctx.config.keys import nearest_key_problems
from longctx.config.problems import Problem, error, warning


def accelerate_key_problems(data: dict, where: str) -> list[Problem]:
    from accelerate.commands.config.config_args import ClusterConfig

    known = {f.name for f in dataclasses.fields(ClusterConfig)}
    problems = nearest_key_problems(data, known, where, "remove it (see `accelerate config --help`)")
    for section, keys in (("deepspeed_config", ACCELERATE_DEEPSPEED_KEYS), ("parallelism_config", PARALLELISM_KEYS)):
        if isinstance(data.get(section), dict):
            problems += nearest_key_problems(data[section], keys, where, "remove it", prefix=f"{section}.")
    return problems


def deepspeed_key_problems(data, where: str) -> list[Problem]:
    if not isinstance(data, dict):
        return [error(where, "(file)", "must hold a JSON object", "wrap the settings in { }")]
    otherwise = "remove it (see the DeepSpeed config JSON reference)"
    problems = nearest_key_problems(data, DEEPSPEED_TOP_KEYS, where, otherwise)
    if isinstance(data.get("zero_optimization"), dict):
        zero = data["zero_optimization"]
        problems += nearest_key_problems(zero, DEEPSPEED_ZERO_KEYS, where, otherwise, prefix="zero_optimization.")
    return problems


def looks_local(name: str) -> bool:
    """A dataset or model name that is a filesystem path rather than a Hub id (`org/name`)."""
    from longctx.config.paths import REPO_ROOT

    first = Path(name).parts[0] if Path(name).parts else ""
    return name.startswith((".", "/", "~")) or (REPO_ROOT / first).is_dir() or name.count("/") > 1


def check(launch) -> list[Problem]:
    """Local dataset and model paths must exist (Hub ids are left to the download). Checked for the intended
    topology (`--intended`: the recipe against its target cluster, not this machine), a dataset folder that a
    recipe stages before `make data` (the DPO recipes' LongReward pairs, data_prep/assets/longreward.py) may be absent
    here:
    a warning there, an error wherever the launch is checked for this machine."""
    from longctx.config.paths import repo_path

    problems = []
    for key, value in (
        ("dataset_name", launch.recipe.dataset_name),
        ("model_name_or_path", launch.model.model_name_or_path),
    ):
        if isinstance(value, str) and value and looks_local(value) and not repo_path(value).exists():
            fix = f"fix the path (a relative one is read from {Path.cwd()}, the recipe's root), or name a Hub id"
            staged = key == "dataset_name" and launch.machine.source == "intended"
            fix = "stage it before `make data`, as the recipe's header says" if staged else fix
            problems.append(
                (warning if staged else error)(launch.source, key, f"{value}: no such file or folder", fix)
            )
    for value in getattr(launch.recipe, "data_files", None) or []:  # the command line runs preflight from the root
        if not (repo_path(value).exists() or glob.glob(str(repo_path(value)), recursive=True)):
            fix = f"fix the path or the glob: a relative one is read from {Path.cwd()}, the recipe's root (the folder "
            fix += "that holds its accelerate_configs/), and an absolute one works from anywhere"
            problems.append(error(launch.source, "data_files", f"{value}: no such file, folder or glob match", fix))
    return problems
