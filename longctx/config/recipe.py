"""The recipe parser shared by `recipes/sft.py`, preflight and the tests.

A recipe is one YAML read by TRL's `TrlParser` into three dataclasses: `RecipeArguments` (ours: data,
topology, model initialisation), `SFTConfig` and `ModelConfig`. Parsing is strict (an unknown key is an
error naming the file and the nearest valid key), and the checks that need only the recipe and its
accelerate YAML run here, all collected and raised once, before any model or process group exists.
"""

import contextlib
import dataclasses
import functools
import io
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Literal

from longctx.config.data_keys import DataSourceArguments
from longctx.config.keys import cli_keys, override_values, without_keys
from longctx.config.paths import repo_path
from longctx.config.problems import Problem, error
from longctx.config.rules import recipe_problems
from longctx.config.topology import ConfigError, Topology, load_yaml_mapping, read_topology


class RecipeError(ValueError):
    """A recipe cannot run as written; `problems` holds every reason, each naming its key and fix."""

    def __init__(self, source: str, problems: list[Problem | str]):
        self.source, self.problems = source, problems
        lines = [str(p) for p in problems]
        super().__init__(f"{source}: " + "\n  ".join(["recipe cannot run:"] + lines))


def _script_arguments_base():
    from trl import ScriptArguments

    return ScriptArguments


