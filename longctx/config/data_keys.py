"""Recipe keys for a user's own data: where it is, which columns hold what, and how many bad rows are acceptable.

Why these exist: data arrives as it was collected, not as TRL names it. A ShareGPT dump has `conversations` of
`{"from": "human", "value": ...}`; a parquet export has `question`/`answer`; a text corpus has `body`. Renaming
columns in a script is the step every user repeats, so the recipe says it once, like axolotl's `field_messages`
and `message_property_mappings`, and data_prep reads the rows through it (data_prep/reading/formats.py). TRL's own
`dataset_text_field` names the text column; every other TRL data key is honoured or refused by name
(longctx/config/rules/data/data_keys.py).

`column_mapping` is the one reading of these keys: data_prep builds its config from it and training ranks find
the prepared data's manifest by it, so the two never disagree.
"""

from dataclasses import dataclass, field

# ShareGPT: recognised without any key when a row has a `conversations` column of `from`/`value` turns
SHAREGPT_MESSAGES, SHAREGPT_ROLE, SHAREGPT_CONTENT = "conversations", "from", "value"
# role values as ShareGPT (and many chat dumps) spell them -> the chat roles every chat template knows
DEFAULT_ROLE_MAP = {"human": "user", "gpt": "assistant", "bot": "assistant", "model": "assistant"}
DEFAULT_FIELDS = {"text": "text", "prompt": "prompt", "completion": "completion"}
# Alpaca: recognised without any key when a row has `instruction` and `output` (the prompt is `instruction`, a
# newline and `input`: data_prep/reading/formats.py), as axolotl's `alpaca` type and LLaMA-Factory's default columns
ALPACA_PROMPT, ALPACA_INPUT, ALPACA_COMPLETION = "instruction", "input", "output"


@dataclass
class DataSourceArguments:
    """The keys above, as fields of the recipe's `RecipeArguments` (longctx/config/recipe.py)."""

    data_files: list[str] | None = field(
        default=None,
        metadata={
            "help": "Local files, folders or globs (.jsonl, .json, .parquet, .arrow; folders of .txt/.md) to "
            "prepare instead of `dataset_name`: one string or a list, in the YAML and on the command line; "
            "`longctx data RECIPE --input FILE...` sets it."
        },
    )
    messages_field: str | None = field(
        default=None,
        metadata={"help": "The column holding each chat; default `messages`, or ShareGPT's `conversations`."},
    )
    role_field: str | None = field(
        default=None, metadata={"help": "The role's name inside a chat turn; default `role` (ShareGPT: `from`)."}
    )
    content_field: str | None = field(
        default=None, metadata={"help": "The text's name inside a chat turn; default `content` (ShareGPT: `value`)."}
    )
    role_map: dict | str | None = field(
        default=None,
        metadata={
            "help": "Role values of the data -> chat roles, e.g. {question: user, answer: assistant}. Turns whose "
            "role is not in a `role` field (ShareGPT's `from`) also map human to user and gpt, bot, model to "
            "assistant. A JSON string on the command line."
        },
    )
    prompt_field: str = field(default="prompt", metadata={"help": "The prompt column of prompt/completion rows."})
    completion_field: str = field(
        default="completion", metadata={"help": "The completion column of prompt/completion rows."}
    )
    input_field: str | None = field(
        default=None,
        metadata={
            "help": "A column joined after the prompt with a newline (LLaMA-Factory's `query`, axolotl's "
            "`field_input`); default: Alpaca's `input` when the prompt is `instruction`."
        },
    )
    max_dropped_fraction: float = field(
        default=0.05,
        metadata={
            "help": "Data preparation fails when more than this fraction of the rows would not train: unusable "
            "(malformed, empty, nothing to train on) or dropped by `long_document_policy: drop` (over max_length), "
            "naming report.json, the top reasons and their fixes. It also fails when `eval_holdout` holds out more "
            "rows than it leaves to train."
        },
    )

    def __post_init__(self):
        """A file key written as one string (`data_files: mydata/chats.jsonl`) is a list of one file, as TRL's
        `reward_funcs` and `datasets.load_dataset(data_files=...)` read it, never a string read letter by letter."""
        if isinstance(self.data_files, str):
            self.data_files = [self.data_files]
        parent = getattr(super(), "__post_init__", None)
        if parent is not None:
            parent()


def role_map_of(value) -> dict[str, str]:
    """The recipe's `role_map` as a dict (the command line gives a JSON string); ValueError says why not."""
    from longctx.config.keys import mapping_value

    roles = mapping_value(value, "role_map", '\'{"human": "user"}\'')
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in roles.items()):
        raise TypeError(f"`role_map` must map role names to role names, got {roles!r}")
    return roles


def column_mapping(recipe, args) -> dict:
    """Only what differs from the defaults (so a recipe without mapping keys keeps its prepared data's key):
    text, messages, role, content, roles, prompt, completion."""
    fields = {
        "text": getattr(args, "dataset_text_field", None) or "text",
        "messages": getattr(recipe, "messages_field", None),
        "role": getattr(recipe, "role_field", None),
        "content": getattr(recipe, "content_field", None),
        "prompt": getattr(recipe, "prompt_field", "prompt"),
        "completion": getattr(recipe, "completion_field", "completion"),
        "input": getattr(recipe, "input_field", None),
    }
    mapping = {k: v for k, v in fields.items() if v is not None and v != DEFAULT_FIELDS.get(k)}
    roles = role_map_of(getattr(recipe, "role_map", None))
    return {**mapping, "roles": roles} if roles else mapping
