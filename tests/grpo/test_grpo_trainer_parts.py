"""The GRPO trainer's parts that need no launch: its refusals, its config, and how micro-steps are dealt.

Refusals: every key, recipe key and model feature longctx/config/trainers/rl.py lists is refused by name with its fix
(longctx/training/rl/support.py), at the sp where it is refused only; a prompt over `max_prompt_length` is refused at
generation. Config: TRL's sp refusal is lifted for Ulysses SP and kept for context parallelism. Dealing
(longctx/training/rl/batches.py): with prefix sharing, a scored generation batch whose prompt groups arrive
interleaved is dealt so each micro-step holds whole groups, every per-completion tensor moving with its completion.
"""

from types import SimpleNamespace

import pytest
import torch

from longctx.config.recipe import RecipeError
from longctx.config.trainers.rl import REFUSED_OPTIONS, REFUSED_RECIPE_KEYS, REFUSED_UNDER_SP, GRPORecipeConfig
from longctx.training.rl.batches import deal_groups
from longctx.training.rl.support import model_problems, option_problems, recipe_problems


def config(**keys) -> GRPORecipeConfig:
    return GRPORecipeConfig(output_dir="unused", use_cpu=True, report_to="none", num_generations=2, **keys)


@pytest.mark.parametrize("key, fine, why, fix", REFUSED_OPTIONS, ids=[k for k, *_ in REFUSED_OPTIONS])
def test_every_refused_option_is_named_with_its_fix(key, fine, why, fix):
    args = SimpleNamespace(**{k: f for k, f, *_ in REFUSED_OPTIONS + REFUSED_UNDER_SP}, loss_type="dapo")
    assert option_problems(args, sp=1) == []
    setattr(args, key, "other" if isinstance(fine, str | type(None)) else not fine)
    [problem] = option_problems(args, sp=1)
    assert f"`{key}`" in problem and fix in problem


@pytest.mark.parametrize("key, fine, why, fix", REFUSED_UNDER_SP, ids=[k for k, *_ in REFUSED_UNDER_SP])
def test_sp_only_refusals_hold_under_sp_only(key, fine, why, fix):
    args = SimpleNamespace(**{k: f for k, f, *_ in REFUSED_OPTIONS + REFUSED_UNDER_SP}, loss_type="dapo")
    setattr(args, key, 0.01 if isinstance(fine, float) else not fine)
    assert option_problems(args, sp=1) == []
    [problem] = option_problems(args, sp=2)
    assert f"`{key}`" in problem and "under sp=2" in problem and fix in problem


def test_a_loss_type_trl_does_not_have_is_refused():
    args = SimpleNamespace(**{k: f for k, f, *_ in REFUSED_OPTIONS}, loss_type="ppo")
    [problem] = option_problems(args, sp=1)
    assert "`loss_type` 'ppo'" in problem and "dapo" in problem


def test_cross_document_attention_is_refused():
    key, *_ = REFUSED_RECIPE_KEYS[0]
    assert recipe_problems(SimpleNamespace(**{key: False})) == []
    assert f"`{key}`" in recipe_problems(SimpleNamespace(**{key: True}))[0]


def test_model_features_refused():
    def model(**text):
        config = SimpleNamespace(**text)
        return SimpleNamespace(config=SimpleNamespace(get_text_config=lambda: config))

    assert model_problems(model(layer_types=["full_attention"]), False, False) == []
    assert "router_aux_loss_coef: 0.0" in model_problems(model(), True, False)[0]
    assert (
        "Gated DeltaNet" in model_problems(model(layer_types=["linear_attention", "full_attention"]), False, False)[0]
    )
    assert "multimodal" in model_problems(model(), False, True)[0]


def test_a_prompt_over_max_prompt_length_is_refused():
    from longctx.training.rl.trainer import LongContextGRPOTrainer

    trainer = SimpleNamespace(args=config(max_prompt_length=5), recipe=SimpleNamespace(config_source="r.yaml"))
    LongContextGRPOTrainer.check_prompt_lengths(trainer, [[1] * 5, [2] * 3])
    with pytest.raises(RecipeError, match="`max_prompt_length` is 5, but a prompt of 6 tokens"):
        LongContextGRPOTrainer.check_prompt_lengths(trainer, [[1] * 6])


def test_trls_sp_refusal_is_lifted_for_ulysses_only():
    from accelerate.parallelism_config import ParallelismConfig

    ulysses = ParallelismConfig(sp_size=2, sp_backend="deepspeed")
    assert config(parallelism_config=ulysses).parallelism_config is ulysses
    with pytest.raises(ValueError, match="does not support sequence-dim parallelism"):
        config(parallelism_config=ParallelismConfig(cp_size=2))


def test_max_length_is_prompt_plus_completion():
    assert config(max_prompt_length=100, max_completion_length=28).max_length == 128
    assert config(max_completion_length=28).max_length is None


def scored_batch():
    """Eight completions of two prompts, interleaved, as TRL's scoring returns them (prompts left-padded)."""
    prompts = [[5, 6, 7], [8, 9]] * 4
    lengths = [3, 1, 4, 2, 2, 4, 1, 3]
    width_p, width_c = 3, 4
    ids = torch.tensor([[0] * (width_p - len(p)) + p for p in prompts])
    prompt_mask = torch.tensor([[0] * (width_p - len(p)) + [1] * len(p) for p in prompts])
    completion_mask = (torch.arange(width_c)[None] < torch.tensor(lengths)[:, None]).long()
    completion_ids = (10 * torch.arange(8)[:, None] + torch.arange(width_c)) * completion_mask
    return {
        "prompt_ids": ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.arange(8, dtype=torch.float),
        "old_per_token_logps": -completion_ids.float() * completion_mask,
        "num_items_in_batch": completion_mask.sum(),
    }


def test_micro_steps_hold_whole_prompt_groups():
    batch = scored_batch()
    steps = deal_groups(batch, steps=2, per_rank=4, group=None, sp_rank=0, seed=1, pad_id=0)
    seen = set()
    for step in steps:
        real = step["prompt_mask"].bool()
        prompts = {tuple(step["prompt_ids"][i][real[i]].tolist()) for i in range(4)}
        assert len(prompts) == 1, "one prompt group per micro-step"
        assert step["num_items_in_batch"] == batch["num_items_in_batch"]
        for i in range(4):
            k = int(step["advantages"][i])  # the completion's original index: everything moved with it
            n = int(step["completion_mask"][i].sum())
            assert step["completion_ids"][i, :n].tolist() == batch["completion_ids"][k, :n].tolist()
            assert torch.equal(step["old_per_token_logps"][i, :n], batch["old_per_token_logps"][k, :n])
            assert (step["completion_mask"][i, n:] == 0).all()
            seen.add(k)
    assert seen == set(range(8))
