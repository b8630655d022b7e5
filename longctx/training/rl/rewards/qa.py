"""Verifiable rewards for (multi-document) question answering, scored as the QA literature scores answers.

Normalisation is SQuAD's official `normalize_answer` (Rajpurkar et al. 2016; the same function LongBench's
`qa_f1_score` and HotpotQA's evaluation use): lower case, punctuation removed, the articles a/an/the removed,
whitespace collapsed. Against a row's gold answers (`answer`: a string or a list of acceptable strings) a completion
scores the best over the golds:

- `qa_exact_match`: 1.0 when the normalised completion equals a normalised gold (SQuAD EM);
- `qa_f1`: token-level F1 between the two bags of normalised tokens (SQuAD F1, LongBench's metric for HotpotQA,
  2WikiMultihopQA and MuSiQue).

Long answers earn nothing extra: F1's precision falls with every token beyond the gold's.
"""

import re
import string
from collections import Counter

from longctx.training.rl.rewards.text import answers_of, completion_text

ARTICLES = re.compile(r"\b(a|an|the)\b")
PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in PUNCTUATION)
    return " ".join(ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD's F1 over normalised tokens (0.0 when either side has none)."""
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = sum((Counter(pred) & Counter(ref)).values())
    if not pred or not ref or common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def _best(metric, completions, answer) -> list[float]:
    out = []
    for completion, gold in zip(completions, answer, strict=True):
        text = completion_text(completion)
        out.append(max((metric(text, g) for g in answers_of(gold)), default=0.0))
    return out


def qa_exact_match(completions, answer, **kwargs) -> list[float]:
    """SQuAD exact match of each completion against its row's gold answers (best over the golds)."""
    return _best(exact_match, completions, answer)


def qa_f1(completions, answer, **kwargs) -> list[float]:
    """SQuAD token F1 of each completion against its row's gold answers (best over the golds)."""
    return _best(token_f1, completions, answer)
