"""A user's own rows, as they have them (issue 42, points 4, 5, 7 and 8): Alpaca, OpenAI content parts, preference
pairs in the UltraFeedback-binarized shape, small preference sets, and columns a mapping leaves out.

Through data_prep's own entry (what `longctx data RECIPE --input FILE` execs: longctx/commands/data.py) on the
tiny recipes' tokenizer; the command as typed, from the user's folder, is one subprocess test per format.
"""

import json
import subprocess

import pytest

from data_prep.__main__ import main as data_prep
from data_prep.reading.formats import Columns, extract
from data_prep.trainers.preference import check_row
from longctx.config.paths import cli_command
from longctx.config.recipe import RecipeError, parse_recipe
from tests.helpers import OFFLINE

SFT = "recipes/tiny-llama/sft-2k-cpu-sp2.yaml"
DPO = "recipes/tiny-llama/dpo-2k-cpu-sp2.yaml"
TEMPLATE = ("--chat_template_path", "recipes/assets/chat_templates/qwen3-training.jinja")
DOCUMENT = "The pass key is 4242. " + "The river carries a paper boat past the mill. " * 30


def alpaca(i: int, document: str = DOCUMENT) -> dict:
    return {"instruction": f"What is the pass key? ({i})", "input": document, "output": "4242."}


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def prepare(tmp_path, recipe, data, *overrides):
    """`longctx data RECIPE --input DATA -- OVERRIDES` in-process: (exit code, its report or None)."""
    prep = tmp_path / "prep"
    code = data_prep(
        ["--recipe", recipe, "--quiet", "--input", data, "--", "--prepared_data_dir", str(prep), *overrides]
    )
    reports = sorted(prep.glob("*/report.json"))
    return code, json.loads(reports[-1].read_text()) if reports else None


def typed(tmp_path, *words: str) -> subprocess.CompletedProcess:
    """The command as a user types it in their folder (the printed prefix, which works from any shell)."""
    line = " ".join([cli_command(), *words])
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **OFFLINE}
    return subprocess.run(
        line, check=False, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )


# ---- Alpaca (point 4)


def test_an_alpaca_row_is_a_prompt_with_its_input_joined_and_the_output_as_completion():
    (prompt, completion), problem = extract(alpaca(1), "prompt_completion", Columns())
    assert problem is None
    assert prompt == f"What is the pass key? (1)\n{DOCUMENT}" and completion == "4242."
    (bare, _), _ = extract({**alpaca(1), "input": ""}, "prompt_completion", Columns())
    assert bare == "What is the pass key? (1)"  # an empty input adds nothing, not a stray newline


def test_the_issues_own_mapping_keeps_the_input_too():
    """Before: `prompt_field: instruction` + `completion_field: output` dropped `input` (2,963 tokens trained of
    about 16,500)."""
    columns = Columns(prompt="instruction", completion="output")
    (prompt, _), _ = extract(alpaca(2), "prompt_completion", columns)
    assert DOCUMENT in prompt


def test_alpaca_data_trains_on_its_documents(tmp_path):
    code, report = prepare(tmp_path, SFT, write_jsonl(tmp_path / "a.jsonl", [alpaca(i) for i in range(4)]))
    assert code == 0 and report["format"] == "prompt_completion" and report["documents_out"] == 4
    short = tmp_path / "short"
    short.mkdir()
    code, without = prepare(short, SFT, write_jsonl(short / "a.jsonl", [alpaca(i, "") for i in range(4)]))
    assert code == 0
    assert report["tokens_in"] > without["tokens_in"] + 4 * 300  # the document of every row is in the prompt


def test_a_mapping_that_leaves_a_text_column_unused_says_so(tmp_path, capsys):
    rows = [{"question": f"Pass key? {i}", "context": DOCUMENT, "answer": "4242.", "id": f"q{i}"} for i in range(4)]
    data = write_jsonl(tmp_path / "qa.jsonl", rows)
    code, _ = prepare(tmp_path, SFT, data, "--prompt_field", "question", "--completion_field", "answer")
    assert code == 0
    err = capsys.readouterr().err
    assert "column(s) `context` hold text that format `prompt_completion` does not read" in err
    assert "`input_field`" in err and "`id`" not in err  # an identifier is not text left out


def test_a_misspelled_column_gets_a_did_you_mean(tmp_path, capsys):
    data = write_jsonl(tmp_path / "a.jsonl", [alpaca(i) for i in range(4)])
    code, _ = prepare(tmp_path, SFT, data, "--prompt_field", "instrution", "--completion_field", "output")
    assert code == 2
    assert "no column `instrution` (did you mean `instruction`?)" in capsys.readouterr().err


