"""Check one raw row against the dataset format and extract what the tokenizer needs.

Formats: `text` (a `text` column, loss on every token), `messages` (a chat list rendered with the chat
template, loss on assistant turns only) and `prompt_completion` (loss on the completion only). A row that
does not fit is a counted problem with a reason (`malformed`, `empty`, `no_trainable_tokens`), never an
exception; `auto` picks the format from the first readable row's columns.
"""

from data_prep.errors import PrepError

FORMATS = ("text", "messages", "prompt_completion")
COLUMNS = {"text": ("text",), "messages": ("messages",), "prompt_completion": ("prompt", "completion")}


def detect_format(row: dict, where: str) -> str:
    """The format whose columns the row has; `messages` wins over `prompt`/`completion`, which win over `text`."""
    for fmt in ("messages", "prompt_completion", "text"):
        if all(c in row for c in COLUMNS[fmt]):
            return fmt
    raise PrepError(
        f"{where}: cannot tell the dataset format from the columns {sorted(row)}: expected `text`, `messages` or "
        "`prompt` + `completion`; rename the columns or set `dataset_format` (--format)"
    )


def _string(row: dict, col: str, allow_empty: bool = False):
    """(value, None) or (None, problem) for a column that must hold a non-blank string."""
    if col not in row:
        return None, ("malformed", f"missing column `{col}`")
    value = row[col]
    if not isinstance(value, str):
        return None, ("malformed", f"`{col}` must be a string, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        return None, ("empty", f"`{col}` is empty or whitespace only")
    return value, None


def _messages(row: dict):
    if "messages" not in row:
        return None, ("malformed", "missing column `messages`")
    msgs = row["messages"]
    if not isinstance(msgs, list) or not msgs:
        return None, ("malformed" if not isinstance(msgs, list) else "empty", "`messages` must be a non-empty list")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            return None, ("malformed", f"`messages[{i}]` must be an object with string `role` and `content`")
    if not any(m["role"] == "assistant" and m["content"].strip() for m in msgs):
        return None, ("no_trainable_tokens", "no assistant turn with content: nothing to train on")
    return [{"role": m["role"], "content": m["content"]} for m in msgs], None


def extract(row: dict, fmt: str):
    """(payload, None) for a usable row, or (None, (reason, detail))."""
    if fmt == "text":
        return _string(row, "text")
    if fmt == "messages":
        return _messages(row)
    prompt, problem = _string(row, "prompt", allow_empty=True)
    if problem:
        return None, problem
    completion, problem = _string(row, "completion")
    if problem:
        return None, ("no_trainable_tokens", problem[1]) if problem[0] == "empty" else problem
    return (prompt, completion), None


def has_columns(row: dict, fmt: str) -> bool:
    return all(c in row for c in COLUMNS[fmt])
