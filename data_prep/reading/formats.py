"""Check one raw row against the dataset format and extract what the tokenizer needs.

Formats: `text` (a text column, loss on every token), `messages` (a chat list rendered with the chat template,
loss on assistant turns only) and `prompt_completion` (loss on the completion only). The recipe's mapping keys
(longctx/config/data_keys.py) name the columns as the data has them: `Columns` reads a row through them, and
recognises ShareGPT rows (`conversations` of `from`/`value` turns, roles `human`/`gpt`) without any key. A row
that does not fit is a counted problem with a reason (`malformed`, `empty`, `no_trainable_tokens`), never an
exception; `auto` picks the format from the first readable row's columns.

Alpaca rows (`instruction`, `input`, `output`, as axolotl's `alpaca` type and LLaMA-Factory's default columns
name them) are prompt/completion rows without any key: the prompt is `instruction`, then a newline, then `input`
when it is not empty (LLaMA-Factory's join; long-context data keeps its document in `input`), and the completion is
`output`. `input_field` names another column to join (LLaMA-Factory's `query`, axolotl's `field_input`).

A chat turn's content may be OpenAI's list of content parts (`[{"type": "text", "text": ...}, ...]`): its text parts
are joined with nothing between them, as the Hugging Face chat templates that take parts render them; any other
part (`image_url`, `input_audio`, `file`, ...) makes the row malformed, naming the part's type and where it is.
"""

import difflib
from dataclasses import dataclass, field

from data_prep.errors import PrepError
from longctx.config.data_keys import (
    ALPACA_COMPLETION,
    ALPACA_INPUT,
    ALPACA_PROMPT,
    DEFAULT_ROLE_MAP,
    SHAREGPT_CONTENT,
    SHAREGPT_MESSAGES,
    SHAREGPT_ROLE,
)

FORMATS = ("text", "messages", "prompt_completion")
MAPPING_KEYS = {  # `columns` entry -> the recipe key that sets it
    "text": "dataset_text_field",
    "messages": "messages_field",
    "role": "role_field",
    "content": "content_field",
    "roles": "role_map",
    "prompt": "prompt_field",
    "completion": "completion_field",
    "input": "input_field",
}
INPUT_JOIN = "\n"  # instruction + INPUT_JOIN + input: LLaMA-Factory's join of its `prompt` and `query` columns


@dataclass(frozen=True)
class Columns:
    """Where each format's fields are in the data (`PrepConfig.columns`: only what differs from the defaults)."""

    text: str = "text"
    messages: str | None = None  # None: `messages`, else ShareGPT's `conversations`
    role: str | None = None  # None: `role`, else ShareGPT's `from`
    content: str | None = None  # None: `content`, else ShareGPT's `value`
    roles: dict = field(default_factory=dict)  # data's role value -> chat role, on top of DEFAULT_ROLE_MAP
    prompt: str = "prompt"
    completion: str = "completion"
    input: str | None = None  # None: Alpaca's `input` beside an `instruction` prompt, else no input column

    @classmethod
    def of(cls, mapping: dict | None) -> "Columns":
        return cls(**(mapping or {}))

    def messages_column(self, row: dict) -> str:
        if self.messages:
            return self.messages
        return "messages" if "messages" in row or SHAREGPT_MESSAGES not in row else SHAREGPT_MESSAGES

    def needs(self, fmt: str, row: dict | None = None) -> tuple[str, ...]:
        """The columns a row of this format must have."""
        if fmt == "text":
            return (self.text,)
        if fmt == "messages":
            return (self.messages_column(row or {}),)
        return self.prompt_columns(row or {})

    def alpaca(self, row: dict) -> bool:
        """A row in Alpaca's columns with the prompt/completion keys at their defaults and no `prompt` column."""
        defaults = self.prompt == "prompt" and self.completion == "completion"
        return defaults and "prompt" not in row and ALPACA_PROMPT in row and ALPACA_COMPLETION in row

    def prompt_columns(self, row: dict) -> tuple[str, str]:
        return (ALPACA_PROMPT, ALPACA_COMPLETION) if self.alpaca(row) else (self.prompt, self.completion)

    def input_column(self, row: dict) -> str | None:
        """The column joined after the prompt: `input_field`, else Alpaca's `input` after an `instruction` prompt."""
        if self.input:
            return self.input
        return ALPACA_INPUT if self.prompt_columns(row)[0] == ALPACA_PROMPT and ALPACA_INPUT in row else None

    def used(self, fmt: str, row: dict) -> set[str]:
        """The columns a row of this format is read from."""
        return {*self.needs(fmt, row), *([self.input_column(row)] if fmt == "prompt_completion" else [])} - {None}

    def role_of(self, turn: dict):
        """The chat role of a turn: the recipe's `role_map` first; ShareGPT's role names (`human`, `gpt`) when the
        role is not read from a `role` field (a `messages` row's roles are used as they are, as before)."""
        field_name = self.role or ("role" if "role" in turn else SHAREGPT_ROLE)
        role = turn.get(field_name)
        if not isinstance(role, str):
            return role
        defaults = DEFAULT_ROLE_MAP if field_name != "role" else {}
        return {**defaults, **self.roles}.get(role, role)

    def content_of(self, turn: dict):
        return turn.get(self.content) if self.content else turn.get("content", turn.get(SHAREGPT_CONTENT))

    def turn_fields(self) -> str:
        role = f"`{self.role}`" if self.role else f"`role` (or `{SHAREGPT_ROLE}`)"
        content = f"`{self.content}`" if self.content else f"`content` (or `{SHAREGPT_CONTENT}`)"
        return f"string {role} and {content}"


