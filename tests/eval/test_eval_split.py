"""The eval split: whole documents held out by a seeded content hash, prepared exactly like the training rows."""

import itertools
import json
from pathlib import Path

import pytest
from datasets import load_from_disk

from data_prep.config import PrepConfig
from data_prep.eval_split import eval_config, select
from data_prep.output.writer import DATASET, REPORT
from data_prep.pipeline import prepare_splits
from longctx.config.recipe import RecipeError, parse_recipe
from tests.helpers import REPO

TOKENIZER = str(REPO / "recipes/assets/tiny-llama")
CORPUS = REPO / "recipes/assets/tiny-haystack"


def records(texts):
    return [(f"f.jsonl:{i + 1}", {"text": t}, None) for i, t in enumerate(texts)]


def sides(holdout, recs, seed=42):
    cfg = PrepConfig(tokenizer=TOKENIZER, max_length=64, holdout=holdout, seed=seed)
    train = list(select(cfg, iter(recs), records_again=lambda: iter(recs)))
    ev = list(select(eval_config(cfg), iter(recs), records_again=lambda: iter(recs)))
    return train, ev


def test_sides_are_disjoint_cover_everything_and_keep_duplicates_together():
    texts = [f"document {i}" for i in range(200)] + ["document 7", "document 7"]  # two extra copies of one
    recs = records(texts) + [("f.jsonl:999", None, ("bad_json", "line 999"))]
    train, ev = sides(0.25, recs)
    assert sorted(r[0] for r in train + ev) == sorted(r[0] for r in recs)  # every record on exactly one side
    train_texts = {r[1]["text"] for r in train if r[1]}
    assert not train_texts & {r[1]["text"] for r in ev}
    assert 30 < len(ev) < 70  # about a quarter of 202 documents
    assert ("f.jsonl:999", None, ("bad_json", "line 999")) in train  # bad rows are counted once, on the train side


def test_a_count_holds_out_exactly_that_many_and_the_seed_moves_them():
    recs = records([f"document {i}" for i in range(100)])
    _, ev = sides(12, recs)
    _, ev_other_seed = sides(12, recs, seed=43)
    assert len(ev) == 12 == len(ev_other_seed)
    assert {r[0] for r in ev} != {r[0] for r in ev_other_seed}


def test_the_split_does_not_move_when_rows_are_reordered():
    recs = records([f"document {i}" for i in range(100)])
    _, ev = sides(0.2, recs)
    _, ev_reversed = sides(0.2, recs[::-1])
    assert {r[1]["text"] for r in ev} == {r[1]["text"] for r in ev_reversed}


def documents(folder: Path) -> list[tuple[int, ...]]:
    """Every document's tokens in a prepared dataset, cut where position_ids restart at 0 (padding: no labels)."""
    docs = []
    for row in load_from_disk(str(folder / DATASET)):
        ids, pos, labels = row["input_ids"], row["position_ids"], row["labels"]
        starts = [i for i, p in enumerate(pos) if p == 0] + [len(ids)]
        spans = itertools.pairwise(starts)
        docs += [tuple(ids[a:b]) for a, b in spans if any(x != -100 for x in labels[a:b])]
    return docs


@pytest.mark.parametrize("mode", ["packed", "unpacked"])
def test_prepared_eval_rows_never_hold_a_training_document(tmp_path, mode):
    cfg = PrepConfig(
        tokenizer=TOKENIZER,
        inputs=(str(CORPUS),),
        max_length=4096,
        sp_size=2,
        mode=mode,
        fixed_length=True,
        holdout=8,
        output_dir=str(tmp_path),
    )
    train, ev = prepare_splits(cfg, log=lambda *_: None)
    train_docs, eval_docs = documents(train), documents(ev)
    assert len(eval_docs) == 8 and len(train_docs) == 40  # the corpus' 48 documents, none split or lost
    assert not set(train_docs) & set(eval_docs)
    rows = list(load_from_disk(str(ev / DATASET)))
    assert {len(r["input_ids"]) for r in rows} == {4096}  # the training layout: padded to max_length on CPU
    if mode == "packed":
        assert len(rows) < 8  # several held-out documents share a sequence, as in training
    reports = [json.loads((f / REPORT).read_text()) for f in (train, ev)]
    assert [r["config"]["split"] for r in reports] == ["train", "eval"]
    assert sum(r["documents_in"] for r in reports) == 48
    assert ev.name.startswith("tiny-haystack-eval-")


def test_without_a_holdout_the_cache_key_is_unchanged():
    """Recipes without an eval split keep the prepared data they already have (no rebuild)."""
    cfg = PrepConfig(tokenizer=TOKENIZER, inputs=(str(CORPUS),), max_length=2048)
    assert cfg.cache_key() == PrepConfig(tokenizer=TOKENIZER, inputs=(str(CORPUS),), max_length=2048).cache_key()
    assert cfg.cache_key() != PrepConfig(**{**cfg.__dict__, "holdout": 4}).cache_key()


RECIPE = ["--config", "recipes/tiny-llama/sft-2k-cpu-sp2.yaml", "--eval_strategy", "steps", "--eval_steps", "5"]
RECIPE += ["--per_device_eval_batch_size", "1"]


def test_eval_with_prepared_data_needs_held_out_documents():
    expected = "`eval_strategy`: is `steps`, .* none are held out; fix: set `eval_holdout`"
    with pytest.raises(RecipeError, match=expected):
        parse_recipe(RECIPE)
    recipe, sft, _ = parse_recipe([*RECIPE, "--eval_holdout", "0.1"])
    assert recipe.eval_holdout == 0.1 and sft.eval_strategy == "steps"


@pytest.mark.parametrize("bad", ["2.5", "-1"])
def test_a_holdout_that_is_neither_a_fraction_nor_a_count_is_refused(bad):
    with pytest.raises(RecipeError, match="`eval_holdout`: .* must be a fraction in \\(0, 1\\) or a whole number"):
        parse_recipe([*RECIPE, "--eval_holdout", bad])
