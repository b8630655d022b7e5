"""Preference data prep: TRL's tokenization, the row layout, the over-length policy and the report.

TRL 1.16's own `DPOTrainer._prepare_dataset` (run on a stand-in for the trainer) is the reference for tokenization
in every format TRL reads: explicit and implicit prompts, text and conversational. The rows must hold each pair's
answers as the only labels, documents restarting their positions, and with prefix sharing the same tokens seen in
the same positions; what does not fit a row is dropped or has its prompt cut, and the report says so.
"""

import json
from types import SimpleNamespace

import numpy as np
import pytest
from transformers import AutoTokenizer

from data_prep.config import PrepConfig
from data_prep.pipeline import prepare_dataset
from data_prep.trainers.preference import IGNORE, Pair, PairTokenizer, check_row, lay_out

TOKENIZER = "recipes/assets/tiny-llama"
TEXT = {"prompt": "The pass key is 31415. What is the pass key?", "chosen": " 31415.", "rejected": " 27182."}
CHAT = {
    "prompt": [{"role": "user", "content": "The pass key is 31415. What is it?"}],
    "chosen": [{"role": "assistant", "content": "It is 31415."}],
    "rejected": [{"role": "assistant", "content": "It is 27182, I believe."}],
}
IMPLICIT_CHAT = {k: CHAT["prompt"] + CHAT[k] for k in ("chosen", "rejected")}
IMPLICIT_TEXT = {k: TEXT["prompt"] + TEXT[k] for k in ("chosen", "rejected")}


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(TOKENIZER)


def trl_tokenized(tok, row: dict) -> dict:
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    config = DPOConfig(output_dir="unused", use_cpu=True, report_to="none")
    dataset = Dataset.from_list([row])
    return DPOTrainer._prepare_dataset(SimpleNamespace(_tokenizer=tok), dataset, tok, config, "train")[0]


@pytest.mark.parametrize(
    "row", [TEXT, CHAT, IMPLICIT_CHAT, IMPLICIT_TEXT], ids=["text", "chat", "implicit-chat", "implicit-text"]
)
def test_tokenization_equals_trl(tok, row):
    checked, problem = check_row(dict(row))
    assert problem is None
    pair = PairTokenizer(tok)(checked)
    theirs = trl_tokenized(tok, row)
    assert (pair.prompt, pair.chosen, pair.rejected) == (
        theirs["prompt_ids"],
        theirs["chosen_ids"],
        theirs["rejected_ids"],
    )


@pytest.mark.parametrize(
    "row, reason",
    [({"chosen": "a"}, "malformed"), ({"prompt": "p", "chosen": " ", "rejected": "b"}, "no_trainable_tokens"),
     ({"prompt": "p", "chosen": "a", "rejected": [{"role": "assistant", "content": "b"}]}, "malformed")],
)  # fmt: skip
def test_bad_rows_are_named(row, reason):
    assert check_row(row)[1][0] == reason


def sequences(tokens) -> dict[int, list[tuple[int, int]]]:
    """Each sequence's trained (label, position) pairs, from a laid-out pair."""
    out = {}
    for label, pos, seq in zip(
        tokens.labels.tolist(), tokens.positions.tolist(), tokens.sequences.tolist(), strict=True
    ):
        if label != IGNORE:
            out.setdefault(seq, []).append((label, pos))
    return out


def test_layouts_train_the_same_answers_at_the_same_positions():
    pair = Pair(prompt=[5, 6, 7, 8], chosen=[9, 10], rejected=[11, 12, 13])
    unshared, shared = lay_out(pair, shared=False), lay_out(pair, shared=True)
    assert sequences(unshared) == sequences(shared) == {0: [(9, 4), (10, 5)], 1: [(11, 4), (12, 5), (13, 6)]}
    assert len(unshared.ids) == pair.length(False) == 13 and len(shared.ids) == pair.length(True) == 10
    assert shared.ids.tolist() == [5, 6, 7, 8, 9, 10, 8, 11, 12, 13]
    assert shared.positions.tolist() == [0, 1, 2, 3, 4, 5, 3, 4, 5, 6]  # the second branch restarts at P - 1
    assert unshared.positions.tolist() == [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5, 6]


def test_an_empty_prompt_trains_no_first_answer_token():
    tokens = lay_out(Pair(prompt=[], chosen=[9, 10], rejected=[11]), shared=True)
    assert tokens.labels.tolist() == [IGNORE, 10, IGNORE]  # as TRL: nothing predicts a sequence's first token


