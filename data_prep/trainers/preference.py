"""Preference pairs (TRL's formats) tokenized as TRL 1.16's DPOTrainer does, then laid out as documents of one row.

Formats: the columns `chosen` and `rejected`, with an explicit `prompt` (the column `prompt_field` names) or an
implicit one (the common start of both, `trl.extract_prompt`), each either text or conversational (lists of
`role`/`content` messages, rendered with the recipe's chat template). A prompt of the other kind than the answers is
read as TRL's `maybe_extract_prompt` reads it: the answers carry the prompt, so it is extracted from them and the
column is left out. That is the UltraFeedback-binarized shape (`prompt` a string, `chosen`/`rejected` message lists
that repeat the user turn); Anthropic HH's (`chosen`/`rejected` strings holding the whole dialogue) is the implicit
one. Tokenization is TRL's `DPOTrainer._prepare_dataset`: text answers get EOS appended, the prompt and prompt +
answer are tokenized whole, and the answer starts where the two token lists diverge
(`common_prefix_length`), so only answer tokens are trained (tests/preference/test_preference_data.py compares
with TRL).

A pair becomes documents of one row, which the trainer's per-sequence log-probs need together:
- unshared: `prompt + chosen` and `prompt + rejected`, each a document (position_ids restart at 0);
- prefix sharing: the prompt once, then two branches that both start at the prompt's last token:
  `prompt[:-1] | prompt[-1] + chosen | prompt[-1] + rejected`, position_ids `0..P-2 | P-1.. | P-1..`. A segment
  whose position_ids restart at p > 0 is a branch: it attends to the first p tokens of its document and to itself,
  never to the other branch (longctx/training/attention/shared_prefix.py). Each answer token then sees exactly the
  context it sees unshared, so the log-probs are the same, and the prompt is computed once instead of twice.

`sequence_ids` number the row's sequences: 2k for the chosen answer of the row's k-th pair, 2k + 1 for its rejected
one (the shared prefix counts as the chosen branch's), -1 for padding. Labels are the answer tokens only; a
document's first token never has one (nothing in its document predicts it).
"""

from dataclasses import dataclass

import numpy as np

IGNORE = -100
PREFERENCE_COLUMNS = ("chosen", "rejected")


@dataclass
class Pair:
    """One pair's token ids (TRL's `prompt_ids`, `chosen_ids`, `rejected_ids`)."""

    prompt: list[int]
    chosen: list[int]
    rejected: list[int]

    def length(self, shared: bool) -> int:
        """Tokens the pair takes in a row: 2P + C + R unshared, P + 1 + C + R shared (P >= 1)."""
        p, answers = len(self.prompt), len(self.chosen) + len(self.rejected)
        return p + 1 + answers if shared and p else 2 * p + answers

    def fitted(self, capacity: int, shared: bool) -> "Pair | None":
        """The pair with its prompt cut from the left so it fits `capacity`, or None when even one prompt token
        does not fit (the first answer token needs a token before it)."""
        answers = len(self.chosen) + len(self.rejected)
        keep = capacity - 1 - answers if shared else (capacity - answers) // 2
        if keep < 1:
            return None
        return Pair(self.prompt[len(self.prompt) - keep :], self.chosen, self.rejected)


def _is_chat(value) -> bool:
    return isinstance(value, list) and all(isinstance(m, dict) for m in value)


def check_row(row: dict, prompt_column: str = "prompt"):
    """(row, None) for a usable preference row, or (None, (reason, detail)); implicit prompts are extracted as
    TRL's `maybe_extract_prompt` does (module docstring). `prompt_column`: the recipe's `prompt_field`."""
    from trl.data_utils import extract_prompt

    missing = [c for c in PREFERENCE_COLUMNS if c not in row]
    if missing:
        return None, ("malformed", f"missing column(s) {missing}: a preference row needs `chosen` and `rejected`")
    row = _named_prompt(row, prompt_column)
    values = [row.get("prompt", ""), row["chosen"], row["rejected"]]
    chat = [_is_chat(v) for v in values[1:]]
    if not (all(isinstance(v, str) for v in values[1:]) or all(chat)):
        return None, ("malformed", "`chosen` and `rejected` must both be strings or both be lists of messages")
    for name in PREFERENCE_COLUMNS:
        value = row[name]
        if (isinstance(value, str) and not value.strip()) or (isinstance(value, list) and not value):
            return None, ("no_trainable_tokens", f"`{name}` is empty")
        if chat[0] and not all(isinstance(m.get("content"), str) and m.get("role") for m in value):
            return None, ("malformed", f"`{name}` messages need string `role` and `content`")
    if "prompt" not in row or (chat[0] != _is_chat(row["prompt"]) and row["prompt"] != ""):
        extra = {k: row[k] for k in ("tools",) if k in row}
        row = {**extract_prompt({"chosen": row["chosen"], "rejected": row["rejected"]}), **extra}
    return row, None


