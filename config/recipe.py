"""The recipe parser shared by `recipes/sft.py`, preflight and the tests.

A recipe is one YAML read by TRL's `TrlParser` into three dataclasses: `RecipeArguments` (ours: data,
topology, model initialisation), `SFTConfig` and `ModelConfig`. Parsing is strict (an unknown key is an
error naming the file and the nearest valid key), and the checks that need only the recipe and its
accelerate YAML run here, all collected and raised once, before any model or process group exists.
"""

import dataclasses
import difflib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from config.paths import REPO_ROOT
from config.rules.alst import alst_problems
from config.rules.evaluation import evaluation_problems
from config.rules.isolation import packed_isolation_problems
from config.rules.prepared_data import prepared_data_problems
from config.rules.resume import resume_recipe_problems
from config.topology import ConfigError, Topology, load_yaml_mapping, read_topology

SP_ATTENTION = ("sdpa", "flash_attention_2", "flash_attention_3")


class RecipeError(ValueError):
    """A recipe cannot run as written; `problems` holds every reason, each with its fix."""

    def __init__(self, source: str, problems: list[str]):
        self.source, self.problems = source, problems
        super().__init__(f"{source}: " + "\n  ".join(["recipe cannot run:"] + problems))


def _script_arguments_base():
    from trl import ScriptArguments

    return ScriptArguments


@dataclass
class RecipeArguments(_script_arguments_base()):
    """Recipe keys that TRL's dataclasses lack: the topology the recipe runs on and how the model starts."""

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
    # ---- ALST memory features (training/alst.py, training/model_config.py); all off by default
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
            "architectures/), so `model_init: random` needs no download of the model repository."
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

    # ---- data preparation (data_prep/, `make data`): checked by config.rules.prepared_data.prepared_data_problems
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
            "evaluation/callback.py) and log its accuracy like the eval loss; 0: off."
        },
    )
    retrieval_eval_samples: int = field(default=2, metadata={"help": "Examples per cell of that slice (6 cells)."})
    allow_cross_document_attention: bool = field(
        default=False,
        metadata={
            "help": "Let packed documents attend to each other (no document isolation). Off by default: sdpa keeps "
            "them apart by splitting attention at position_ids restarts, at any sp size (training/isolation.py)."
        },
    )


def make_parser():
    from trl import ModelConfig, SFTConfig, TrlParser

    return TrlParser((RecipeArguments, SFTConfig, ModelConfig))


def _known_keys() -> set[str]:
    from trl import ModelConfig, SFTConfig

    classes = (RecipeArguments, SFTConfig, ModelConfig)
    return {f.name for cls in classes for f in dataclasses.fields(cls) if f.init} | {"env"}


def unknown_key_problems(keys, known: set[str], where: str) -> list[str]:
    """One message per unknown key, with the closest valid key when there is a plausible one."""
    problems = []
    for key in keys:
        if key in known:
            continue
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
        hint = f"did you mean `{close[0]}`?" if close else "remove it, or check the spelling against `--help`"
        problems.append(f"{where}: unknown key `{key}`: {hint}")
    return problems


def _cli_keys(argv: list[str]) -> list[str]:
    """Flag names on the command line, less `--config`, `--help` and HfArgumentParser's `--no_<bool>` negations."""
    keys = [a[2:].split("=", 1)[0] for a in argv if a.startswith("--") and a not in ("--config", "--help")]
    return [k.removeprefix("no_") for k in keys]


def gpu_precision_without_gpu(config: dict, argv: list[str]) -> bool:
    """True for a bf16 GPU recipe read on a machine without a GPU (validation, planning, the GPU check).

    TrainingArguments rejects `bf16: true` where no GPU is visible, which would hide every other check
    (and `make sft`'s "needs N GPUs") behind "Your setup doesn't support bf16/gpu"; such a recipe is
    parsed with bf16 off and the flag restored afterwards.
    """
    import torch

    wants_bf16 = config.get("bf16") is True and "--bf16" not in argv and "--no_bf16" not in argv
    return wants_bf16 and not config.get("use_cpu") and not torch.cuda.is_available()


