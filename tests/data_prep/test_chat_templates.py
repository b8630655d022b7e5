"""The training templates render exactly like the stock ones, and their markers cover what the assistant writes.

The stock templates are the ones shipped next to each architecture snapshot; every `messages` recipe must name
a training template whose rendering equals the stock rendering on sample conversations, while its
`{% generation %}` spans cover exactly the assistant's turns. Preflight refuses a template without markers.
"""

import pytest
from transformers.utils.chat_template_utils import render_jinja_template

from longctx.config.chat_templates import has_generation_markers, resolve_chat_template, stock_template
from longctx.config.paths import RECIPES_DIR
from longctx.config.topology import load_yaml_mapping

SPECIAL = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
TOOL_CALL = {"type": "function", "function": {"name": "lookup", "arguments": {"page": 3}}}
CONVERSATIONS = {
    "one turn": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}],
    "system and two turns": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "  Blue.  "},
        {"role": "user", "content": "Another?"},
        {"role": "assistant", "content": "Red."},
    ],
    "thinking in the content": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n4"},
        {"role": "user", "content": "3+3?"},
        {"role": "assistant", "content": "<think>easy</think>6"},
    ],
    "reasoning_content field": [
        {"role": "user", "content": "Why?"},
        {"role": "assistant", "content": "Because.", "reasoning_content": "think first"},
    ],
    "tool call": [
        {"role": "user", "content": "Find page 3."},
        {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
        {"role": "tool", "content": "page three"},
        {"role": "assistant", "content": "It says: page three."},
    ],
}


def messages_recipes() -> list[tuple[str, dict]]:
    out = []
    for path in sorted(RECIPES_DIR.rglob("*.yaml")):
        raw = load_yaml_mapping(path)
        if raw.get("dataset_format") == "messages":
            out.append((str(path.relative_to(RECIPES_DIR)), raw))
    return out


def render(template: str, conversation: list[dict], **kwargs) -> tuple[str, list]:
    rendered, spans = render_jinja_template(
        conversations=[conversation], chat_template=template, return_assistant_tokens_mask=True, **SPECIAL, **kwargs
    )
    return rendered[0], spans[0]


def test_every_messages_recipe_sets_a_training_template():
    recipes = messages_recipes()
    assert len(recipes) >= 7  # every GPU recipe but the 1M one trains on conversations
    for name, raw in recipes:
        path = resolve_chat_template(raw.get("chat_template_path"))
        assert path is not None, f"{name} sets no chat_template_path"
        assert has_generation_markers(path.read_text()), name


@pytest.mark.parametrize("recipe, raw", messages_recipes(), ids=[n for n, _ in messages_recipes()])
@pytest.mark.parametrize("case", sorted(CONVERSATIONS))
def test_training_template_renders_like_the_stock_one(recipe, raw, case):
    """Same text as the stock template; the marked spans are the assistant turns' text and end token."""
    conversation = CONVERSATIONS[case]
    stock, where = stock_template(raw["model_name_or_path"])
    assert "recipes/assets/architectures/" in where  # the shipped snapshot, not a download
    training = resolve_chat_template(raw["chat_template_path"]).read_text()
    for prompt in (False, True):
        assert (
            render(training, conversation, add_generation_prompt=prompt)[0]
            == render(stock, conversation, add_generation_prompt=prompt)[0]
        )
    text, spans = render(training, conversation)
    assert text == render(stock, conversation)[0]
    answers = [m for m in conversation if m["role"] == "assistant"]
    assert len(spans) == len(answers)
    # harmony (gpt-oss): <|return|> ends the last answer, <|end|> earlier ones, <|call|> a tool call; TRL's gpt-oss
    # training template marks each assistant branch from its `<|start|>assistant` header, which the model itself
    # emits between its analysis and final messages
    # Gemma 4: '<turn|>' and its newline end a turn; a tool call ends with '<tool_call|>', and the tool's response
    # (embedded in the same turn) is the environment's, outside the span
    ends = ("<|eot_id|>", "<|im_end|>", "<|return|>", "<|end|>", "<|call|>", "<turn|>\n", "<tool_call|>")
    for (start, end), message in zip(spans, answers, strict=True):
        marked = text[start:end]
        assert marked.endswith(ends), marked  # the end-of-turn token is trained: the model learns to stop
        assert (message["content"].strip().split("</think>")[-1].strip() or "lookup") in marked
        assert "<|start_header_id|>" not in marked and "<|im_start|>" not in marked  # headers are prompt
        assert "<|start|>user" not in marked and "<|start|>functions" not in marked


