"""Load everything a launch reads (recipe, accelerate YAML, DeepSpeed JSON, model config) without stopping early.

Each missing, malformed or misspelt input becomes a `Problem`, and loading carries on with what it could
read, so one run reports every fault. The recipe goes through the entrypoint's own TRL parser
(`longctx.config.recipe.make_parser`): preflight accepts exactly what `recipes/sft.py` accepts.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

from longctx.config.keys import cli_keys, without_keys
from longctx.config.paths import display_path, recipe_names, repo_path, resolve_recipe
from longctx.config.problems import Problem, error
from longctx.config.recipe import parse_collecting, recipe_keys, trainer_of, unknown_key_problems
from longctx.config.topology import ConfigError, Topology, load_yaml_mapping, read_topology
from longctx.preflight.facts import ModelFacts, recipe_facts

STRING_KEYS = (
    "accelerate_config", "model_name_or_path", "model_revision", "attn_implementation", "dtype", "dataset_name",
    "dataset_config", "dataset_train_split", "dataset_test_split", "dataset_text_field", "output_dir",
    "chat_template_path",
)  # fmt: skip


@dataclass
class Machine:
    """The hardware the launch is checked against: visible GPUs, the flags, or the recipe's intended topology."""

    gpus_per_node: int | None = None
    num_nodes: int | None = None
    gpu_memory_gb: float | None = None  # as sold (`--gpu-memory-gb 80`)
    gpu_memory_gib: float | None = None  # as torch reports the visible GPU (`total_memory`)
    host_memory_gib: float | None = None  # RAM of one node: `--host-memory-gb`, or read here with --this-machine
    source: str = "unknown"  # visible | flags | intended | unknown
    this_machine: bool = False  # `make sft`: the launch happens here, so what is visible is authoritative
    reads_dataset: bool = True  # False for `longctx eval`, which reads prepared rows only, never `dataset_name`
    hardware: str | None = None  # the step-time plan's profile (`--hardware`: a name or a fitted JSON); None: by GPU
    doc_length: int | None = None  # the step-time plan's documents (`--doc-length`); None: one document a row


@dataclass
class Launch:
    """Everything resolved for one recipe; fields stay None where an input could not be read."""

    source: str
    machine: Machine
    raw: dict = field(default_factory=dict)
    recipe: object = None
    sft: object = None
    model: object = None
    topo: Topology | None = None
    accel_raw: dict | None = None
    ds_path: str | None = None
    ds: dict | None = None
    facts: ModelFacts | None = None
    problems: list[Problem] = field(default_factory=list)


def type_problems(launch) -> list[Problem]:
    """Names and paths given a number or a list: TrlParser keeps YAML values as they are, so check them here
    (the dataclasses' annotations cannot tell: HfArgumentParser rewrites them while building the parser)."""
    problems = []
    for key in STRING_KEYS:
        value = launch.raw.get(key)
        if value is not None and not isinstance(value, str):
            msg = f"is {value!r} ({type(value).__name__}); it must be a string"
            problems.append(error(launch.source, key, msg, f'quote it: {key}: "{value}"'))
    return problems


def load_recipe(launch: Launch, path: Path, overrides: list[str]) -> None:
    """Parse the recipe with the entrypoint's own parser; unknown keys are reported and the rest still parsed."""
    try:
        values = load_yaml_mapping(path)
    except ConfigError as exc:
        launch.problems.append(error(launch.source, "recipe", str(exc), "pass a recipe name under recipes/ or a path"))
        return
    trainer = trainer_of(values, overrides)
    known = recipe_keys(trainer)
    unknown = unknown_key_problems(values, overrides, launch.source, trainer)
    launch.problems += unknown
    launch.raw = {k: v for k, v in values.items() if k in known or k == "env"}
    # every problem at once: argparse would stop at the first unknown flag, so they are dropped and the rest parsed
    overrides = without_keys(overrides, {p.key for p in unknown})
    parsed, bad_values = parse_collecting({k: v for k, v in values.items() if k in known}, overrides, launch.source)
    launch.problems += [p for p in bad_values if isinstance(p, Problem)]
    if parsed is None:
        return
    launch.recipe, launch.sft, launch.model = parsed
    for key in cli_keys(overrides):  # what the command line set, as the dataclasses typed it
        launch.raw[key] = next(getattr(obj, key) for obj in parsed if hasattr(obj, key))
    launch.problems += type_problems(launch)


