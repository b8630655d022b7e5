"""`make data` of a GRPO recipe (data_prep/trainers/prompts.py): prompt rows checked, counted as TRL tokenizes them,
over-long
ones dropped, the rest written with their columns unchanged and found by the trainer through the manifest."""

import json
import types

import pytest
from datasets import load_from_disk

from data_prep.config import PrepConfig
from data_prep.errors import PrepError
from data_prep.pipeline import prepare_dataset
from longctx.config.prepared_manifest import DATASET, REPORT
from longctx.memory_plan.rollout import group_tokens

TOKENIZER = "recipes/assets/tiny-llama"


def chat(text: str) -> list[dict]:
    return [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]


def write_rows(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def prepare(tmp_path, rows, **settings):
    cfg = PrepConfig(
        tokenizer=TOKENIZER,
        max_length=settings.pop("max_length", 64),
        inputs=(write_rows(tmp_path / "prompts.jsonl", rows),),
        objective="grpo",
        mode="unpacked",
        policy=settings.pop("policy", "drop"),
        output_dir=str(tmp_path / "prepared"),
        required_columns=("answer",),
        # the counts are the subject here: a prompt over max_prompt_length is dropped and counted, never refused
        max_dropped_fraction=settings.pop("max_dropped_fraction", 1.0),
        **settings,
    )
    folder, _ = prepare_dataset(cfg, log=lambda *_: None)
    return folder, json.loads((folder / REPORT).read_text())


def trl_prompt_lengths(prompts: list, template: str | None = None, **chat_template_kwargs) -> list[int]:
    """TRL 1.16's GRPOTrainer._tokenize_prompts itself, on a stand-in trainer holding the tokenizer."""
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    if template:
        tok.chat_template = template
    stub = types.SimpleNamespace(
        processing_class=tok, _is_vlm=False, environment_factories=None, tools=None, chat_template=None
    )
    stub.chat_template_kwargs = chat_template_kwargs
    return [len(ids) for ids in GRPOTrainer._tokenize_prompts(stub, prompts)[0]]


def test_prompts_are_counted_as_trl_tokenizes_them_and_kept_unchanged(tmp_path):
    rows = [{"prompt": chat("The key is 1. " * k + "Key?"), "answer": str(k), "source": "s"} for k in (1, 3, 20)]
    folder, report = prepare(tmp_path, rows)
    lengths = trl_prompt_lengths([r["prompt"] for r in rows])
    assert lengths[0] < lengths[1] <= 64 < lengths[2]  # the third is over max_prompt_length 64
    kept = load_from_disk(str(folder / DATASET))
    assert kept.to_list() == rows[:2]  # every column as written, in order, untokenized
    assert report["prompts"]["prompt_tokens"] == sum(lengths[:2])
    assert report["prompts"]["prompt_tokens_max"] == lengths[1]
    assert report["documents_dropped_by_reason"]["too_long"] == 1
    assert report["tokens_dropped"] == lengths[2]  # tokens_in = tokens_out + tokens_dropped


# a generation prompt that grows with a template keyword, as Qwen3's does with `enable_thinking: false`
THINKING_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}"
    "assistant: {% if enable_thinking is defined and not enable_thinking %}<think> </think> {% endif %}{% endif %}"
)


def test_prompts_are_counted_with_the_recipes_chat_template_kwargs(tmp_path):
    """`chat_template_kwargs` reach the count as TRL passes them at generation; without them a prompt counted at the
    limit reached generation longer than `max_prompt_length` (a Qwen3 GRPO rehearsal stopped mid-run)."""
    (tmp_path / "template.jinja").write_text(THINKING_TEMPLATE)
    rows = [{"prompt": chat("The key is 1. " * k + "Key?"), "answer": str(k)} for k in (1, 2)]
    trl = trl_prompt_lengths([r["prompt"] for r in rows], THINKING_TEMPLATE, enable_thinking=False)
    assert trl != trl_prompt_lengths([r["prompt"] for r in rows], THINKING_TEMPLATE)  # the keyword adds tokens
    _, report = prepare(
        tmp_path, rows, chat_template=str(tmp_path / "template.jinja"), chat_template_kwargs={"enable_thinking": False}
    )
    assert report["prompts"]["prompt_tokens"] == sum(trl)
    assert report["prompts"]["prompt_tokens_max"] == max(trl)


def test_text_prompts_are_counted_by_the_plain_tokenizer(tmp_path):
    rows = [{"prompt": "The key is 7. What is it?", "answer": "7"}]
    _, report = prepare(tmp_path, rows)
    assert report["prompts"]["prompt_tokens"] == trl_prompt_lengths([rows[0]["prompt"]])[0]
    assert report["prompts"]["conversational"] is False


def test_bad_rows_are_dropped_with_their_line(tmp_path):
    rows = [
        {"prompt": "fine", "answer": "1"},
        {"prompt": "", "answer": "1"},
        {"question": "no prompt column", "answer": "1"},
        {"prompt": "no answer column"},
        {"prompt": [{"role": "user"}], "answer": "1"},
        {"prompt": 42, "answer": "1"},
    ] + [{"prompt": f"fine {i}", "answer": "1"} for i in range(100)]
    _, report = prepare(tmp_path, rows, max_dropped_fraction=0.5)
    by = report["documents_dropped_by_reason"]
    assert (by["empty"], by["malformed"], report["documents_out"]) == (1, 4, 101)
    examples = " ".join(report["examples"]["malformed"])
    assert "prompts.jsonl:3" in examples and "no `prompt` column" in examples
    assert "prompts.jsonl:4" in examples and "`answer`" in examples


def test_mixed_prompt_kinds_and_cut_prompts_are_refused(tmp_path):
    rows = [{"prompt": "text", "answer": "1"}, {"prompt": chat("chat"), "answer": "1"}]
    _, report = prepare(tmp_path, rows, max_dropped_fraction=0.5)
    assert "mixes text and conversational" in report["examples"]["malformed"][0]
    with pytest.raises(PrepError, match="would cut a prompt"):
        prepare(tmp_path, rows, policy="truncate")


def test_group_tokens_with_and_without_prefix_sharing():
    # 2 prompts of 100 and 300 tokens, G=4 completions of 10: alone 4 x (400 + 2 x 10); shared 400 + 2 x 4 x 10
    assert group_tokens(400, 2, 4, 10) == {"tokens_unshared": 1680, "tokens_shared": 480, "saving": 0.714286}
