"""The recipe's model, built one way for training, `make eval` and the rehearsal's load-back.

`model_config_source` lets `model_init: random` read a shipped architecture snapshot
(recipes/assets/architectures/<org>/<model>) instead of the Hub repository, so measuring a real architecture
needs no download at all. `model_config_overrides` changes keys of that config, above all the rope
scaling a recipe needs to train past the model's native positions (llama3.1-8b/sft-256k-sp8).

Why one builder: a model loaded with a plain `from_pretrained(path)` gets the model's native config, so a
YaRN x4 recipe's starting model, or the base under a LoRA adapter (an adapter folder holds no config), would be
scored with default rope while training trained another. Here the config is always the effective one (the
model's, or a checkpoint's saved one, with the recipe's overrides on top), weights load through TRL's
`create_model_from_path` (what SFTTrainer itself calls for a path), and a LoRA adapter is wrapped on a base
built exactly so. The trainer saves the effective config beside every checkpoint, LoRA ones included
(`save_effective_config`), so a checkpoint says which rope it trained with.
"""

from pathlib import Path

import torch

from longctx.config.paths import REPO_ROOT
from longctx.config.recipe import RecipeError
from longctx.config.rules.model_config import overrides_of
from longctx.training.attention.sinks import enable_sinks_and_windows

ADAPTER_CONFIG = "adapter_config.json"


def build_config(recipe, model_args, trust_remote_code: bool = False, source: str | None = None):
    """AutoConfig of `source` (a saved checkpoint) or else of the snapshot / model repository, with the recipe's
    overrides applied and unknown keys refused."""
    from transformers import AutoConfig

    revision = None
    if source is None:
        source = recipe.model_config_source or model_args.model_name_or_path
        if recipe.model_config_source and not Path(source).is_dir():
            source = str(REPO_ROOT / source)  # snapshots are named relative to the repository root
        revision = None if recipe.model_config_source else model_args.model_revision
    config = AutoConfig.from_pretrained(source, revision=revision, trust_remote_code=trust_remote_code)
    overrides = overrides_of(recipe)
    unknown = sorted(k for k in overrides if not hasattr(config, k))
    if unknown:
        raise ValueError(
            f"`model_config_overrides`: {type(config).__name__} has no key(s) {', '.join(unknown)}; "
            f"see {source}/config.json for the valid names"
        )
    for key, value in overrides.items():
        setattr(config, key, value)
    if "rope_parameters" in overrides and hasattr(config, "standardize_rope_params"):
        config.standardize_rope_params()
    return config


def torch_dtype(model_args):
    """The recipe's `dtype` as torch's (None and "auto" keep transformers' own choice)."""
    return getattr(torch, model_args.dtype) if model_args.dtype not in (None, "auto") else model_args.dtype


GPU_INIT_SHARE = 0.25  # random weights are drawn on the run's GPU when the model takes at most this share of it


def init_device(build, device) -> torch.device:
    """Where `build()` (a model factory) draws its random weights: the run's GPU when the model takes at most
    GPU_INIT_SHARE of it, else the CPU.

    Why: torch draws random numbers on the CPU with one generator in a serial kernel, about 16M parameters a
    second on this project's CPU machine (1.49B in 94 s, benchmarks/README.md): minutes for an 8B model before its
    first step, where a GPU draws them in about a second. The same seed gives every rank the same weights on the
    same GPU model; a CPU run (`use_cpu`, the parity tests) draws on the CPU as before. Sized on the meta device."""
    device = torch.device(device or "cpu")
    if device.type != "cuda" or not torch.cuda.is_available():
        return torch.device("cpu")
    with torch.device("meta"):
        model = build()
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    fits = size <= GPU_INIT_SHARE * torch.cuda.get_device_properties(device).total_memory
    return device if fits else torch.device("cpu")


def build_random_model(recipe, model_args, seed: int, trust_remote_code: bool = False, config=None, device=None):
    """The architecture with random weights, identical on every rank and for every sp size (seeded); drawn on
    `device` (the run's, `init_device`) when it is a GPU the model fits comfortably."""
    from transformers import AutoModelForCausalLM

    config = config if config is not None else build_config(recipe, model_args, trust_remote_code)
    # gpt-oss declares no sdpa support until its sinks have an sdpa that honours them
    # (longctx/training/attention/sinks.py)
    enable_sinks_and_windows(config, model_args.attn_implementation)
    dtype = torch_dtype(model_args) if model_args.dtype not in (None, "auto") else torch.float32
    attention = model_args.attn_implementation

    def build():
        return AutoModelForCausalLM.from_config(
            config, dtype=dtype, attn_implementation=attention, trust_remote_code=trust_remote_code
        )

    where = init_device(build, device)
    torch.manual_seed(seed)
    with torch.device(where):
        return build()


def load_pretrained(source: str, config, model_args, args, revision: str | None = None):
    """Weights from `source` under the effective `config`, through TRL's loader (as SFTTrainer loads a path).
    device_map None: accelerate / DeepSpeed place the model, as TRL sets it for every distributed run."""
    import copy

    from trl.trainer.utils import create_model_from_path

    kwargs = {
        "revision": revision,
        "trust_remote_code": args.trust_remote_code,
        "attn_implementation": model_args.attn_implementation,
        "dtype": torch_dtype(model_args),
        "device_map": None,
    }
    config = copy.deepcopy(config)
    # gpt-oss: its sink-aware sdpa before the class is asked for sdpa, and MXFP4 experts loaded dequantized
    enable_sinks_and_windows(config, model_args.attn_implementation)
    quantization = training_quantization(source, revision)
    if quantization is not None:
        kwargs["quantization_config"] = quantization
    for key, value in (args.model_init_kwargs or {}).items():  # config keys replace config keys, as without
        if hasattr(config, key) and key not in kwargs:  # a `config` object from_pretrained would apply them
            setattr(config, key, value)
        else:
            kwargs[key] = value
    return create_model_from_path(source, config=config, **kwargs)


