"""Corpus-scale behaviour in-process: one exact BFD over the whole corpus however it is chunked, the report
checked against the rows actually written, and `.json` arrays streamed element by element."""

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from datasets import load_from_disk
from transformers import AutoTokenizer

from data_prep.config import PrepConfig
from data_prep.output.writer import DATASET, REPORT, AtomicWriter
from data_prep.packing.packer import pack_bfd
from data_prep.pipeline import prepare_dataset
from data_prep.reading import json_stream
from data_prep.reading.sources import read_json
from tests.helpers import REPO

TOKENIZER = str(REPO / "recipes/assets/tiny-llama")
PAD = 2  # the tiny tokenizer's <|pad|>
WORDS = ["the", "river", "crosses", "a", "long", "road", "while", "seven", "blue", "foxes"]
WORDS += ["find", "the", "harbour", "door"]


def corpus(path: Path, n: int = 300) -> Path:
    rng = np.random.default_rng(0)
    docs = [" ".join(rng.choice(WORDS, int(rng.integers(2, 150)))) for _ in range(n)]
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    return path


def run(tmp_path, src, name, **kw):
    cfg = PrepConfig(tokenizer=TOKENIZER, inputs=(str(src),), output_dir=str(tmp_path / name), **kw)
    folder, _ = prepare_dataset(cfg, log=lambda *_: None)
    return folder, json.loads((folder / REPORT).read_text())


def test_bfd_is_exact_over_the_whole_corpus_however_many_files(tmp_path):
    src = corpus(tmp_path / "d.jsonl")
    kw = {"max_length": 256, "sp_size": 2}
    small, small_report = run(tmp_path, src, "small", shard_tokens=512, **kw)  # ~2 rows per Arrow file
    big, _ = run(tmp_path, src, "big", shard_tokens=10**8, **kw)  # one Arrow file
    assert len(list((small / DATASET).glob("*.arrow"))) > 20
    assert load_from_disk(str(small / DATASET)).to_dict() == load_from_disk(str(big / DATASET)).to_dict()
    # the bins of one BFD over every document's length (tokenized here independently, + EOS, split at 256)
    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    lengths = [len(ids) + 1 for ids in tok([json.loads(x)["text"] for x in src.read_text().splitlines()])["input_ids"]]
    segments = np.array([min(256, n - i) for n in lengths for i in range(0, n, 256)], np.int64)
    assert small_report["sequences"] == len(pack_bfd(segments, 256))


def drop_last_row(original):
    def add(self, table):
        return original(self, table.slice(0, table.num_rows - 1))

    return add


def train_on_one_pad_slot(original):
    def add(self, table):
        labels = table.column("labels").combine_chunks()
        values = labels.values.to_numpy().copy()
        ids = table.column("input_ids").combine_chunks().values.to_numpy()
        values[np.flatnonzero(ids == PAD)[-1:]] = 7  # label one padding slot (and break nothing else)
        labels = pa.ListArray.from_arrays(labels.offsets, pa.array(values))
        return original(self, table.set_column(1, "labels", labels))

    return add


@pytest.mark.parametrize("breakage", [drop_last_row, train_on_one_pad_slot])
def test_a_broken_writer_is_caught_by_counting_the_written_rows(tmp_path, monkeypatch, breakage):
    src = corpus(tmp_path / "d.jsonl", 60)
    run(tmp_path, src, "ok", max_length=256, sp_size=8)  # unbroken: the check passes
    monkeypatch.setattr(AtomicWriter, "add", breakage(AtomicWriter.add))
    with pytest.raises(AssertionError, match="written rows disagree with the report"):
        run(tmp_path, src, "broken", max_length=256, sp_size=8)
    assert not list((tmp_path / "broken").iterdir())  # nothing left that looks finished


def test_json_arrays_stream_in_small_reads_with_element_locations(tmp_path, monkeypatch):
    rows = [{"text": f"row {i} " + "é" * (i % 5), "n": i * 1.5} for i in range(50)] + [[1, 2]]
    path = tmp_path / "a.json"
    path.write_text(json.dumps(rows, indent=1, ensure_ascii=False))
    monkeypatch.setattr(json_stream, "CHUNK", 7)  # every element and multi-byte character spans reads
    got = list(read_json(path))
    assert [row for _, row, _ in got[:-1]] == rows[:-1]
    assert got[-1][0].endswith("a.json[50]") and "got list" in got[-1][2][1]
    path.write_text('[{"text": "a"}, {"text": "b" {"text": "c"}]')
    where, row, problem = list(read_json(path))[-1]
    assert where.endswith("a.json[1]") and row is None and "not valid JSON" in problem[1]
