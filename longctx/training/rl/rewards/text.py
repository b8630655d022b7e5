"""The text of a completion as TRL hands it to a reward function, and the answers a dataset row gives."""


def completion_text(completion) -> str:
    """A completion as text: TRL passes a string for text prompts and a list of messages (the assistant's turn)
    for conversational ones."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return "".join(m.get("content") or "" for m in completion if isinstance(m, dict))
    raise TypeError(f"a completion is text or a list of messages, got {type(completion).__name__}")


def answers_of(value) -> list[str]:
    """A row's gold answer(s): one string, or a list of acceptable strings (multi-answer QA)."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [str(value)]
