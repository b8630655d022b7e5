"""The rules of a `trainer: grpo` recipe (longctx/config/rules/trainers/grpo.py): each refuses, before launch and by
name, one
recipe the long-context GRPO trainer cannot run as written; the tiny recipe passes them all."""

import pytest

from tests.helpers.fixtures.recipe_rules import refusal

TINY = "recipes/smollm2-135m/grpo-passkey-cpu-sp3.yaml"


def problems(*overrides: str, recipe: str = TINY) -> str:
    return refusal(recipe, *overrides)


def test_the_tiny_recipe_passes():
    assert problems() == ""


@pytest.mark.parametrize(
    "overrides, key",
    [
        (("--loss_type", "ppo"), "`loss_type`"),
        (("--sync_ref_model", "true"), "`sync_ref_model`"),  # an option the trainer lists as not computed
        (("--pad_to_multiple_of", "1024"), "`pad_to_multiple_of`"),  # TRL's tensor padding: the rows are ours
        (("--gradient_checkpointing", "true", "--gradient_checkpointing_kwargs", '{"selective":true}'), "`selective`"),
        (("--entropy_coef", "0.01"), "`entropy_coef`"),  # refused under sp > 1 only (sp=3 here)
        (("--allow_cross_document_attention", "true"), "`allow_cross_document_attention`"),
        (("--prepare_data", "packed"), "`prepare_data`"),
        (("--prepare_data", "off"), "`prepare_data`"),
        (("--long_document_policy", "truncate"), "`long_document_policy`"),
        (("--dataset_format", "text"), "`dataset_format`"),
        (("--max_prompt_length", "0"), "`max_prompt_length`"),
        (("--reward_funcs", "no_such_module:reward"), "`reward_funcs`"),
        (("--reward_funcs", "OpenAssistant/reward-model-deberta-v3-large-v2"), "reward model"),
        (("--use_vllm", "true"), "`use_vllm`"),  # vLLM on a CPU recipe
        (("--use_vllm", "true", "--vllm_max_model_length", "200"), "`vllm_max_model_length`"),
        (("--use_vllm", "true", "--vllm_mode", "remote"), "`vllm_mode`"),
    ],
)
def test_each_rule_names_its_key(overrides, key):
    assert key in problems(*overrides)


def test_missing_rewards_are_refused_with_an_example():
    found = problems("--reward_funcs", "")
    assert "`reward_funcs`: is not set" in found and "passkey_exact_match" in found


def test_colocated_vllm_with_config_overrides_is_refused():
    """TRL 1.16 builds the colocated engine from the model's own config.json: a longer rope in the recipe's
    overrides would not reach it."""
    found = problems("--use_vllm", "true", "--model_config_overrides", '{"max_position_embeddings": 16384}')
    assert "`model_config_overrides`" in found and "LLM(model=model.name_or_path)" in found
    served = problems("--use_vllm", "true", "--vllm_mode", "server", "--model_config_overrides", '{"a": 1}')
    assert "`model_config_overrides`" not in served  # the server is started by the user, with its own config


def test_the_rules_only_speak_for_grpo_recipes():
    assert problems(recipe="recipes/tiny-llama/dpo-2k-cpu-sp2.yaml") == ""


@pytest.mark.parametrize("subcommand", ["sft", "dpo"])
def test_the_other_targets_refuse_a_grpo_recipe_naming_make_grpo(subcommand, capsys):
    from longctx.commands.sft import main as launch_main

    with pytest.raises(SystemExit):
        launch_main([TINY, "--dry-run"], subcommand=subcommand)
    assert "run it with `make grpo`" in capsys.readouterr().err


def test_make_grpo_launches_the_grpo_entrypoint_on_its_mesh(capsys):
    from longctx.cli import main

    assert main(["grpo", "tiny-grpo", "--dry-run"]) == 0
    line = capsys.readouterr().out
    assert "--config_file accelerate_configs/cpu-sp3.yaml" in line and "recipes/grpo.py --config" in line
    assert "smollm2-135m/grpo-passkey-cpu-sp3.yaml" in line


@pytest.mark.parametrize("trainer, recipe", [("grpo", TINY), ("dpo", "recipes/tiny-llama/dpo-2k-cpu-sp2.yaml")])
def test_rows_balanced_by_work_are_sft_only(trainer, recipe):
    """`balance_rows: work` reorders tokenized SFT rows by modeled work; a DPO or GRPO recipe asking for it (or for a
    `balance_window`, which moves nothing when `auto` is off for them) is refused by name; SFT accepts both."""
    assert "`balance_rows`: is `work`" in problems("--balance_rows", "work", recipe=recipe)
    assert "`balance_window`" in problems("--balance_window", "4", recipe=recipe)
    sft = "recipes/tiny-llama/sft-2k-cpu-sp2.yaml"
    assert problems("--balance_rows", "work", "--balance_window", "4", recipe=sft) == ""


def test_model_features_the_trainer_refuses_are_refused_before_launch():
    """Qwen3.5's linear attention and gpt-oss's router aux term: the trainer refused them when built
    (longctx/training/rl/support.py) after validate had passed them."""
    assert "linear-attention layers (Qwen3.5's Gated DeltaNet)" in problems("--model_name_or_path", "Qwen/Qwen3.5-27B")
    aux = problems("--model_name_or_path", "openai/gpt-oss-20b")
    assert "`router_aux_loss_coef`: is unset, so TRL takes the model config's 0.9" in aux and "GRPO loss" in aux
    coef_off = problems("--model_name_or_path", "openai/gpt-oss-20b", "--router_aux_loss_coef", "0.0")
    assert "router_aux_loss_coef" not in coef_off


EVAL_ACROSS_RANKS = ["--config", "tests/recipes/grpo-parity.yaml", "--dataset_name", "recipes/assets/tiny-haystack",
                     "--eval_strategy", "steps", "--eval_steps", "1", "--per_device_eval_batch_size", "2",
                     "--eval_holdout", "2"]  # fmt: skip


def test_an_in_process_parse_counts_the_launchs_ranks_in_trls_batch_checks():
    """2 eval prompts a rank x 2 ranks fill a group of 4: `make data` and `validate` parse in one process, where
    TRL's GRPOConfig counted world size 1 and refused what the launch runs (and sized the generation batch for one
    process). On one rank the same batch is refused, by TRL's own check."""
    from longctx.config.recipe import RecipeError, parse_recipe

    _, args, _ = parse_recipe(EVAL_ACROSS_RANKS)
    assert args.generation_batch_size == 2 * 2 * 2  # per rank x ranks x accumulation, as in the launch
    assert args.world_size == 1  # outside the parse: this process's own
    with pytest.raises(RecipeError, match=r"global eval batch size \(2 \* 1\)"):
        parse_recipe([*EVAL_ACROSS_RANKS, "--accelerate_config", "accelerate_configs/cpu-sp1.yaml"])
