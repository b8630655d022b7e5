"""data_prep end to end in-process with the tiny tokenizer: formats, bad input, accounting, cache, atomicity."""

import json
from pathlib import Path

import numpy as np
import pytest
from datasets import load_from_disk
from transformers import AutoTokenizer

from data_prep.config import PrepConfig
from data_prep.errors import PrepError
from data_prep.output.writer import DATASET, PLOT, REPORT
from data_prep.pipeline import prepare_dataset
from tests.helpers import REPO

TOKENIZER = str(REPO / "recipes/assets/tiny-llama")


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(TOKENIZER)


def write_jsonl(path: Path, rows) -> Path:
    """Rows are dicts (dumped as JSON) or raw bytes (written as they are, to make broken lines)."""
    with open(path, "wb") as f:
        f.writelines((row if isinstance(row, bytes) else json.dumps(row).encode()) + b"\n" for row in rows)
    return path


def config(tmp_path, inputs, **kw) -> PrepConfig:
    kw.setdefault("max_length", 64)
    kw.setdefault("sp_size", 2)
    return PrepConfig(tokenizer=TOKENIZER, inputs=tuple(map(str, inputs)), output_dir=str(tmp_path / "out"), **kw)


def run(cfg):
    folder, hit = prepare_dataset(cfg, log=lambda *_: None)
    return folder, json.loads((folder / REPORT).read_text()), hit


def rows_of(folder):
    return load_from_disk(str(folder / DATASET)).to_dict()


def test_every_bad_row_class_is_counted_with_its_location(tmp_path):
    long_text = "the river crosses the long road " * 40  # > 64 tokens
    src = write_jsonl(
        tmp_path / "docs.jsonl",
        [
            {"text": "a small fox finds a blue door"},  # 1 ok
            b'{"text": "unterminated',  # 2 malformed JSON
            b'{"text": "bad \xff\xfe utf8"}',  # 3 invalid UTF-8
            b"[1, 2]",  # 4 not an object
            {"txt": "misnamed column"},  # 5 missing column
            {"text": 42},  # 6 non-string
            {"text": ""},  # 7 empty
            {"text": "   \n\t "},  # 8 whitespace only
            {"text": long_text},  # 9 too long (policy drop)
            {"text": "the old bridge hears two letters"},  # 10 ok
        ],
    )
    folder, report, _ = run(config(tmp_path, [src], policy="drop", max_dropped_fraction=1.0))  # counts, not fails
    by = report["documents_dropped_by_reason"]
    assert by == {"empty": 2, "malformed": 5, "too_long": 1, "no_trainable_tokens": 0}
    assert report["documents_in"] == 10 and report["documents_out"] == 2
    examples = {e.split("docs.jsonl:")[1].split(":")[0]: e for e in report["examples"]["malformed"]}
    for line, what in [(2, "not valid JSON"), (3, "invalid UTF-8"), (4, "JSON object"), (5, "missing column `text`")]:
        assert what in examples[str(line)]
    assert "docs.jsonl:9: " in report["examples"]["too_long"][0]
    assert report["tokens_dropped"] > 64
    assert report["tokens_in"] == report["tokens_out"] + report["tokens_dropped"] + report["tokens_truncated"]
    assert (folder / PLOT).stat().st_size > 1000


