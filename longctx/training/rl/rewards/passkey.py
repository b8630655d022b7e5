"""Verifiable rewards for needle-in-a-haystack tasks (passkey retrieval, RULER's needles).

`passkey_exact_match`: 1.0 when the completion's answer is exactly the passkey, else 0.0. The answer is the
completion with surrounding whitespace and closing punctuation removed, so "48213", " 48213." and "48213\n" score,
and "The pass key is 48213." or "48213 48213" do not: the reward asks for the key and nothing else, as a grader
would that parses the answer field. It also keeps a number that merely appears in the text from scoring (a
model that repeats the haystack would otherwise be rewarded).

`needle_recall`: the fraction of a row's needles that appear anywhere in the completion, case-insensitively
(RULER's `string_match_all`, arXiv 2404.06654); for one needle, 1.0 or 0.0. Lenient where exact match is strict.

The gold comes from the row's `answer` column: a string, or for several needles a list of strings.
"""

from longctx.training.rl.rewards.text import answers_of, completion_text

CLOSING = " \t\r\n.。!?\"'`"


def stripped_answer(text: str) -> str:
    """The completion's answer: surrounding whitespace, trailing sentence punctuation and quotes removed."""
    return text.strip().strip(CLOSING).strip()


def passkey_exact_match(completions, answer, **kwargs) -> list[float]:
    """1.0 where the completion is exactly the row's passkey (see the module docstring), else 0.0."""
    out = []
    for completion, gold in zip(completions, answer, strict=True):
        golds = {g.strip() for g in answers_of(gold)}
        out.append(1.0 if stripped_answer(completion_text(completion)) in golds else 0.0)
    return out


def needle_recall(completions, answer, **kwargs) -> list[float]:
    """The fraction of the row's needles found in the completion (RULER's string_match_all)."""
    out = []
    for completion, gold in zip(completions, answer, strict=True):
        text, needles = completion_text(completion).lower(), answers_of(gold)
        out.append(sum(n.lower() in text for n in needles) / len(needles) if needles else 0.0)
    return out