@dataclass
class RecipeArguments(_script_arguments_base(), DataSourceArguments):
    """Recipe keys that TRL's dataclasses lack: the topology the recipe runs on, how the model starts, and how a
    user's data maps onto the formats (longctx/config/data_keys.py)."""

    trainer: Literal["sft", "dpo", "grpo"] = field(
        default="sft",
        metadata={
            "help": "`sft`: supervised fine-tuning (`make sft`, TRL's SFTConfig keys); `dpo`: preference training "
            "(`make dpo`, TRL's DPOConfig keys plus longctx/config/trainers/preference.py's); `grpo`: online RL "
            "(`make grpo`, TRL's GRPOConfig keys plus longctx/config/trainers/rl.py's). Picks the recipe's key set."
        },
    )
    accelerate_config: str | None = field(
        default=None,
        metadata={
            "help": "The accelerate YAML this recipe runs with (relative to the repository root). "
            "`make sft RECIPE=..` launches with it, and the entrypoint refuses any other topology."
        },
    )
    model_init: Literal["pretrained", "random"] = field(
        default="pretrained",
        metadata={
            "help": "`pretrained` loads weights from model_name_or_path; `random` builds the model from its "
            "config with random weights seeded by `seed` (no weight download)."
        },
    )
    # ---- ALST memory features (longctx/training/memory/alst.py, longctx/training/model_build.py); all off by default
    model_config_overrides: dict | str | None = field(
        default=None,
        metadata={
            "help": "Keys that replace the model config's (e.g. `rope_parameters` for a longer context, "
            "`max_position_embeddings`), in both `random` and `pretrained` mode. A JSON string on the command line."
        },
    )
    model_config_source: str | None = field(
        default=None,
        metadata={
            "help": "Where the architecture config comes from instead of model_name_or_path (e.g. a snapshot in "
            "recipes/assets/architectures/), so `model_init: random` needs no download of the model repository."
        },
    )
    tiled_mlp: bool = field(
        default=False,
        metadata={"help": "Run every MLP through DeepSpeed's TiledMLP: sequence tiles, recomputed in backward."},
    )
    tiled_mlp_shards: int | None = field(
        default=None,
        metadata={"help": "Tiles per MLP call; None: ceil(tokens per rank / hidden_size), as ALST does."},
    )
    activation_checkpoint_offload: bool = field(
        default=False,
        metadata={"help": "Keep each checkpointed layer's input in host memory until backward needs it."},
    )
    # Set by parse_recipe, not a recipe key (init=False keeps it out of the parser): the file errors name.
    config_source: str = field(default="command line", init=False, repr=False)
    # Set by parse_values too: the keys the recipe file or the command line set, as opposed to defaults, so a
    # rule can refuse a TRL key the user set that data_prep cannot honour (longctx/config/rules/data/data_keys.py).
    explicit_keys: frozenset = field(default=frozenset(), init=False, repr=False)

    # ---- data preparation (data_prep/, `make data`): checked by rules.prepared_data.prepared_data_problems
    prepare_data: Literal["off", "packed", "unpacked"] = field(
        default="off",
        metadata={
            "help": "`packed`/`unpacked`: train on the dataset `make data` prepares (tokenized, padded to a "
            "multiple of sp; packed puts several documents in one sequence). `off`: TRL tokenizes on the fly."
        },
    )
    dataset_format: Literal["auto", "text", "messages", "prompt_completion"] = field(
        default="auto", metadata={"help": "Format of the raw rows for data_prep; `auto` reads the columns."}
    )
    long_document_policy: Literal["auto", "split", "truncate", "drop"] = field(
        default="auto",
        metadata={"help": "Documents longer than max_length: `auto` splits text and drops chats/prompts."},
    )
    seq_alignment: int = field(
        default=1, metadata={"help": "Pad prepared sequences to a multiple of this too (e.g. 64), besides sp."}
    )
    prepared_data_dir: str = field(
        default="data/prepared", metadata={"help": "Parent folder of prepared datasets (cache, by content key)."}
    )
    eval_holdout: float = field(
        default=0.0,
        metadata={
            "help": "Whole documents held out of training for evaluation, prepared like the training data: a "
            "fraction (0.05) or a count (200); chosen by a seeded hash of each row (data_prep/eval_split.py)."
        },
    )
    retrieval_eval_steps: int = field(
        default=0,
        metadata={
            "help": "Every this many steps, score a slice of the retrieval eval (passkey and multi-key at max_length, "
            "longctx/training/retrieval/callback.py) and log its accuracy like the eval loss; 0: off."
        },
    )
    retrieval_eval_samples: int = field(default=2, metadata={"help": "Examples per cell of that slice (6 cells)."})
    balance_rows: Literal["auto", "work", "off"] = field(
        default="auto",
        metadata={
            "help": "`work`: each optimizer step's rows go to data-parallel ranks and micro-steps so that every "
            "micro-step's ranks have even modeled work (causal attention per document plus linear work; "
            "longctx/training/data/balance.py): the same rows each step, another order. `off`: the sampler's order. "
            "`auto` (default): `work` for SFT (it changes nothing the step learns, and a step waits for its slowest "
            "rank), `off` for DPO (not proven there)."
        },
    )
    balance_window: int = field(
        default=1,
        metadata={
            "help": "With `balance_rows: work`, how many consecutive optimizer steps a row may move across: 1 "
            "(default) keeps every step's rows; W > 1 puts rows of like work in the same step within each W steps, "
            "which a step of one row a rank (micro-batch 1, no accumulation) needs to gain anything; an epoch "
            "still trains the same rows."
        },
    )
    allow_unproven_attention: bool = field(
        default=False,
        metadata={
            "help": "Under SP, warn instead of refusing a model type, layer type or attention implementation the "
            "model-family registry does not prove exact (longctx/config/rules/attention/attention_patterns.py). "
            "The CPU rehearsal sets it to compare sp=1 with sp=2 on a model without a proven row; "
            "a real run should not."
        },
    )
    accept_unproven_remote_code_under_sp: bool = field(
        default=False,
        metadata={
            "help": "Under SP, train a model whose config runs custom code (`auto_map` with `trust_remote_code: "
            "true`) although nothing proves that code's attention exact under Ulysses SP (its `model_type` says what "
            "it claims to be, not what runs; longctx/config/rules/remote_code.py). Off: such a recipe is refused."
        },
    )
    allow_cross_document_attention: bool = field(
        default=False,
        metadata={
            "help": "Let packed documents attend to each other (no document isolation). Off by default: sdpa keeps "
            "them apart by splitting attention at position_ids restarts, at any sp size "
            "(longctx/training/attention/isolation.py)."
        },
    )
    on_nonfinite: Literal["stop", "skip"] = field(
        default="stop",
        metadata={
            "help": "A step whose loss or gradient norm is NaN or Inf on any rank: `stop` the run there, naming the "
            "step, the rank and the last good checkpoint (exit 3), or `skip` its update and go on, counted in the "
            "log as `nonfinite_skipped` (longctx/training/faults/run_guard.py). Never trains on such a step."
        },
    )
    step_record: str | None = field(
        default=None,
        metadata={
            "help": "Write one JSON line per logged step to this file: seconds, tokens, documents, the throughput "
            "metrics, peak GPU memory allocated and reserved, host memory (longctx/training/metrics/step_record.py; "
            "benchmarks/gpu_step.py reads it). Each step starts with the GPU's cached blocks released: for measuring."
        },
    )
    step_record_components: bool = field(
        default=False,
        metadata={
            "help": "With `step_record`: profile each recorded step (torch.profiler) and add its communication "
            "seconds by kind (all-to-all, point-to-point, all-gather, reduce, and PCIe copies on CUDA): what "
            "`python -m longctx.memory_plan.fit` calibrates the step-time plan against. Slows the recorded steps."
        },
    )