def refuse_unproven_attention(recipe, model_args, config, trust_remote_code: bool = False) -> None:
    """The attention-pattern gate (longctx/config/rules/attention/attention_patterns.py) on the config the model is
    built from,
    before any weight is loaded: the recipe rules ran it where the config.json was on disk; a Hub model not yet in
    the cache reaches here with only its config downloaded. ValueError naming each refused layer type, and custom
    model code under SP the recipe did not accept (longctx/config/rules/remote_code.py)."""
    from longctx.config.recipe import recipe_topology
    from longctx.config.rules.attention.attention_patterns import pattern_problems
    from longctx.config.rules.remote_code import ACCEPT_REMOTE_CODE_UNDER_SP, remote_code_under_sp_problems

    if not getattr(recipe, "accelerate_config", None):
        return
    sp, allow = recipe_topology(recipe).sp_size, getattr(recipe, "allow_unproven_attention", False)
    attn, name, values = model_args.attn_implementation, model_args.model_name_or_path, config.to_dict()
    accepted = getattr(recipe, ACCEPT_REMOTE_CODE_UNDER_SP, False)
    problems = remote_code_under_sp_problems(values, sp, trust_remote_code, accepted, recipe.config_source, name)
    problems += pattern_problems(values, sp, attn, recipe.config_source, name, allow)
    errors = [str(p) for p in problems if p.severity == "error"]
    if errors:
        raise ValueError("\n  ".join(errors))


def starting_model(recipe, model_args, args, config=None):
    """The recipe's model before training: random (seeded by `args.seed`) or the pretrained weights, under the
    effective config (`config`, else the recipe's), once the attention-pattern gate accepts it."""
    if config is None:
        config = build_config(recipe, model_args, args.trust_remote_code)
    refuse_unproven_attention(recipe, model_args, config, args.trust_remote_code)
    if recipe.model_init == "random":
        device = None if getattr(args, "use_cpu", True) else args.device
        return build_random_model(recipe, model_args, args.seed, args.trust_remote_code, config, device)
    return load_pretrained(model_args.model_name_or_path, config, model_args, args, model_args.model_revision)


def is_adapter(folder: str) -> bool:
    return (Path(folder) / ADAPTER_CONFIG).is_file()


def trained_model(recipe, model_args, args, checkpoint: str):
    """A saved output or checkpoint folder: full weights under its saved config, or a LoRA adapter (PEFT) on the
    starting model rebuilt under the config saved beside the adapter; the recipe's overrides on top of either."""
    has_config = (Path(checkpoint) / "config.json").is_file()
    config = build_config(recipe, model_args, args.trust_remote_code, checkpoint if has_config else None)
    if not is_adapter(checkpoint):
        return load_pretrained(checkpoint, config, model_args, args)
    from peft import PeftModel

    return PeftModel.from_pretrained(starting_model(recipe, model_args, args, config), checkpoint)


def load_recipe_model(recipe, model_args, args, checkpoint: str | None = None):
    """The one way to build the recipe's model: `checkpoint` when given, else the starting model. `args` is the
    recipe's SFTConfig (seed, trust_remote_code, model_init_kwargs). Bad keys are a RecipeError."""
    try:
        if checkpoint:
            return trained_model(recipe, model_args, args, checkpoint)
        return starting_model(recipe, model_args, args)
    except (ValueError, TypeError) as exc:
        raise RecipeError(recipe.config_source, [str(exc)]) from None


def build_model(recipe, model_args, training_args):
    """What the entrypoint hands SFTTrainer as `model`: the starting model, built by `load_recipe_model`. The
    `model_init_kwargs` it used are cleared, so TRL does not warn that an instance ignores them."""
    model = load_recipe_model(recipe, model_args, training_args)
    training_args.model_init_kwargs = None
    return model


def save_effective_config(model, output_dir: str) -> None:
    """Write the config the model trained with beside a LoRA adapter (PEFT saves the adapter only: without it
    the folder would reload its base with native rope). A full model's save already writes its config.json."""
    from peft import PeftModel

    if isinstance(model, PeftModel):
        model.get_base_model().config.save_pretrained(output_dir)


def training_quantization(model_name_or_path: str, revision: str | None = None):
    """`Mxfp4Config(dequantize=True)` for a checkpoint stored in MXFP4 (gpt-oss), else None.

    Why: gpt-oss's Hub weights keep the experts in MXFP4, which transformers cannot train ("MXFP4 quantization
    don't support training"); its own advice is to load them dequantized to bf16, which full fine-tuning needs.
    The config is read from disk only (local folder or cache); an unreadable one means no quantization to undo.
    """
    from transformers import AutoConfig, Mxfp4Config

    try:
        config = AutoConfig.from_pretrained(model_name_or_path, revision=revision)
    except (OSError, ValueError):
        return None
    quantization = getattr(config, "quantization_config", None) or {}
    method = quantization.get("quant_method") if isinstance(quantization, dict) else quantization.quant_method
    return Mxfp4Config(dequantize=True) if method == "mxfp4" else None