def test_fitting_cuts_the_prompt_from_the_left():
    pair = Pair(prompt=list(range(100)), chosen=[1, 2], rejected=[3])
    assert pair.fitted(50, shared=False).prompt == list(range(77, 100))  # 2 x 23 + 3 = 49
    assert pair.fitted(50, shared=True).prompt == list(range(54, 100))  # 46 + 1 + 3 = 50
    assert pair.fitted(4, shared=False) is None


def write(tmp_path, rows) -> str:
    folder = tmp_path / "pairs"
    folder.mkdir()
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(folder)


def config(tmp_path, source, **kw) -> PrepConfig:
    defaults = {"tokenizer": TOKENIZER, "max_length": 64, "sp_size": 2, "objective": "dpo", "num_proc": 1}
    return PrepConfig(inputs=(source,), output_dir=str(tmp_path / "out"), **{**defaults, **kw})


def report(folder) -> dict:
    return json.loads((folder / "report.json").read_text())


@pytest.mark.parametrize("policy, kept, truncated", [("drop", 1, 0), ("truncate", 2, 1)])
def test_over_length_pairs_are_counted_never_silent(tmp_path, policy, kept, truncated):
    long = {**TEXT, "prompt": " ".join(["filler words here"] * 30) + TEXT["prompt"]}
    # max_dropped_fraction 1: the counts are the subject here; the threshold's refusal is
    # tests/user/test_user_data.py's
    cfg = config(tmp_path, write(tmp_path, [TEXT, long]), policy=policy, max_dropped_fraction=1.0)
    folder, _ = prepare_dataset(cfg, log=lambda _: None)
    rep = report(folder)
    assert rep["preference"]["pairs_out"] == kept and rep["preference"]["prompts_truncated"] == truncated
    assert rep["documents_dropped_by_reason"]["too_long"] == 1 - truncated
    assert rep["tokens_in"] == rep["tokens_out"] + rep["tokens_dropped"] + rep["tokens_truncated"]


def test_rows_hold_whole_pairs_padded_to_sp(tmp_path):
    from datasets import load_from_disk

    rows = [TEXT, IMPLICIT_TEXT, {**TEXT, "chosen": " 31415, the key."}]
    folder, _ = prepare_dataset(config(tmp_path, write(tmp_path, rows), max_length=128, sp_size=4), log=lambda _: None)
    data = load_from_disk(str(folder / "dataset"))
    total = 0
    for row in data:
        assert len(row["input_ids"]) % 4 == 0
        seq = np.array(row["sequence_ids"])
        n = seq.max() + 1
        assert n % 2 == 0 and set(seq[seq >= 0]) == set(range(n)), "pairs whole: chosen 2k and rejected 2k + 1"
        total += n // 2
    assert total == 3 and report(folder)["preference"]["pairs_out"] == 3


def test_report_shows_prefix_sharing_saving_on_the_tiny_pairs(tmp_path):
    """The tiny recipe's pairs (prompts of 90-270 tokens, answers of ~10): sharing the prompt saves almost half."""
    cfg = config(tmp_path, "recipes/assets/tiny-preference", max_length=2048, prefix_sharing=True)
    folder, _ = prepare_dataset(cfg, log=lambda _: None)
    pref = report(folder)["preference"]
    assert pref["prefix_sharing"] and pref["pairs_out"] == 96
    assert 0.45 < pref["prefix_sharing_token_saving"] < 0.5
    assert pref["rows_shared"] < pref["rows_unshared"] and pref["rows"] == pref["rows_shared"]


def test_longreward_pairs_stage_to_trl_format_and_report_their_saving(tmp_path):
    """LongReward-10k's pair format (data_prep/assets/longreward.py) staged to TRL's conversational format, then
    prepared
    with prefix sharing: long documents and short answers, so sharing the prompt saves about half the tokens."""
    from data_prep.assets.longreward import stage, to_trl, write_sample

    write_sample(tmp_path / "pairs.jsonl", n_pairs=3, sentences=(60, 120))
    assert stage(tmp_path / "pairs.jsonl", tmp_path / "staged") == 3
    row = json.loads((tmp_path / "staged" / "train.jsonl").read_text().splitlines()[0])
    assert [m["role"] for m in row["prompt"] + row["chosen"] + row["rejected"]] == ["user", "assistant", "assistant"]
    with pytest.raises(ValueError, match="neither a LongReward pair"):
        to_trl({"question": "?"}, "pairs.jsonl:1")
    cfg = config(tmp_path, str(tmp_path / "staged"), max_length=8192, prefix_sharing=True)
    folder, _ = prepare_dataset(cfg, log=lambda _: None)
    pref = report(folder)["preference"]
    assert pref["pairs_out"] == 3 and 0.45 < pref["prefix_sharing_token_saving"] < 0.5