TRAINERS = ("sft", "dpo", "grpo")


def training_config_class(trainer: str = "sft"):
    """The TRL config dataclass a recipe's training keys parse into: SFTConfig, or for `trainer: dpo` TRL's
    DPOConfig with this repository's preference keys (longctx/config/trainers/preference.py), for `trainer: grpo` TRL's
    GRPOConfig with the online RL keys (longctx/config/trainers/rl.py)."""
    if trainer == "dpo":
        from longctx.config.trainers.preference import PreferenceConfig

        return PreferenceConfig
    if trainer == "grpo":
        from longctx.config.trainers.rl import GRPORecipeConfig

        return GRPORecipeConfig
    from trl import SFTConfig

    return SFTConfig


def trainer_of(values: dict, cli: list[str] = ()) -> str:
    """The recipe's `trainer` (the command line's `--trainer X` wins), read before parsing: it picks the key set."""
    value = override_values(list(cli)).get("trainer", values.get("trainer", "sft"))
    return value if value in TRAINERS else "sft"  # an unknown value: argparse names the choices


@functools.cache
def _built_parser(trainer: str):
    from trl import ModelConfig, TrlParser

    parser = TrlParser((RecipeArguments, training_config_class(trainer), ModelConfig))
    return parser, [(action, action.default, action.required) for action in parser._actions]


def make_parser(trainer: str = "sft"):
    """The trainer's TrlParser, built once per process: building it is most of a parse (~40 ms: `validate --all` and
    the combination map, longctx/combinations/, parse hundreds of recipes). `parse_values` sets a recipe's values as
    its defaults, so every call hands it back with the defaults it was built with."""
    parser, built = _built_parser(trainer)
    for action, default, required in built:
        action.default, action.required = default, required
    return parser


def recipe_keys(trainer: str = "sft") -> set[str]:
    """Every key a recipe may hold: the fields of the entrypoint's three dataclasses, plus TRL's `env`."""
    from trl import ModelConfig

    classes = (RecipeArguments, training_config_class(trainer), ModelConfig)
    return {f.name for cls in classes for f in dataclasses.fields(cls) if f.init} | {"env"}


def gpu_precision_without_gpu(values: dict, cli: list[str]) -> bool:
    """True for a bf16 GPU recipe read on a machine without a GPU (validation, planning, the GPU check).

    TrainingArguments rejects `bf16: true` where no GPU is visible, which would hide every other check
    (and `make sft`'s "needs N GPUs") behind "Your setup doesn't support bf16/gpu"; such a recipe is
    parsed with bf16 off and the flag restored afterwards (the entrypoint refuses to train it without a GPU).
    """
    import torch

    wants_bf16 = values.get("bf16") is True and "--bf16" not in cli and "--no_bf16" not in cli
    return wants_bf16 and not values.get("use_cpu") and not torch.cuda.is_available()


def _argparse_problem(text: str, source: str) -> Problem:
    """argparse's complaint about a command-line value, as a Problem naming the flag."""
    last = text.strip().splitlines()[-1] if text.strip() else "could not parse the command line"
    match = re.search(r"argument --([\w-]+)", last)
    key = match.group(1) if match else "command line"
    return error("command line", key, last.split("error: ", 1)[-1], f"see `python recipes/sft.py --help` ({source})")


def grpo_world(values: dict, cli: list[str]):
    """While a GRPO recipe is parsed, the world size of its accelerate YAML (the command line's wins, as the parse
    reads it), which TRL's batch checks count (longctx/config/trainers/rl.py `planned_world`); nothing otherwise."""
    if trainer_of(values, cli) != "grpo":
        return contextlib.nullcontext()
    from longctx.config.trainers.rl import planned_world

    return planned_world({**values, **override_values(list(cli))}.get("accelerate_config"))


