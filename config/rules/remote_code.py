"""Custom model code runs only when a recipe opts in: the rule, checked before any model is loaded."""

from pathlib import Path


def remote_code_problems(model, sft, source: str) -> list[str]:
    """A local model whose config needs custom code (`auto_map`) must opt in with `trust_remote_code: true`.

    The default stays false: executing a repository's Python is a decision a recipe states, never a default.
    """
    config = Path(model.model_name_or_path or "") / "config.json"
    if sft.trust_remote_code or not config.is_file():
        return []
    if '"auto_map"' not in config.read_text():
        return []
    message = (
        f"{source}: {config} names custom model code (`auto_map`), which runs only with "
        "`trust_remote_code: true`; read that code, then set the key explicitly in the recipe"
    )
    return [message]
