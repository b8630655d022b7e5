"""Where a model's `config.json` is read from, offline: the one lookup preflight, the probe and the rehearsal use.

In order: the recipe's `model_config_source` when it names one (the explicit choice wins), the model as a local
folder (as given, or relative to the repository root), the Hugging Face cache, and the architecture snapshot
shipped under recipes/assets/architectures/<org>/<name>/. Nothing is downloaded: preflight must answer before
any network or GPU work, and the probe and the rehearsal build random-weight miniatures from the config alone.
"""

import os
from pathlib import Path

from longctx.config.paths import ARCHITECTURES_DIR, REPO_ROOT


def hf_cache_file(name: str, filename: str) -> Path | None:
    """`filename` of the newest snapshot of Hub model `name` in the local Hugging Face cache, if any."""
    home = Path(os.environ.get("HF_HOME", Path.home() / ".cache/huggingface"))
    hub = Path(os.environ.get("HF_HUB_CACHE") or home / "hub")
    snapshots = hub / f"models--{name.replace('/', '--')}" / "snapshots"
    found = sorted(snapshots.glob(f"*/{filename}")) if snapshots.is_dir() else []
    return found[-1] if found else None


def find_model_config(name: str, config_source: str | None = None) -> Path | None:
    """The config.json for a model name or path, from disk only; None when no offline copy exists."""
    folders = [Path(config_source), REPO_ROOT / config_source] if config_source else []
    for folder in [*folders, Path(name), REPO_ROOT / name]:
        if (folder / "config.json").is_file():
            return folder / "config.json"
    cached = hf_cache_file(name, "config.json")
    if cached:
        return cached
    shipped = ARCHITECTURES_DIR / name / "config.json"
    return shipped if shipped.is_file() else None


def moe_sizes(config: dict) -> dict:
    """Arch's MoE fields from a config (Qwen3-MoE keys, gpt-oss/Mixtral's `num_local_experts`); {} when dense.

    Which layers are MoE follows transformers' Qwen3-MoE rule: not in `mlp_only_layers`, and every
    `decoder_sparse_step`-th layer (1: all); gpt-oss, Mixtral and Qwen3.5-MoE have neither key, so every layer is
    MoE. A shared expert (Qwen3.5-MoE, Qwen3-Next: `shared_expert_intermediate_size`) is a gated MLP every token
    runs beside its top-k experts, scaled by a one-output sigmoid gate.
    """
    experts = int(config.get("num_experts") or config.get("num_local_experts") or 0)
    if not experts:
        return {}
    layers, step = int(config["num_hidden_layers"]), int(config.get("decoder_sparse_step") or 1)
    dense = set(config.get("mlp_only_layers") or [])
    moe_layers = sum(1 for i in range(layers) if i not in dense and (i + 1) % step == 0)
    top_k = int(config.get("num_experts_per_tok") or config.get("experts_per_token") or 1)
    width = int(config.get("moe_intermediate_size") or config["intermediate_size"])
    shared = int(config.get("shared_expert_intermediate_size") or 0)
    return {
        "experts": experts,
        "top_k": top_k,
        "expert_intermediate": width,
        "moe_layers": moe_layers,
        "shared_intermediate": shared,
    }


EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")


def expert_count(config: dict) -> int:
    """How many routed experts a config.json declares (0: dense); its language model's for a multimodal one."""
    config = config.get("text_config") or config
    return max((int(config.get(key) or 0) for key in EXPERT_COUNT_KEYS), default=0)