def _named_prompt(row: dict, column: str) -> dict:
    """The row with its prompt under `prompt`, read from the recipe's `prompt_field` column."""
    if column == "prompt" or column not in row:
        return row
    return {**{k: v for k, v in row.items() if k not in ("prompt", column)}, "prompt": row[column]}


class PairTokenizer:
    """TRL 1.16's preference tokenization (DPOTrainer._prepare_dataset's `add_eos` and `tokenize_fn`)."""

    def __init__(self, tok):
        self.tok = tok

    def _ids(self, value, **kwargs) -> list[int]:
        if isinstance(value, list):
            out = self.tok.apply_chat_template(value, tokenize=True, return_dict=True, **kwargs)
            return list(out["input_ids"])
        return list(self.tok(text=value)["input_ids"])

    def __call__(self, row: dict) -> Pair:
        from trl.data_utils import common_prefix_length

        prompt, chosen, rejected = row["prompt"], row["chosen"], row["rejected"]
        kwargs = {"tools": row["tools"]} if row.get("tools") else {}
        if isinstance(chosen, str):
            eos = self.tok.eos_token or ""
            chosen = chosen if chosen.endswith(eos) else chosen + eos
            rejected = rejected if rejected.endswith(eos) else rejected + eos
            prompt_ids = self._ids(prompt)
        else:
            prompt_ids = self._ids(prompt, add_generation_prompt=True, **kwargs)
        prompt_chosen = self._ids(prompt + chosen, **kwargs)
        prompt_rejected = self._ids(prompt + rejected, **kwargs)
        cut = min(common_prefix_length(prompt_ids, prompt_chosen), common_prefix_length(prompt_ids, prompt_rejected))
        return Pair(prompt_ids[:cut], prompt_chosen[cut:], prompt_rejected[cut:])


@dataclass
class PairTokens:
    """One pair laid out as row segments (module docstring), every array the same length."""

    ids: np.ndarray
    labels: np.ndarray
    positions: np.ndarray
    sequences: np.ndarray  # 0: the chosen sequence, 1: the rejected one


def _document(prompt: list[int], answer: list[int], first_position: int = 0):
    ids = np.asarray(prompt + answer, np.int32)
    labels = np.concatenate([np.full(len(prompt), IGNORE, np.int32), np.asarray(answer, np.int32)])
    if first_position == 0 and len(ids):
        labels[0] = IGNORE  # a document's first token: nothing in its document predicts it
    return ids, labels, np.arange(first_position, first_position + len(ids), dtype=np.int32)


def lay_out(pair: Pair, shared: bool) -> PairTokens:
    """The pair's tokens in a row: two documents, or with `shared` (and a prompt) prefix + two branches."""
    if shared and pair.prompt:
        p = len(pair.prompt)
        prefix = _document(pair.prompt[:-1], [])
        chosen = _document(pair.prompt[-1:], pair.chosen, p - 1)
        rejected = _document(pair.prompt[-1:], pair.rejected, p - 1)
        parts = [prefix, chosen, rejected]
        owner = [0, 0, 1]
    else:
        parts = [_document(pair.prompt, pair.chosen), _document(pair.prompt, pair.rejected)]
        owner = [0, 1]
    ids, labels, positions = (np.concatenate([part[i] for part in parts]) for i in range(3))
    sequences = np.concatenate([np.full(len(part[0]), k, np.int32) for part, k in zip(parts, owner, strict=True)])
    return PairTokens(ids, labels, positions, sequences)