@pytest.mark.subprocess
def test_longctx_data_reads_an_alpaca_file_as_typed(tmp_path):
    write_jsonl(tmp_path / "alpaca.jsonl", [alpaca(i) for i in range(4)])
    proc = typed(tmp_path, f"data tiny-2k --input alpaca.jsonl --quiet -- --prepared_data_dir {tmp_path / 'prep'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(next((tmp_path / "prep").glob("*/report.json")).read_text())
    assert report["format"] == "prompt_completion" and report["documents_out"] == 4
    assert "Traceback" not in proc.stderr and "warning" not in proc.stderr


# ---- OpenAI content parts (point 8 of the issue, 7 of the brief)


def parts_chat(i: int, extra=()) -> dict:
    user = [{"type": "text", "text": f"What is {i} plus {i}?"}, {"type": "text", "text": " Answer briefly."}, *extra]
    return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": f"{2 * i}"}]}


def test_text_parts_are_joined_and_other_parts_refused_by_name():
    chat, problem = extract(parts_chat(3), "messages", Columns())
    assert problem is None and chat[0]["content"] == "What is 3 plus 3? Answer briefly."
    image = {"type": "image_url", "image_url": {"url": "https://example.org/x.png"}}
    _, problem = extract(parts_chat(3, [image]), "messages", Columns())
    assert problem == (
        "malformed",
        "`messages[0].content[2]` is a `image_url` part: only text parts (`type: text`) can be trained",
    )


def test_content_part_chats_prepare_and_an_image_row_is_named(tmp_path, capsys):
    image = {"type": "image_url", "image_url": {"url": "https://example.org/x.png"}}
    rows = [parts_chat(i) for i in range(19)] + [parts_chat(19, [image])]
    code, report = prepare(tmp_path, SFT, write_jsonl(tmp_path / "c.jsonl", rows), *TEMPLATE)
    assert code == 0 and report["documents_out"] == 19 and report["documents_dropped_by_reason"]["malformed"] == 1
    assert "c.jsonl:20: `messages[0].content[2]` is a `image_url` part" in report["examples"]["malformed"][0]


# ---- preference pairs (point 5)


def ultrafeedback(i: int) -> dict:
    """The shape of HuggingFaceH4/ultrafeedback_binarized: a string prompt, answers that repeat the user turn."""
    prompt = f"Which number comes after {i}?"
    turn = {"role": "user", "content": prompt}
    return {
        "prompt": prompt,
        "prompt_id": f"{i:04d}",
        "chosen": [turn, {"role": "assistant", "content": f"{i + 1}."}],
        "rejected": [turn, {"role": "assistant", "content": f"{i + 7}."}],
        "score_chosen": 9.0,
        "score_rejected": 2.0,
    }


def test_an_ultrafeedback_row_has_its_prompt_extracted_as_trl_does():
    from trl.data_utils import maybe_extract_prompt

    row = ultrafeedback(4)
    checked, problem = check_row(dict(row))
    assert problem is None
    theirs = maybe_extract_prompt({k: row[k] for k in ("prompt", "chosen", "rejected")})
    assert {k: checked[k] for k in ("prompt", "chosen", "rejected")} == theirs
    assert checked["prompt"] == [{"role": "user", "content": "Which number comes after 4?"}]


def test_prompt_field_names_the_prompt_column_of_pairs():
    row = {"question": "Say yes.", "chosen": "Yes.", "rejected": "No."}
    checked, problem = check_row(row, "question")
    assert problem is None and checked["prompt"] == "Say yes." and "question" not in checked


def test_ultrafeedback_pairs_prepare_with_a_chat_template(tmp_path):
    data = write_jsonl(tmp_path / "uf.jsonl", [ultrafeedback(i) for i in range(30)])
    code, report = prepare(tmp_path, DPO, data, *TEMPLATE, "--eval_holdout", "0", "--eval_strategy", "no")
    assert code == 0 and report["documents_dropped"] == 0 and report["preference"]["pairs_out"] == 30


def test_a_mapping_key_pairs_never_read_is_refused_for_dpo():
    with pytest.raises(RecipeError) as caught:
        parse_recipe(["--config", DPO, "--completion_field", "answer"])
    assert "`completion_field`" in str(caught.value) and "`chosen`, `rejected`" in str(caught.value)
    recipe, _, _ = parse_recipe(["--config", DPO, "--prompt_field", "question"])
    assert recipe.prompt_field == "question"


def test_counts_name_rows_as_the_file_has_them_and_a_holdout_larger_than_training_is_refused(tmp_path, capsys):
    """Before: 30 pairs, `eval_holdout: 16` (the tiny DPO recipe's), "14 rows", and training on what was left."""
    data = write_jsonl(tmp_path / "uf.jsonl", [ultrafeedback(i) for i in range(30)])
    code, _ = prepare(tmp_path, DPO, data, *TEMPLATE)
    assert code == 2
    err = capsys.readouterr().err
    assert "`eval_holdout` holds out 16 of the data's 30 rows and leaves 14 to train" in err
    assert "lower `eval_holdout`" in err


def test_pairs_the_policy_drops_count_against_max_dropped_fraction_with_the_fix(tmp_path, capsys):
    """Before: `too_long` dropped 9 of 14 pairs and training ran on 5, exit 0."""
    rows = [ultrafeedback(i) for i in range(20)]
    for row in rows[:6]:
        row["chosen"][1]["content"] = DOCUMENT * 3  # far over max_length 512
    data = write_jsonl(tmp_path / "uf.jsonl", rows)
    code, _ = prepare(
        tmp_path,
        DPO,
        data,
        *TEMPLATE,
        "--eval_holdout",
        "0",
        "--eval_strategy",
        "no",
        "--max_length",
        "512",
        "--pad_to_multiple_of",
        "512",
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "6 of 20 rows (30.0%) were dropped and would not train, over `max_dropped_fraction` 0.05" in err
    assert "too_long 6" in err and "raise `max_length`, or set `long_document_policy: truncate`" in err


@pytest.mark.subprocess
def test_longctx_data_prepares_ultrafeedback_pairs_as_typed(tmp_path):
    write_jsonl(tmp_path / "uf.jsonl", [ultrafeedback(i) for i in range(30)])
    words = f"data tiny-dpo-2k --input uf.jsonl --quiet -- --prepared_data_dir {tmp_path / 'prep'} --eval_holdout 0"
    words += " --eval_strategy no"
    proc = typed(tmp_path, words, *TEMPLATE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[data] pairs: 30 in -> 30 out" in proc.stdout and "Traceback" not in proc.stderr