@pytest.mark.parametrize("policy", ["split", "truncate", "drop"])
def test_long_document_policies_account_for_every_token(tmp_path, tok, policy):
    text = "the river crosses the long road before dawn. " * 30
    n = len(tok(text)["input_ids"]) + 1  # + EOS
    src = write_jsonl(tmp_path / "d.jsonl", [{"text": text}, {"text": "a short one"}])
    # max_dropped_fraction 1: the accounting is the subject; `drop` dropping 1 of 2 fails the threshold otherwise
    _folder, report, _ = run(config(tmp_path, [src], policy=policy, max_dropped_fraction=1.0))
    assert report["tokens_in"] == report["tokens_out"] + report["tokens_dropped"] + report["tokens_truncated"]
    if policy == "split":
        assert report["documents_split"] == 1 and report["tokens_truncated"] == 0 and report["tokens_dropped"] == 0
        assert report["segments"] == -(-n // 64) + 1
    elif policy == "truncate":
        assert report["documents_truncated"] == 1 and report["tokens_truncated"] == n - 64
    else:
        assert report["documents_dropped_by_reason"]["too_long"] == 1 and report["tokens_dropped"] == n


def test_chat_labels_are_exactly_the_assistant_turns(tmp_path, tok):
    chats = [
        {"messages": [{"role": "user", "content": "hi there"}, {"role": "assistant", "content": "hello you"}]},
        {
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "what is the key"},
                {"role": "assistant", "content": "seven apples"},
                {"role": "user", "content": "and then"},
                {"role": "assistant", "content": "the blue door"},
            ]
        },
        {"messages": [{"role": "user", "content": "no answer here"}]},  # no assistant turn
    ]
    src = write_jsonl(tmp_path / "chat.jsonl", chats)
    folder, report, _ = run(config(tmp_path, [src], max_length=128, mode="unpacked", max_dropped_fraction=0.5))
    assert report["format"] == "messages" and report["documents_dropped_by_reason"]["no_trainable_tokens"] == 1
    assert "chat.jsonl:3" in report["examples"]["no_trainable_tokens"][0]
    trained = sorted(tok.decode([t for t in labels if t != -100]) for labels in rows_of(folder)["labels"])
    # what the template renders for assistant turns (content + <|eot_id|>), nothing else
    assert trained == ["hello you<|eot_id|>", "seven apples<|eot_id|>the blue door<|eot_id|>"]


def test_prompt_completion_trains_on_the_completion_and_eos_only(tmp_path, tok):
    src = write_jsonl(tmp_path / "pc.jsonl", [{"prompt": "What is the pass key?", "completion": " It is 42."}])
    folder, _report, _ = run(config(tmp_path, [src]))
    labels = rows_of(folder)["labels"][0]
    assert tok.decode([t for t in labels if t != -100]) == " It is 42.<|end_of_text|>"


def test_a_missing_column_everywhere_is_one_clear_error(tmp_path):
    src = write_jsonl(tmp_path / "d.jsonl", [{"body": "x"}] * 3)
    with pytest.raises(PrepError, match=r"`text`.*`dataset_text_field`"):
        run(config(tmp_path, [src], format="text"))
    with pytest.raises(PrepError, match=r"cannot tell the dataset format from the columns \['body'\]"):
        run(config(tmp_path, [src]))


def test_nothing_usable_is_an_error_naming_the_reason(tmp_path):
    src = write_jsonl(tmp_path / "d.jsonl", [{"text": " "}, {"text": ""}])
    with pytest.raises(PrepError, match=r"no usable documents in 2 rows.*2 dropped as empty, e.g. .*d.jsonl:1"):
        run(config(tmp_path, [src]))
    assert not list((tmp_path / "out").iterdir())  # the failed run left nothing behind


def test_text_folder_parquet_and_arrow_sources(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "txt").mkdir()
    (tmp_path / "txt/a.txt").write_text("the river crosses the long road")
    (tmp_path / "txt/b.md").write_text("a small fox finds a blue door")
    pq.write_table(pa.table({"text": ["seven apples at noon"]}), tmp_path / "c.parquet")
    with pa.OSFile(str(tmp_path / "d.arrow"), "wb") as sink:
        table = pa.table({"text": ["two letters by the harbour"]})
        with pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
    inputs = [tmp_path / "txt", tmp_path / "c.parquet", str(tmp_path / "*.arrow")]
    _, report, _ = run(config(tmp_path, inputs))
    assert report["documents_out"] == 4


def test_cache_hit_force_and_byte_identical_output(tmp_path):
    src = write_jsonl(tmp_path / "d.jsonl", [{"text": f"the river crosses {i} roads"} for i in range(50)])
    cfg = config(tmp_path, [src])
    folder, _, hit = run(cfg)
    assert not hit
    before = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert run(cfg)[2]  # second call: cache hit
    again, _, hit = prepare_dataset(cfg, force=True, log=lambda *_: None) + (None,)
    assert again == folder
    after = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert before == after  # same inputs and seed: byte-identical, no timestamps
    assert run(config(tmp_path, [src], sp_size=4))[0] != folder  # sp is part of the key