def parse_values(values: dict, cli: list[str], source: str):
    """(recipe, sft, model) from a recipe's YAML values and command-line flags, exactly as TrlParser reads them.

    The YAML's values become the parser's defaults and the command line is parsed by argparse against the
    dataclass field types, as TRL does: `--save_strategy no` stays the string "no", an enum field gets its
    choices checked, and an error names the flag. The entrypoint and preflight both parse through here.
    """
    values = dict(values)
    values.pop("env", None)
    bf16_deferred = gpu_precision_without_gpu(values, cli)
    parser = make_parser(trainer_of(values, cli))
    parser.set_defaults_with_config(**values)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), grpo_world(values, cli):
            recipe, sft, model = parser.parse_args_into_dataclasses(
                args=list(cli) + (["--bf16", "false"] if bf16_deferred else [])
            )
    except SystemExit as exc:
        if exc.code == 0:  # `--help` printed the usage
            raise
        raise RecipeError(source, [_argparse_problem(stderr.getvalue(), source)]) from None
    except (ValueError, TypeError) as exc:
        key = next((k for k in cli_keys(cli) + list(values) if f"{k}" in str(exc)), "recipe")
        raise RecipeError(source, [error(source, key, str(exc), "fix the value as the message says")]) from None
    if bf16_deferred:
        sft.bf16 = True
    if recipe.prepare_data is False:  # YAML reads a bare `off` as false
        recipe.prepare_data = "off"
    recipe.config_source = source
    recipe.explicit_keys = frozenset(values) | frozenset(cli_keys(cli))
    return recipe, sft, model


def unknown_key_problems(values: dict, cli: list[str], source: str, trainer: str = "sft"):
    """The recipe's and the command line's unknown keys (longctx/config/key_homes.py names another file's)."""
    from longctx.config.key_homes import unknown_keys

    return unknown_keys(values, cli, source, recipe_keys(trainer))


def command_line_overrides(argv: list[str]) -> list[str]:
    """An entrypoint's argv less `--config FILE`: the keys the command line set over the recipe."""
    return [a for i, a in enumerate(argv) if a != "--config" and (i == 0 or argv[i - 1] != "--config")]


def parse_recipe(argv: list[str]):
    """Parse `--config recipe.yaml [--key value ...]` into (recipe, sft_config, model_config) or raise RecipeError.

    Strict: an unknown key in the file or on the command line, or any error of `check_recipe`, refuses it.
    """
    argv = list(argv)
    source = argv[argv.index("--config") + 1] if "--config" in argv else "command line"
    cli = command_line_overrides(argv)
    try:
        values = load_yaml_mapping(source) if source != "command line" else {}
    except ConfigError as exc:
        raise RecipeError(source, [str(exc)]) from None
    trainer = trainer_of(values, cli)
    unknown = unknown_key_problems(values, cli, source, trainer)
    for key, value in (values.get("env") or {}).items():  # TRL's `env` key, as TrlParser applies it
        os.environ[key] = str(value)
    known = recipe_keys(trainer)  # every problem at once: the unknown keys are dropped and the rest still checked
    cli = without_keys(cli, {p.key for p in unknown})
    parsed, bad_values = parse_collecting({k: v for k, v in values.items() if k in known or k == "env"}, cli, source)
    if parsed is None:
        raise RecipeError(source, unknown + bad_values)
    recipe, sft, model = parsed
    errors = unknown + bad_values + [p for p in check_recipe(recipe, sft, model, source) if p.severity == "error"]
    if errors:
        raise RecipeError(source, errors)
    return recipe, sft, model


def parse_collecting(values: dict, cli: list[str], source: str):
    """((recipe, sft, model) or None, problems): a value the parser rejects is reported and dropped, and the rest
    parsed again, so one bad value does not hide the rules' findings on everything else."""
    problems = []
    for _ in range(len(values) + len(cli) + 1):
        try:
            return parse_values(values, cli, source), problems
        except RecipeError as exc:
            problems += exc.problems
            keys = {p.key for p in exc.problems if isinstance(p, Problem)}
            if not keys & (set(cli_keys(cli)) | set(values)):
                return None, problems
            cli, values = without_keys(cli, keys), {k: v for k, v in values.items() if k not in keys}
    return None, problems


def recipe_topology(recipe: RecipeArguments) -> Topology:
    """The topology of the recipe's accelerate YAML, resolved against the repository root."""
    return read_topology(repo_path(recipe.accelerate_config))


def check_recipe(recipe, args, model, source: str) -> list[Problem]:
    """Every rule about the recipe on its own topology (longctx/config/rules/), errors and warnings."""
    if not recipe.accelerate_config:
        fix = "name the accelerate YAML, e.g. `accelerate_config: accelerate_configs/cpu-sp2.yaml`"
        return [error(source, "accelerate_config", "is not set", fix)]
    try:
        topo = recipe_topology(recipe)
    except ConfigError as exc:
        fix = "point `accelerate_config` at an existing accelerate YAML under accelerate_configs/"
        return [error(source, "accelerate_config", str(exc), fix)]
    return recipe_problems(recipe, args, model, topo, source)


def exit_on_recipe_error(exc: RecipeError) -> None:
    """Print the problems without a traceback and exit 2 (an unusable configuration)."""
    print(f"error: {exc}", file=sys.stderr)
    sys.exit(2)