def parse_recipe(argv: list[str]):
    """Parse `--config recipe.yaml [--key value ...]` into (recipe, sft_config, model_config) or raise RecipeError."""
    argv = list(argv)
    source = argv[argv.index("--config") + 1] if "--config" in argv else "command line"
    known = _known_keys()
    try:
        config = load_yaml_mapping(source) if source != "command line" else {}
    except ConfigError as exc:
        raise RecipeError(source, [str(exc)]) from None
    problems = unknown_key_problems(config, known, source)
    problems += unknown_key_problems(_cli_keys(argv), known, "command line")
    if problems:
        raise RecipeError(source, problems)
    bf16_deferred = gpu_precision_without_gpu(config, argv)
    try:
        recipe, sft, model = make_parser().parse_args_and_config(
            argv + (["--bf16", "false"] if bf16_deferred else []), fail_with_unknown_args=True
        )
    except ValueError as exc:
        raise RecipeError(source, [str(exc)]) from None
    if bf16_deferred:
        sft.bf16 = True  # what the recipe says; the entrypoint refuses to train it without a GPU anyway
    recipe.config_source = source
    problems = check_recipe(recipe, sft, model, source)
    if problems:
        raise RecipeError(source, problems)
    return recipe, sft, model


def recipe_topology(recipe: RecipeArguments) -> Topology:
    """The topology of the recipe's accelerate YAML, resolved against the repository root."""
    path = Path(recipe.accelerate_config)
    return read_topology(path if path.is_absolute() or path.exists() else REPO_ROOT / path)


def check_recipe(recipe, sft, model, source: str) -> list[str]:
    """Every reason the recipe cannot run on its own topology, each naming the key and the fix."""
    if not recipe.accelerate_config:
        return [
            (
                f"{source}: `accelerate_config` is not set: name the accelerate YAML, "
                "e.g. `accelerate_config: accelerate_configs/cpu-sp2.yaml`"
            )
        ]
    try:
        topo = recipe_topology(recipe)
    except ConfigError as exc:
        return [f"{source}: `accelerate_config`: {exc}"]
    problems = []
    sp = topo.sp_size
    if sp > 1 and model.attn_implementation != topo.sp_attn_implementation:
        problems.append(
            f"{source}: `attn_implementation` is {model.attn_implementation!r} but {topo.path} sets "
            f"`parallelism_config_sp_attn_implementation: {topo.sp_attn_implementation}`; make them equal "
            f"(one of {', '.join(SP_ATTENTION)})"
        )
    if sft.max_length is not None and sft.max_length % sp:
        problems.append(
            f"{source}: `max_length` {sft.max_length} is not a multiple of sp={sp} ({topo.path}); "
            f"use {sft.max_length // sp * sp or sp}"
        )
    if sft.pad_to_multiple_of is not None and sft.pad_to_multiple_of % sp:
        problems.append(
            f"{source}: `pad_to_multiple_of` {sft.pad_to_multiple_of} is not a multiple of sp={sp}; "
            f"use {sp} (or leave it unset and the entrypoint pads to a multiple of sp)"
        )
    if sp > 1 and sft.use_cpu and sft.max_length and sft.pad_to_multiple_of != sft.max_length:
        problems.append(
            f"{source}: `pad_to_multiple_of` must equal `max_length` ({sft.max_length}) for sp>1 on CPU: "
            "DeepSpeed's SP dataloader all-gathers every rank's batch and gloo needs equal shapes; "
            f"set `pad_to_multiple_of: {sft.max_length}`"
        )
    if sp > 1 and (sft.packing or sft.padding_free):
        problems.append(
            f"{source}: `packing`/`padding_free` are TRL's padding-free collator, which emits 1-D "
            "`cu_seq_lens_*` tensors that DeepSpeed's SP dataloader cannot shard; set both to false"
        )
    # ---- resume and remote code
    problems += resume_recipe_problems(recipe, sft, model, topo, source)
    problems += prepared_data_problems(recipe, sft, model, topo, source)
    problems += packed_isolation_problems(recipe, sft, model, topo, source)
    problems += alst_problems(recipe, sft, model, topo, source)
    problems += evaluation_problems(recipe, sft, model, topo, source)
    return problems


def exit_on_recipe_error(exc: RecipeError) -> None:
    """Print the problems without a traceback and exit 2 (an unusable configuration)."""
    print(f"error: {exc}", file=sys.stderr)
    sys.exit(2)
