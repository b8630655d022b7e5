"""A user's own data trains through `make sft` with recipe keys only (ARGS), no script: a ShareGPT jsonl with a
`conversations` column (quick tier), a parquet with its own column names and a text corpus whose field is
not `text` (slow). A file with 30% malformed rows stops before any launch, naming report.json."""

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.data_prep.test_own_data import sharegpt
from tests.helpers.launching.launch import log_history
from tests.helpers.launching.make import run_make

pytestmark = pytest.mark.distributed


def make_sft(tmp_path, *args: str):
    out = tmp_path / "out"
    run = f"--max_steps 1 --logging_steps 1 --output_dir {out} --prepared_data_dir {tmp_path / 'prep'}"
    return run_make("-s", "sft", f"ARGS={' '.join(args)} {run}", check=False, timeout=900)


def trained(tmp_path, proc, fmt: str) -> None:
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-6000:]
    report = json.loads(next((tmp_path / "prep").glob("*/report.json")).read_text())
    assert report["format"] == fmt and report["documents_dropped"] == 0 and report["trainable_tokens"] > 0
    assert re.search(r"\[data\] report: \S+/report\.json", log)
    assert len(log_history(tmp_path / "out")) == 1


@pytest.mark.slow  # the quick tier prepares the same file in-process (tests/data_prep/test_own_data.py)
def test_a_sharegpt_jsonl_trains_through_make_sft(tmp_path):
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps(sharegpt(i)) + "\n" for i in range(8)))
    trained(tmp_path, make_sft(tmp_path, f"--data_files {data}"), "messages")


# the quick tier runs the same file through data_prep in-process (tests/data_prep/test_own_data.py)
@pytest.mark.slow
def test_a_file_with_30_percent_malformed_rows_stops_before_the_launch_naming_the_report(tmp_path):
    data = tmp_path / "bad.jsonl"
    data.write_text("".join(json.dumps(sharegpt(i)) + "\n" if i % 10 >= 3 else "{oops\n" for i in range(20)))
    proc = make_sft(tmp_path, f"--data_files {data}")
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "[launch]" not in log
    assert re.search(r"6 of 20 rows \(30\.0%\) were unusable.*report: \S+/bad\.jsonl-\w+/report\.json", log), log[
        -3000:
    ]


@pytest.mark.slow
def test_a_parquet_with_its_own_column_names_trains_through_make_sft(tmp_path):
    rows = [{"question": f"What is {i} times 3?", "answer": f"{3 * i}."} for i in range(8)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "qa.parquet")
    mapping = f"--data_files {tmp_path / 'qa.parquet'} --prompt_field question --completion_field answer"
    trained(tmp_path, make_sft(tmp_path, mapping), "prompt_completion")


@pytest.mark.slow
def test_a_text_corpus_with_another_field_name_trains_through_make_sft(tmp_path):
    data = tmp_path / "corpus.jsonl"
    data.write_text("".join(json.dumps({"body": f"Document {i}. " * 40, "id": i}) + "\n" for i in range(8)))
    trained(tmp_path, make_sft(tmp_path, f"--data_files {data} --dataset_text_field body"), "text")
