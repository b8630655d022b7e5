"""Custom model code runs only when a recipe opts in: the rules, checked before any model is loaded.

Under SP a second opt-in: the attention-pattern gate (attention_patterns.py) reads the config's `model_type` to
find the family row that proves its attention exact, but a config whose model classes map to custom code
(`auto_map`, run with `trust_remote_code: true`) runs the repository's code, not the family's: a `"llama"` config
may carry a chunked or sparse attention whose mask DeepSpeed's Ulysses adapter drops. Nothing proves that code exact
under SP, so sp > 1 refuses it unless the recipe sets `ACCEPT_REMOTE_CODE_UNDER_SP`, whose name states the risk.
"""

from pathlib import Path

from longctx.config.problems import Problem, error


def remote_code_problems(model, args, source: str) -> list[Problem]:
    """A local model whose config needs custom code (`auto_map`) must opt in with `trust_remote_code: true`.

    The default stays false: executing a repository's Python is a decision a recipe states, never a default.
    """
    config = Path(model.model_name_or_path or "") / "config.json"
    if args.trust_remote_code or not config.is_file():
        return []
    if '"auto_map"' not in config.read_text():
        return []
    msg = f"{config} names custom model code (`auto_map`), which runs only with `trust_remote_code: true`"
    return [error(source, "trust_remote_code", msg, "read that code, then set the key explicitly in the recipe")]


ACCEPT_REMOTE_CODE_UNDER_SP = "accept_unproven_remote_code_under_sp"


def custom_model_classes(config: dict) -> list[str]:
    """The `auto_map` entries that replace the config or model classes with the repository's code."""
    auto_map = config.get("auto_map") or {}
    if isinstance(auto_map, list | tuple):  # an old form: a list of class references
        return [str(ref) for ref in auto_map]
    return [f"{name}: {ref}" for name, ref in auto_map.items() if name.startswith(("AutoConfig", "AutoModel"))]


def remote_code_under_sp_problems(config: dict, sp: int, trust: bool, accepted: bool, source, model: str):
    """sp > 1 with custom model code that will run (`trust_remote_code: true` and an `auto_map` to model code),
    refused unless the recipe accepts the risk by name."""
    custom = custom_model_classes(config) if trust and sp > 1 else []
    if not custom or accepted:
        return []
    model_type = config.get("model_type")
    msg = (
        f"{model} runs custom code ({'; '.join(custom)}) under SP (sp={sp}): the attention-pattern gate trusts its "
        f"model_type {model_type!r}, but the code that runs is the repository's, and nothing proves it exact under "
        "Ulysses SP (DeepSpeed's adapter drops attention masks: a chunk, window or sparse selection in that code "
        "would silently become full attention)"
    )
    fix = (
        "train it at sp=1; or, once you have read its attention code and compared a run at sp=1 with one at sp=2 "
        f"(losses and grad norms equal), set `{ACCEPT_REMOTE_CODE_UNDER_SP}: true` in the recipe"
    )
    return [error(source, ACCEPT_REMOTE_CODE_UNDER_SP, msg, fix)]