def test_an_interrupted_write_leaves_nothing_that_looks_complete(tmp_path, monkeypatch):
    src = write_jsonl(tmp_path / "d.jsonl", [{"text": "the river crosses the road"}])
    cfg = config(tmp_path, [src])

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # as if the run were stopped after the dataset was written

    monkeypatch.setattr("data_prep.output.plot.save_plot", killed)
    with pytest.raises(KeyboardInterrupt):
        run(cfg)
    assert not cfg.dataset_dir().exists() and not list((tmp_path / "out").iterdir())
    # a hard kill (no cleanup) leaves only a .tmp-* folder, which the next run removes
    stale = tmp_path / "out" / f".tmp-{cfg.dataset_dir().name}-dead"
    stale.mkdir()
    monkeypatch.undo()
    folder, _, hit = run(cfg)
    assert not hit and not stale.exists() and (folder / DATASET).is_dir()


def test_rows_are_sp_aligned_and_fixed_length_when_asked(tmp_path):
    src = write_jsonl(tmp_path / "d.jsonl", [{"text": "a " * n} for n in range(1, 40)])
    folder, report, _ = run(config(tmp_path, [src], sp_size=4, alignment=8))
    assert all(len(r) % 8 == 0 for r in rows_of(folder)["input_ids"])
    folder, report, _ = run(config(tmp_path, [src], sp_size=4, fixed_length=True))
    assert {len(r) for r in rows_of(folder)["input_ids"]} == {64}
    assert 0 < report["packing_efficiency"] <= 1
    assert np.isclose(
        report["packing_efficiency"], report["tokens_out"] / (report["tokens_out"] + report["pad_tokens"])
    )


@pytest.mark.slow  # spawns tokenizer workers (each imports transformers): about a minute on 2 cores
def test_worker_processes_give_the_same_bytes(tmp_path):
    src = write_jsonl(tmp_path / "d.jsonl", [{"text": f"the river crosses {i} roads"} for i in range(3000)] + [b"{"])
    one, _, _ = run(config(tmp_path / "a", [src]))
    two, _, _ = run(config(tmp_path / "b", [src], num_proc=2))
    files = sorted(p.relative_to(one) for p in one.rglob("*") if p.is_file())
    assert files and all((one / f).read_bytes() == (two / f).read_bytes() for f in files)


def test_hub_reader_streams_rows_with_row_locations(tmp_path):
    from data_prep.reading.sources import iter_hub

    write_jsonl(tmp_path / "train.jsonl", [{"text": "a"}, {"text": "b"}])  # `load_dataset` also takes a folder
    items = list(iter_hub(str(tmp_path), None, "train"))
    assert [(loc.endswith(f":train row {i}"), row) for i, (loc, row, _) in enumerate(items)] == [
        (True, {"text": "a"}),
        (True, {"text": "b"}),
    ]
    with pytest.raises(PrepError, match="cannot be loaded"):
        list(iter_hub(str(tmp_path / "missing"), None, "train"))


def test_a_segment_whose_only_trainable_token_is_its_first_is_dropped_and_counted(tmp_path, tok):
    """A segment's first token gets no label (nothing in its segment predicts it), so a split document's one-token
    tail trains nothing: it is dropped and counted, not written as a row without labels."""
    words = ["the", "river", "crosses", "the", "long", "road", "before", "dawn"]
    text = " ".join(words)
    while (len(tok(text)["input_ids"]) + 1) % 64 != 1:  # + EOS: the last of its 64-token segments holds 1 token
        text += " " + words[len(text) % len(words)]
    n = len(tok(text)["input_ids"]) + 1
    src = write_jsonl(tmp_path / "d.jsonl", [{"text": text}, {"text": "a short one"}])
    folder, report, _ = run(config(tmp_path, [src], mode="unpacked"))
    assert all(any(t != -100 for t in labels) for labels in rows_of(folder)["labels"]), "a row trains nothing"
    assert report["segments_without_labels"] == 1 and report["tokens_dropped"] == 1
    assert report["segments"] == n // 64 + 1 and report["documents_out"] == 2


def test_a_document_labelled_only_on_its_first_token_is_dropped():
    """Whole documents too: trainable only at a segment's first token means no label after the shift."""
    from data_prep.pipeline import Segmentation

    keep, starts = np.array([3, 4, 130]), np.array([0, 3, 7])
    trainable = np.zeros(137, bool)
    trainable[[0, 4, 7, 7 + 64, 7 + 128]] = True  # doc 0 only at its first token; doc 2's segments at their first
    trainable[7 + 129] = True  # ... except its 2-token tail's second token
    seg = Segmentation(keep, starts, 64, trainable)
    assert seg.doc_labelled.tolist() == [False, True, True]
    assert seg.lengths.tolist() == [3, 4, 64, 64, 2] and seg.labelled.tolist() == [False, True, False, False, True]
