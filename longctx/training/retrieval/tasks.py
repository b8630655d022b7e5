"""Synthetic long-context retrieval examples, built token by token with the model's own tokenizer.

Each example is exactly `length` tokens: filler sentences (the grammar of retrieval/haystack.py), one or
more needles inserted at a sentence boundary near `depth` (0.0: the start of the filler, 1.0: its end),
then a question and the answer. Only the answer tokens carry labels, so the score is about retrieving the
needle, not about modelling the filler. Tasks, in the spirit of RULER:

- `passkey`: one needle, "The pass key is K." (the phrasing the tiny recipe's corpus trains on);
- `multikey`: several "special magic number for WORD" needles, one WORD asked (the others sit at random depths);
- `multivalue`: four numbers for one WORD at and after `depth`, all four asked, in order;
- `distractor`: the passkey among many look-alike "old pass key was" needles with other numbers.
"""

import random
from dataclasses import dataclass

from longctx.training.retrieval.haystack import filler_sentence

TASKS = ("passkey", "multikey", "multivalue", "distractor")
WORDS = ("apple", "river", "lantern", "meadow", "copper", "violet", "harbor", "falcon", "pepper", "marble")
N_KEYS, N_VALUES, N_DISTRACTORS = 4, 4, 8


@dataclass(frozen=True)
class Example:
    task: str
    length: int
    depth: float
    sample: int
    input_ids: list[int]
    answer_start: int  # index of the first answer token in input_ids
    answer_len: int

    def labels(self) -> list[int]:
        """-100 everywhere but the answer tokens (which the position before each one must predict)."""
        end = self.answer_start + self.answer_len
        return [t if self.answer_start <= i < end else -100 for i, t in enumerate(self.input_ids)]


def _number(rng: random.Random) -> str:
    return str(rng.randrange(10_000, 100_000))


def _needles(task: str, rng: random.Random) -> tuple[list[str], list[str], str, str]:
    """(needle asked, other needles, question + answer cue, answer text) for one example."""
    if task == "passkey":
        key = _number(rng)
        return [f"The pass key is {key}. Remember it. {key} is the pass key."], [], _PASSKEY_Q, f" {key}"
    if task == "distractor":
        key = _number(rng)
        others = [f"The old pass key was {_number(rng)}." for _ in range(N_DISTRACTORS)]
        return [f"The pass key is {key}. Remember it. {key} is the pass key."], others, _PASSKEY_Q, f" {key}"
    words = rng.sample(WORDS, N_KEYS)
    if task == "multikey":
        values = [_number(rng) for _ in words]
        needles = [f"The special magic number for {w} is {v}." for w, v in zip(words, values, strict=True)]
        cue = f" What is the special magic number for {words[0]}? The special magic number for {words[0]} is"
        return needles[:1], needles[1:], cue, f" {values[0]}"
    if task == "multivalue":
        values = [_number(rng) for _ in range(N_VALUES)]
        needles = [f"One of the special magic numbers for {words[0]} is {v}." for v in values]
        cue = f" What are all the special magic numbers for {words[0]}? They are"
        return needles, [], cue, " " + ", ".join(values)
    raise ValueError(f"unknown task {task!r}; choose from {', '.join(TASKS)}")


_PASSKEY_Q = " What is the pass key? The pass key is"


def _encode(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False).input_ids


def build_example(tok, task: str, length: int, depth: float, sample: int, seed: int = 0) -> Example:
    """One example of exactly `length` tokens (ValueError when needles and question alone do not fit)."""
    rng = random.Random(f"{seed}:{task}:{length}:{depth}:{sample}")
    asked, others, cue, answer = _needles(task, rng)
    prefix = [tok.bos_token_id] if tok.bos_token_id is not None else []
    asked_ids = [_encode(tok, " " + n) for n in asked]
    other_ids = [_encode(tok, " " + n) for n in others]
    cue_ids, answer_ids = _encode(tok, cue), _encode(tok, answer)
    fixed = len(prefix) + sum(map(len, asked_ids + other_ids)) + len(cue_ids) + len(answer_ids)
    budget = length - fixed
    if budget < 1:
        raise ValueError(f"{task} needs more than {fixed} tokens; {length} is too short")
    sentences = _filler(tok, rng, budget)
    # sentence boundaries within the filler: the asked needle goes to the one nearest depth x filler tokens
    bounds = [0]
    for s in sentences:
        bounds.append(bounds[-1] + len(s))
    at = min(range(len(bounds)), key=lambda i: abs(bounds[i] - depth * budget))
    slots = {at: list(asked_ids)}
    for ids in other_ids:  # the other needles at random boundaries
        slots.setdefault(rng.randrange(len(bounds)), []).append(ids)
    body = []
    for i, s in enumerate([*sentences, []]):
        for ids in slots.get(i, []):
            body += ids
        body += s
    input_ids = prefix + body + cue_ids + answer_ids
    assert len(input_ids) == length, (len(input_ids), length)
    return Example(task, length, depth, sample, input_ids, length - len(answer_ids), len(answer_ids))


def _filler(tok, rng: random.Random, budget: int) -> list[list[int]]:
    """Filler sentences of exactly `budget` tokens in total: the first one loses its head, so the text before
    the question ends on a whole sentence, as in the training corpus."""
    out, n = [], 0
    while n < budget:
        ids = _encode(tok, " " + filler_sentence(rng))
        out.append(ids)
        n += len(ids)
    excess = n - budget
    while excess >= len(out[0]):
        excess -= len(out.pop(0))
    out[0] = out[0][excess:]
    return out


def grid(tok, tasks, lengths, depths, samples: int, seed: int = 0) -> list[Example]:
    """Every (task, length, depth, sample) example of a grid, in a fixed order every rank reproduces."""
    return [
        build_example(tok, task, length, depth, s, seed)
        for task in tasks
        for length in lengths
        for depth in depths
        for s in range(samples)
    ]
