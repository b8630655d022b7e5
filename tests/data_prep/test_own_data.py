"""A user's own data, as they have it: `--input` with a recipe, the column and role mapping keys, ShareGPT rows,
every TRL data key honoured or refused by name, and the bad-row threshold that names report.json.

In-process through data_prep's own entry (`python -m data_prep` is `data_prep.__main__.main`) on the tiny recipe's
tokenizer, with a handful of rows; the CLI as typed (`python -m longctx data RECIPE --input FILE` from another
folder) is one subprocess test, and training on mapped data through `make sft` is in
tests/data_prep/test_own_data_sft.py.
"""

import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_prep.__main__ import main as data_prep
from data_prep.reading.formats import Columns, detect_format, extract
from longctx.config.paths import cli_command
from longctx.config.prepared_manifest import prep_settings
from longctx.config.recipe import RecipeError, parse_recipe, recipe_topology
from tests.helpers import REPO

RECIPE = "recipes/tiny-llama/sft-2k-cpu-sp2.yaml"


def sharegpt(i: int) -> dict:
    turns = [
        {"from": "system", "value": "Answer with the number."},
        {"from": "human", "value": f"What is {i} plus {i}?"},
        {"from": "gpt", "value": f"{2 * i}"},
    ]
    return {"id": i, "conversations": turns}


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def prepare(tmp_path, *flags, overrides=()):
    """data_prep --recipe with the prepared data (and its manifest) under tmp_path; its exit code."""
    return data_prep(
        ["--recipe", RECIPE, "--quiet", *flags, "--", "--prepared_data_dir", str(tmp_path / "prep"), *overrides]
    )


def parsed(*overrides):
    return parse_recipe(["--config", RECIPE, *overrides])


def test_sharegpt_rows_are_chats_without_any_key():
    """Before: `conversations` was "cannot tell the dataset format ... set dataset_format", which cannot fix it."""
    row = sharegpt(3)
    assert detect_format(row, "x") == "messages"
    chat, problem = extract(row, "messages", Columns())
    assert problem is None
    assert [m["role"] for m in chat] == ["system", "user", "assistant"] and chat[2]["content"] == "6"


def test_mapping_keys_name_the_columns_as_the_data_has_them():
    columns = Columns.of({"messages": "dialogue", "role": "speaker", "content": "text", "roles": {"bot": "assistant"}})
    row = {"dialogue": [{"speaker": "user", "text": "hi"}, {"speaker": "bot", "text": "hello"}]}
    assert detect_format(row, "x", columns) == "messages"
    assert extract(row, "messages", columns)[0] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]
    pc = Columns.of({"prompt": "question", "completion": "answer"})
    assert extract({"question": "q", "answer": "a"}, detect_format({"question": "q", "answer": "a"}, "x", pc), pc)[
        0
    ] == (
        "q",
        "a",
    )
    assert extract({"body": "a document"}, "text", Columns.of({"text": "body"}))[0] == "a document"


def test_a_messages_rows_roles_are_used_as_they_are():
    """The ShareGPT role names map only where roles come from another field: a `messages` row is unchanged."""
    chat, problem = extract({"messages": [{"role": "gpt", "content": "x"}]}, "messages", Columns())
    assert chat is None and problem[0] == "no_trainable_tokens" and "role_map" in problem[1]


def test_unmatched_columns_say_which_keys_map_them():
    with pytest.raises(Exception, match="messages_field") as caught:
        detect_format({"question": "q", "reply": "r"}, "data.jsonl:1")
    assert "dataset_format (--format)" not in str(caught.value)


def test_the_mapping_keys_reach_the_prepared_datas_settings_and_no_default_changes_a_key():
    recipe, sft, model = parsed()
    assert "columns" not in prep_settings(recipe, sft, model, recipe_topology(recipe))  # every manifest stays valid
    recipe, sft, model = parsed("--dataset_text_field", "body", "--role_map", '{"bot": "assistant"}')
    columns = prep_settings(recipe, sft, model, recipe_topology(recipe))["columns"]
    assert columns == {"text": "body", "roles": {"bot": "assistant"}}


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["--dataset_test_split", "validation"], "dataset_test_split"),
        (["--eos_token", "<|eot_id|>"], "eos_token"),
        (["--truncation_mode", "keep_end"], "truncation_mode"),
        (["--assistant_only_loss", "false"], "assistant_only_loss"),
        (["--prepare_data", "off", "--messages_field", "dialogue"], "messages_field"),
        (["--max_dropped_fraction", "2"], "max_dropped_fraction"),
    ],
)
def test_a_trl_data_key_nothing_reads_is_refused_by_name(overrides, key):
    """Before: `eos_token`, `truncation_mode`, `dataset_test_split` ... parsed and were silently ignored."""
    with pytest.raises(RecipeError) as caught:
        parsed(*overrides)
    assert [p.key for p in caught.value.problems] == [key]