def test_stock_templates_have_no_markers():
    """Why the recipes need the key at all: the models' own templates cannot give assistant masks."""
    for _, raw in messages_recipes():
        assert not has_generation_markers(stock_template(raw["model_name_or_path"])[0])


def preflight_problems(capsys, tmp_path, name: str, **changes) -> list[dict]:
    """Preflight's JSON findings for a copy of a shipped recipe with `changes` (None deletes a key)."""
    import json

    import yaml

    from longctx.commands.validate import main

    raw = yaml.safe_load((RECIPES_DIR / f"{name}.yaml").read_text())
    for key, value in changes.items():
        raw.pop(key) if value is None else raw.__setitem__(key, value)
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(raw))
    main([str(tmp_path / "recipe.yaml"), "--json", "--intended"])
    return [p for p in json.loads(capsys.readouterr().out)["problems"] if p["key"] == "chat_template_path"]


@pytest.mark.parametrize("name", ["qwen3-8b/sft-128k-sp4"])
def test_preflight_refuses_a_messages_recipe_without_markers(capsys, tmp_path, name):
    assert preflight_problems(capsys, tmp_path, name) == []  # as shipped
    (unset,) = preflight_problems(capsys, tmp_path, name, chat_template_path=None)
    assert unset["severity"] == "error" and "recipes/assets/architectures/" in unset["message"]
    assert "recipes/assets/chat_templates/" in unset["fix"] and "-training.jinja" in unset["fix"]
    stock = f"recipes/assets/architectures/{yaml_model(name)}/chat_template.jinja"
    (no_markers,) = preflight_problems(capsys, tmp_path, name, chat_template_path=stock)
    assert no_markers["severity"] == "error" and "no {% generation %} markers" in no_markers["message"]
    (missing,) = preflight_problems(capsys, tmp_path, name, chat_template_path="no-such-template")
    assert "qwen3-training" in missing["message"]  # lists the templates there are


def yaml_model(name: str) -> str:
    return load_yaml_mapping(RECIPES_DIR / f"{name}.yaml")["model_name_or_path"]


def test_data_prep_workers_mask_with_the_recipes_template(tmp_path):
    """`chat_template_path` replaces the tokenizer's template whatever data_prep's tokenizer thread count."""
    from data_prep.tokens.encoding import Encoder
    from longctx.config.families.llama import LLAMA
    from longctx.cpu_rehearsal.stand_in_tokenizer import stand_in_tokenizer

    stock, _ = stock_template("meta-llama/Llama-3.1-8B-Instruct")
    stand_in_tokenizer(LLAMA.stand_in_tokens, ["Hello there. " * 20], stock).save_pretrained(tmp_path)
    training = str(resolve_chat_template("llama3.1-instruct-training"))
    jobs = [("messages", [CONVERSATIONS["system and two turns"]])]
    masks = []
    for num_proc in (1, 2):
        encoder = Encoder(str(tmp_path), num_proc, training)
        try:
            _job, encoded = next(encoder.map(iter(jobs)))
        finally:
            encoder.close()
        masks.append(encoded.trainable.tolist())
    assert masks[0] == masks[1] and sum(masks[0]) > 0


def test_qwen35_thinking_block_is_trained_only_where_the_stock_template_renders_it():
    """Qwen3.5's template renders a `<think>` block on every assistant turn after the last user query (an empty one
    when there is no reasoning) and drops the reasoning of earlier turns; the training template trains exactly that
    text: the last turn's span holds its thinking block, the earlier turn's span has no trace of its reasoning."""
    training = resolve_chat_template("qwen3.5-training").read_text()
    stock, _ = stock_template("Qwen/Qwen3.5-27B")
    conversation = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "add two and two"},
        {"role": "user", "content": "3+3?"},
        {"role": "assistant", "content": "6", "reasoning_content": "add three and three"},
        {"role": "assistant", "content": "Done."},
    ]
    text, spans = render(training, conversation)
    assert text == render(stock, conversation)[0]
    first, last, after = (text[s:e] for s, e in spans)
    assert first == "4<|im_end|>" and "add two" not in text  # earlier reasoning is not rendered, so not trained
    assert last == "<think>\nadd three and three\n</think>\n\n6<|im_end|>"
    assert after == "<think>\n\n</think>\n\nDone.<|im_end|>"  # after the last query: an empty block, trained
    prompt = render(training, conversation[:3], add_generation_prompt=True)[0]
    assert prompt.endswith("<|im_start|>assistant\n<think>\n")  # thinking on by default (Qwen3.5-4B and larger)
    no_think = render(training, conversation[:3], add_generation_prompt=True, enable_thinking=False)[0]
    assert no_think.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