def load_accelerate(launch: Launch, value: str | None) -> None:
    from longctx.preflight.checks.files import accelerate_key_problems

    if not value:
        fix = "name the accelerate YAML, e.g. `accelerate_config: accelerate_configs/cpu-sp2.yaml`"
        launch.problems.append(error(launch.source, "accelerate_config", "is not set", fix))
        return
    path = repo_path(str(value))
    try:
        launch.accel_raw = load_yaml_mapping(path)
        launch.topo = read_topology(path)
    except ConfigError as exc:
        fix = "point `accelerate_config` at an existing accelerate YAML under accelerate_configs/"
        launch.problems.append(error(launch.source, "accelerate_config", str(exc), fix))
        return
    launch.problems += accelerate_key_problems(launch.accel_raw, display_path(path))


def load_deepspeed(launch: Launch) -> None:
    from longctx.preflight.checks.files import deepspeed_key_problems

    topo = launch.topo
    if topo is None or topo.distributed_type != "DEEPSPEED":
        return
    where = display_path(Path(topo.path))
    if not topo.deepspeed_config_file:
        fix = "add `deepspeed_config: {deepspeed_config_file: deepspeed_configs/zero3.json}`"
        launch.problems.append(error(where, "deepspeed_config.deepspeed_config_file", "is not set", fix))
        return
    path = repo_path(topo.deepspeed_config_file)
    launch.ds_path = display_path(path)
    fix = "point it at an existing DeepSpeed JSON under deepspeed_configs/"
    if not path.is_file():
        launch.problems.append(error(where, "deepspeed_config_file", f"{path}: file not found", fix))
        return
    try:
        launch.ds = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        launch.problems.append(error(launch.ds_path, "(file)", f"not valid JSON ({exc})", "fix the JSON syntax"))
        return
    launch.problems += deepspeed_key_problems(launch.ds, launch.ds_path)


def load_model_facts(launch: Launch) -> None:
    if launch.model is None or not launch.model.model_name_or_path:
        return
    # The catalog's `model_config_source` names where the architecture comes from, when it is set.
    source = getattr(launch.recipe, "model_config_source", None)
    name = launch.model.model_name_or_path
    kwargs, overrides = launch.raw.get("model_init_kwargs"), launch.raw.get("model_config_overrides")
    if isinstance(overrides, str):  # the command-line form is a JSON string
        try:
            overrides = json.loads(overrides)
        except json.JSONDecodeError as exc:
            fix = "give a JSON object, e.g. '{\"max_position_embeddings\": 262144}'"
            launch.problems.append(error(launch.source, "model_config_overrides", f"not valid JSON ({exc})", fix))
            overrides = None
    if not isinstance(name, str):
        return
    kwargs, overrides = (v if isinstance(v, dict) else None for v in (kwargs, overrides))
    launch.facts = recipe_facts(name, kwargs, overrides, source)
    if launch.facts is None and isinstance(name, str):
        fix = (
            f"add its config.json to recipes/assets/architectures/{name}/ (copy it from the Hub), "
            f"or download it once with `hf download {name} config.json`"
        )
        msg = f"no offline config.json for {name!r} (local folder, Hugging Face cache, shipped snapshots)"
        launch.problems.append(error(launch.source, "model_name_or_path", msg, fix))


def load_launch(recipe: str, overrides: list[str], machine: Machine) -> Launch:
    """Resolve a recipe and everything it names; every unreadable input is a Problem, never an exception."""
    path = resolve_recipe(recipe)
    launch = Launch(source=display_path(path), machine=machine)
    if not path.is_file():
        launch.problems.append(
            error(recipe, "recipe", f"no recipe file {path}", f"use one of: {', '.join(recipe_names())}")
        )
        return launch
    load_recipe(launch, path, overrides)
    if not launch.raw:  # unreadable or empty: nothing else can be resolved from it
        return launch
    load_accelerate(launch, launch.raw.get("accelerate_config"))
    load_deepspeed(launch)
    load_model_facts(launch)
    return launch
