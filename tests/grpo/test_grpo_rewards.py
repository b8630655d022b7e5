"""Reward functions of a GRPO recipe: loaded by import path (longctx/config/trainers/reward_functions.py), refused by
name
when unusable, and the shipped verifiable rewards scored as their literature scores, through TRL's own call."""

import types

import pytest
import torch

from longctx.config.recipe import RecipeError
from longctx.config.trainers.reward_functions import required_columns
from longctx.training.rl.rewards import load_reward_functions
from longctx.training.rl.rewards.passkey import needle_recall, passkey_exact_match
from longctx.training.rl.rewards.qa import normalize_answer, qa_exact_match, qa_f1

PASSKEY = "longctx.training.rl.rewards.passkey:passkey_exact_match"


def refusal(paths) -> str:
    with pytest.raises(RecipeError) as exc:
        load_reward_functions(paths, "r.yaml")
    return str(exc.value)


def test_paths_load_in_order_one_string_or_a_list():
    qa = "longctx.training.rl.rewards.qa:qa_f1"
    assert load_reward_functions([PASSKEY, qa], "r.yaml") == [passkey_exact_match, qa_f1]
    assert load_reward_functions(PASSKEY, "r.yaml") == [passkey_exact_match]


def test_a_file_path_relative_to_the_root(tmp_path, monkeypatch):
    source = "def length(completions, **kwargs):\n    return [len(c) for c in completions]\n"
    (tmp_path / "my_rewards.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    (fn,) = load_reward_functions("my_rewards.py:length", "r.yaml")
    assert fn(completions=["ab", "abc"]) == [2, 3]


@pytest.mark.parametrize(
    "path, says",
    [
        ("nowhere.mod:fn", "no module `nowhere`"),
        ("longctx.training.rl.rewards.qa:qa_f2", "has no `qa_f2`; fix: use one of its callables: exact_match"),
        ("passkey_exact_match", "is not `module.path:function`"),
        ("OpenAssistant/reward-model-deberta-v3-large-v2", "names a reward model: reward models are not supported"),
        ("missing.py:fn", "no file"),
        ("longctx.training.rl.rewards.passkey:CLOSING", "not callable"),
        ("tests.grpo.test_grpo_rewards:no_kwargs", "takes no **kwargs, but TRL passes it prompts, completion_ids"),
        ("tests.grpo.test_grpo_rewards:RewardClass", "is a class"),
    ],
)
def test_unusable_paths_are_refused_naming_the_key_and_fix(path, says):
    found = refusal([PASSKEY, path])
    assert "`reward_funcs[1]`" in found and says in found and "fix:" in found


def test_no_reward_at_all_is_refused():
    assert "`reward_funcs` is not set" in refusal(None)


def no_kwargs(completions, answer):
    return [0.0 for _ in completions]


class RewardClass:
    def __init__(self, completions, **kwargs):
        pass


def test_required_columns_are_the_parameters_without_defaults():
    def fn(prompts, completions, answer, context=None, *, source, **kwargs):
        return []

    assert required_columns(fn) == ["answer", "source"]
    assert required_columns(passkey_exact_match) == ["answer"]


def test_passkey_exact_match_wants_the_key_and_nothing_else():
    completions = ["48213", " 48213.", "48213\n", "The pass key is 48213.", "48212", "48213 48213", ""]
    assert passkey_exact_match(completions, ["48213"] * 7) == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]


def test_conversational_completions_and_several_golds():
    chat = [[{"role": "assistant", "content": "Paris."}], [{"role": "assistant", "content": "Lyon"}]]
    assert passkey_exact_match(chat, [["paris", "Paris"], "Paris"]) == [1.0, 0.0]


def test_needle_recall_is_rulers_string_match_all():
    assert needle_recall(["keys: 11 and 33", "nothing"], [["11", "22", "33", "44"], "x"]) == [0.5, 0.0]


def test_qa_scores_as_squad():
    assert normalize_answer("The  Eiffel Tower!") == "eiffel tower"
    assert qa_exact_match(["an Eiffel tower.", "Tower"], [["Eiffel Tower", "la tour"], "Eiffel Tower"]) == [1.0, 0.0]
    # "the big red dog" vs "red dog": tokens {big, red, dog} and {red, dog}, 2 shared: P 2/3, R 1, F1 0.8
    assert qa_f1(["the big red dog", "cat"], ["red dog", "red dog"]) == pytest.approx([0.8, 0.0])


def test_rewards_run_through_trls_own_reward_call():
    """TRL 1.16's GRPOTrainer._calculate_rewards, the code that calls rewards in training, on a stand-in trainer:
    keyword arguments, the dataset's extra columns, a conversational prompt, two functions summed per column."""
    from trl import GRPOTrainer

    functions = load_reward_functions([PASSKEY, "longctx.training.rl.rewards.passkey:needle_recall"], "r.yaml")
    trainer = types.SimpleNamespace(
        accelerator=types.SimpleNamespace(device=torch.device("cpu"), gather=lambda t: t, is_main_process=True),
        reward_funcs=functions,
        reward_processing_classes=[None, None],
        reward_func_names=[f.__name__ for f in functions],
        state=types.SimpleNamespace(global_step=0),
        args=types.SimpleNamespace(report_to=[]),
        _log_completion_extra=lambda *a: None,
        _log_metric=lambda *a: None,
        environments=None,
    )
    prompt = [{"role": "user", "content": "The pass key is 123. What is the pass key?"}]
    inputs = [{"prompt": prompt, "answer": "123"}, {"prompt": prompt, "answer": "123"}]
    completions = [[{"role": "assistant", "content": "123"}], [{"role": "assistant", "content": "It is 123."}]]
    rewards = GRPOTrainer._calculate_rewards(trainer, inputs, [prompt, prompt], completions, [[1], [2]])
    assert rewards.tolist() == [[1.0, 1.0], [0.0, 1.0]]
