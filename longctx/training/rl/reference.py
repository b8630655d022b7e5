"""The reference model of GRPO's KL term (`beta` > 0): the starting model, built from the recipe, run live.

Why not TRL's: GRPOTrainer builds its reference with `create_model_from_path(<the policy's name or path>)`, which
loads weights from that path: a recipe with `model_init: random` has none there, and a recipe's
`model_config_overrides` (e.g. the rope scaling of a 128K recipe) would be dropped, so the reference would score
completions with another model than the one training started from. The entrypoint builds the reference with the
policy's builder (longctx/training/model_build.py `load_recipe_model`) and the trainer prepares it here: the
policy's per-model fixes (longctx/training/model_fixes.py `prepare_model`: document isolation, prefix sharing,
...), then as TRL prepares its own: dropout off when the recipe says so, TRL's fused LM head at the sampling
temperature, a DeepSpeed inference engine (ZeRO-3 shards it) or accelerate's evaluation wrapper. Under LoRA there
is no second model: TRL disables the adapter (`use_adapter`) and scores with the base. Online RL scores new
completions every step, so nothing is precomputed (unlike DPO's reference).
"""


def prepare_reference(trainer, ref_model):
    """The frozen reference ready to score on the training mesh (module docstring)."""
    from trl.models.utils import prepare_deepspeed
    from trl.trainer.utils import add_fused_lm_head, disable_dropout_in_model

    from longctx.training.model_fixes import prepare_model

    if ref_model is None:
        raise ValueError("`beta` > 0 without LoRA needs the reference model: pass `ref_model` (recipes/grpo.py)")
    prepare_model(ref_model, trainer.recipe, trainer.args, trainer.accelerator, role="reference")
    if trainer.args.disable_dropout:
        disable_dropout_in_model(ref_model)
    ref_model.requires_grad_(False)
    add_fused_lm_head(ref_model, temperature=trainer.temperature)
    if trainer.is_deepspeed_enabled:
        return prepare_deepspeed(ref_model, trainer.accelerator)
    return trainer.accelerator.prepare_model(ref_model, evaluation_mode=True)
