"""Rule: every TRL data key a recipe sets is honoured or refused by name, never silently ignored.

With `prepare_data` on, data_prep builds the rows and TRL's own dataset preparation is skipped, so a TRL data
key works only where data_prep reads it. Honoured: `dataset_name`, `dataset_config`, `dataset_train_split`,
`dataset_text_field` (the text column), `dataset_num_proc` (tokenizer threads), `max_length`, `pad_to_multiple_of`,
`chat_template_path`, `assistant_only_loss: true` and `completion_only_loss: true` (what data_prep always does).
Refused when set: the keys below, each with what does the job instead (`packing`, `padding_free` and
`dataset_streaming` are refused by longctx/config/rules/data/prepared_data.py). With `prepare_data: off` TRL reads the
dataset itself, so the mapping keys of longctx/config/data_keys.py, which only data_prep reads, are refused.
"""

from longctx.config.data_keys import role_map_of
from longctx.config.problems import Problem, error

# TRL key -> what data_prep does instead (the fix names it)
REFUSED_WITH_PREPARED_DATA = {
    "dataset_test_split": "the eval rows are documents held out of the training data: set `eval_holdout`",
    "dataset_kwargs": "data_prep prepares the rows; drop it",
    "eos_token": "data_prep ends documents with the tokenizer's own EOS; set it in the tokenizer's files",
    "pad_token": "data_prep pads with the tokenizer's own pad token (EOS without one); set it in the tokenizer",
    "truncation_mode": "documents over max_length follow `long_document_policy` (split, truncate or drop)",
    "shuffle_dataset": "data_prep orders the rows by a seeded shuffle (`seed`); the sampler shuffles each epoch",
    "packing_strategy": "`prepare_data: packed` packs by best-fit decreasing over the whole corpus",
    "eval_packing": "eval rows are prepared like the training rows (`prepare_data`)",
}
# TRL's loss switches: data_prep always trains assistant turns of chats and completions of prompt/completion rows
ALWAYS_ON = {
    "assistant_only_loss": "chats train on the assistant's turns only (the template's generation markers)",
    "completion_only_loss": "prompt/completion rows train on the completion only",
}
DATA_PREP_KEYS = (
    "data_files",
    "messages_field",
    "role_field",
    "content_field",
    "role_map",
    "prompt_field",
    "completion_field",
    "input_field",
    "max_dropped_fraction",
)


# mapping keys a preference (`trainer: dpo`) recipe's data_prep never reads: a pair is `prompt` (named by
# `prompt_field`), `chosen` and `rejected` (data_prep/trainers/preference.py)
NOT_READ_FOR_PAIRS = ("messages_field", "role_field", "content_field", "role_map", "completion_field", "input_field")


def data_key_problems(recipe, args, model, topo, source: str) -> list[Problem]:
    """One error per data key the recipe sets that nothing would read."""
    explicit = getattr(recipe, "explicit_keys", frozenset())
    if getattr(recipe, "trainer", "sft") == "dpo" and recipe.prepare_data != "off":
        msg = "is not read for preference pairs: a pair is `prompt` (named by `prompt_field`), `chosen`, `rejected`"
        fix = "drop it; rename your answer columns to `chosen` and `rejected` (TRL's preference format)"
        unread = [error(source, key, msg, fix) for key in NOT_READ_FOR_PAIRS if key in explicit]
        return unread + _prepared_key_problems(recipe, args, explicit, source)
    if recipe.prepare_data == "off":
        fix = "set `prepare_data: packed` (or `unpacked`) so data_prep maps the columns, or drop it"
        msg = "is read by data_prep only, and `prepare_data` is off (TRL reads the dataset itself)"
        return [error(source, key, msg, fix) for key in DATA_PREP_KEYS if key in explicit]
    return _prepared_key_problems(recipe, args, explicit, source)


def _prepared_key_problems(recipe, args, explicit, source: str) -> list[Problem]:
    problems = []
    unread = "has no effect with `prepare_data` (data_prep builds the rows)"
    problems += [
        error(source, k, unread, instead) for k, instead in REFUSED_WITH_PREPARED_DATA.items() if k in explicit
    ]
    for key, what in ALWAYS_ON.items():
        if key in explicit and getattr(args, key) is False:
            msg = f"is false, but with `prepare_data` {what}"
            problems.append(error(source, key, msg, f"drop `{key}: false`, or set `prepare_data: off`"))
    try:
        role_map_of(recipe.role_map)
    except (ValueError, TypeError) as exc:
        problems.append(error(source, "role_map", str(exc).removeprefix("`role_map` "), "e.g. {human: user}"))
    if not 0 <= recipe.max_dropped_fraction <= 1:
        msg = f"{recipe.max_dropped_fraction} is not a fraction in [0, 1]"
        problems.append(error(source, "max_dropped_fraction", msg, "use e.g. 0.05 (1 accepts any number of bad rows)"))
    return problems
