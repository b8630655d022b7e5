"""Custom model code runs only when a recipe opts in: the rule, checked before any model is loaded."""

from pathlib import Path

from longctx.config.problems import Problem, error


def remote_code_problems(model, sft, source: str) -> list[Problem]:
    """A local model whose config needs custom code (`auto_map`) must opt in with `trust_remote_code: true`.

    The default stays false: executing a repository's Python is a decision a recipe states, never a default.
    """
    config = Path(model.model_name_or_path or "") / "config.json"
    if sft.trust_remote_code or not config.is_file():
        return []
    if '"auto_map"' not in config.read_text():
        return []
    msg = f"{config} names custom model code (`auto_map`), which runs only with `trust_remote_code: true`"
    return [error(source, "trust_remote_code", msg, "read that code, then set the key explicitly in the recipe")]