def mapping_hint() -> str:
    """The fix for columns that are not where the format expects them: the recipe keys that say where they are."""
    return (
        "name your columns in the recipe: `dataset_text_field` (text), `messages_field` with `role_field`, "
        "`content_field` and `role_map` (chats; ShareGPT's conversations/from/value is read as is), or "
        "`prompt_field` + `completion_field`; `dataset_format` picks one format when several columns fit"
    )


def detect_format(row: dict, where: str, columns: Columns | None = None) -> str:
    """The format whose columns the row has; `messages` wins over prompt/completion, which win over text."""
    columns = columns or Columns()
    for fmt in ("messages", "prompt_completion", "text"):
        if all(c in row for c in columns.needs(fmt, row)):
            return fmt
    wanted = [columns.text, columns.messages or "messages", f"{columns.prompt} + {columns.completion}"]
    raise PrepError(
        f"{where}: cannot tell the dataset format from the columns {sorted(row)}: expected "
        f"{', '.join(f'`{w}`' for w in wanted)}{misspelled(columns, row)}; {mapping_hint()}"
    )


def misspelled(columns: Columns, row: dict) -> str:
    """`; `instrution` (did you mean `instruction`?)` for each column the mapping names that the row lacks but
    has one typo away, else ''."""
    named = [columns.text, columns.messages, columns.prompt, columns.completion, columns.input]
    hints = [
        f"`{c}`{did_you_mean(c, row)}" for c in dict.fromkeys(named) if c and c not in row and did_you_mean(c, row)
    ]
    return f"; no column {', '.join(hints)}" if hints else ""


def did_you_mean(col: str, row: dict) -> str:
    """` (did you mean `x`?)` for a column name one typo away from one the row has, else ''."""
    close = difflib.get_close_matches(col, [str(k) for k in row], n=1, cutoff=0.75)
    return f" (did you mean `{close[0]}`?)" if close else ""


def unused_text_columns(row: dict, fmt: str, columns: Columns) -> list[str]:
    """The row's columns that hold text (a non-empty string with a space: not an id or a label) the format does
    not read: a mapping that leaves one out trains without it, which must not happen silently."""
    used = columns.used(fmt, row)
    return sorted(k for k, v in row.items() if k not in used and isinstance(v, str) and " " in v.strip())


def _string(row: dict, col: str, allow_empty: bool = False):
    """(value, None) or (None, problem) for a column that must hold a non-blank string."""
    if col not in row:
        return None, ("malformed", f"missing column `{col}`{did_you_mean(col, row)}")
    value = row[col]
    if not isinstance(value, str):
        return None, ("malformed", f"`{col}` must be a string, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        return None, ("empty", f"`{col}` is empty or whitespace only")
    return value, None


def _messages(row: dict, columns: Columns):
    name = columns.messages_column(row)
    if name not in row:
        return None, ("malformed", f"missing column `{name}`")
    turns = row[name]
    if not isinstance(turns, list) or not turns:
        return None, ("malformed" if not isinstance(turns, list) else "empty", f"`{name}` must be a non-empty list")
    chat = []
    for i, turn in enumerate(turns):
        role, content = (columns.role_of(turn), columns.content_of(turn)) if isinstance(turn, dict) else (0, 0)
        if isinstance(content, list):
            content, problem = _parts_text(content, f"{name}[{i}]")
            if problem:
                return None, problem
        if not isinstance(role, str) or not isinstance(content, str):
            return None, ("malformed", f"`{name}[{i}]` must be an object with {columns.turn_fields()}")
        chat.append({"role": role, "content": content})
    if not any(m["role"] == "assistant" and m["content"].strip() for m in chat):
        roles = sorted({m["role"] for m in chat})
        detail = f"no assistant turn with content (roles {roles}; map yours with `role_map`): nothing to train on"
        return None, ("no_trainable_tokens", detail)
    return chat, None


def _parts_text(parts: list, where: str):
    """(text, None) for OpenAI content parts that are all text, else (None, problem) naming the first other part."""
    texts = []
    for j, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, dict) else type(part).__name__
        if kind != "text" or not isinstance(part.get("text"), str):
            detail = f"`{where}.content[{j}]` is a `{kind}` part: only text parts (`type: text`) can be trained"
            return None, ("malformed", detail)
        texts.append(part["text"])
    return "".join(texts), None


def extract(row: dict, fmt: str, columns: Columns | None = None):
    """(payload, None) for a usable row, or (None, (reason, detail))."""
    columns = columns or Columns()
    if fmt == "text":
        return _string(row, columns.text)
    if fmt == "messages":
        return _messages(row, columns)
    prompt_col, completion_col = columns.prompt_columns(row)
    prompt, problem = _string(row, prompt_col, allow_empty=True)
    if problem:
        return None, problem
    prompt, problem = _with_input(prompt, row, columns.input_column(row))
    if problem:
        return None, problem
    completion, problem = _string(row, completion_col)
    if problem:
        return None, ("no_trainable_tokens", problem[1]) if problem[0] == "empty" else problem
    return (prompt, completion), None


def _with_input(prompt: str, row: dict, col: str | None):
    """The prompt with the input column joined after it (INPUT_JOIN) when that column holds text."""
    if col is None:
        return prompt, None
    value = row.get(col)
    if value is None or value == "":
        return prompt, None
    if not isinstance(value, str):
        return None, ("malformed", f"`{col}` must be a string, got {type(value).__name__}")
    return (f"{prompt}{INPUT_JOIN}{value}" if prompt else value), None


def has_columns(row: dict, fmt: str, columns: Columns | None = None) -> bool:
    return all(c in row for c in (columns or Columns()).needs(fmt, row))