def test_honoured_trl_data_keys_parse():
    recipe, sft, _ = parsed("--dataset_text_field", "body", "--dataset_num_proc", "1", "--assistant_only_loss", "true")
    assert sft.dataset_text_field == "body" and recipe.max_dropped_fraction == 0.05


def test_input_with_a_recipe_prepares_every_file_kind_and_prints_how_to_train_on_it(tmp_path, capsys):
    """Before: `--input conflict with --recipe` although the user never typed `--recipe`. One glob over .jsonl,
    .json, .parquet and .arrow files of ShareGPT rows, read through the recipe's tokenizer and layout."""
    data = tmp_path / "mine"
    data.mkdir()
    write_jsonl(data / "a.jsonl", [sharegpt(i) for i in range(3)])
    (data / "b.json").write_text(json.dumps([sharegpt(i) for i in range(3, 5)]))
    table = pa.Table.from_pylist([sharegpt(i) for i in range(5, 7)])
    pq.write_table(table, data / "c.parquet")
    with pa.OSFile(str(data / "d.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    assert prepare(tmp_path, "--input", str(data / "*")) == 0
    out = capsys.readouterr().out
    report = json.loads(next((tmp_path / "prep").glob("*/report.json")).read_text())
    assert report["documents_in"] == 9 and report["documents_out"] == 9 and report["format"] == "messages"
    assert f"[data] report: {tmp_path / 'prep'}" in out
    assert f"train on it: {cli_command()} sft {RECIPE} -- --prepared_data_dir" in out
    assert f"--data_files '{data}/*'" in out


def test_input_of_a_hub_id_reads_the_hub_dataset(tmp_path, capsys, monkeypatch):
    """A Hub id is streamed (`datasets.load_dataset`, faked here: the tests are offline)."""
    import datasets

    calls = []

    def fake_load(path, name=None, split=None, streaming=False):
        calls.append((path, name, split, streaming))
        return iter({"text": f"document {i} " * 20} for i in range(4))

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    assert prepare(tmp_path, "--input", "someone/their-corpus", overrides=["--dataset_config", "raw"]) == 0
    assert calls and set(calls) == {("someone/their-corpus", "raw", "train", True)}
    assert f"train on it: {cli_command()} sft" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (["missing.jsonl"], "no such file or folder"),
        (["org/a", "org/b"], "one Hub dataset"),
    ],
)
def test_inputs_that_are_neither_files_nor_one_hub_id(tmp_path, capsys, inputs, message):
    assert prepare(tmp_path, "--input", *inputs) == 2
    assert message in capsys.readouterr().err


def test_too_many_unusable_rows_fail_naming_the_report_and_the_top_reasons(tmp_path, capsys):
    """Before: 30% of the rows dropped as malformed, exit 0, report.json never named."""
    lines = [json.dumps(sharegpt(i)) if i % 10 >= 3 else "{not json" for i in range(20)]
    (tmp_path / "bad.jsonl").write_text("\n".join(lines) + "\n")
    assert prepare(tmp_path, "--input", str(tmp_path / "bad.jsonl")) == 2
    err = capsys.readouterr().err
    report = next((tmp_path / "prep").glob("bad.jsonl-*/report.json"))
    assert "6 of 20 rows (30.0%) were unusable, over `max_dropped_fraction` 0.05" in err
    assert f"report: {report}" in err and "malformed 6 (e.g. " in err and "bad.jsonl:1: not valid JSON" in err
    # the cache keeps the dataset; a threshold that allows the rows is a cache hit, with the report named
    assert prepare(tmp_path, "--input", str(tmp_path / "bad.jsonl"), overrides=["--max_dropped_fraction", "0.3"]) == 0
    out = capsys.readouterr().out
    assert "[data] cache hit" in out and f"[data] report: {report}" in out


@pytest.mark.subprocess
def test_longctx_data_works_as_typed_from_another_folder(tmp_path):
    """`python -m longctx data tiny-2k --input my.jsonl` in the user's folder, a relative path."""
    write_jsonl(tmp_path / "my.jsonl", [sharegpt(i) for i in range(4)])
    cmd = [sys.executable, "-m", "longctx", "data", "tiny-2k", "--input", "my.jsonl", "--quiet"]
    cmd += ["--", "--prepared_data_dir", str(tmp_path / "prep")]
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # this checkout, from a folder outside it
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"--data_files {tmp_path / 'my.jsonl'}" in proc.stdout and "[data] report: " in proc.stdout
