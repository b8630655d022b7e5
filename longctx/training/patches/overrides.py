"""The trainers' method overrides, fingerprinted like patches: no upstream object is replaced, but each override
calls the upstream method through `super()` and assumes what it does. What the three trainers share is overridden
once, by LongContextTrainerBase (longctx/training/trainer_base.py), and listed once here, with every upstream
method its `super()` reaches from SFTTrainer, DPOTrainer and GRPOTrainer (`method` and `also_overrides`); each
trainer's own overrides follow. `tests/launch/test_patches.py` requires every method a trainer class or the base
overrides to be listed here, and no upstream method to be overridden by two of our classes."""

from longctx.training.patches.entries import Override
from longctx.training.patches.grpo import GRPO_OVERRIDES, PREPARE_DEEPSPEED
from longctx.training.patches.registry import STAGE3, STAGE12

TRAINER_BASE = "longctx.training.trainer_base:LongContextTrainerBase"
TRAINER = "longctx.training.trainer:LongContextSFTTrainer"
DPO_TRAINER = "longctx.training.preference.trainer:LongContextDPOTrainer"
ULYSSES_ADAPTER = (
    "deepspeed.runtime.sequence_parallel.ulysses_sp.UlyssesSPDataLoaderAdapter",
    "1a44b6968527160c2b6bcf43bf0c8f8bfaead68e03d00fcd2d6dec47bc55951d",
)
ULYSSES_ADAPTER_FACTORY = (
    "accelerate.accelerator.Accelerator.deepspeed_ulysses_dl_adapter",
    "7a03bf63ad71b1b540e1d74e467220b9efc400b4400c2db9efcd98a36d3f4065",
)
GRPO_TRAIN_LOADER = (
    "trl.trainer.grpo_trainer.GRPOTrainer.get_train_dataloader",
    "2bffe5a57c539e17dafbdec15ca8fce48aaee94599bc7900fbbf5618ba1c7bb5",
)
GRPO_EVAL_LOADER = (
    "trl.trainer.grpo_trainer.GRPOTrainer.get_eval_dataloader",
    "301561e842dd5fbe2038f03888b92156c746b59fa80cfbb0869b5179f1d6d10c",
)
SFT_SAVE_CHECKPOINT_SHA = "b6ee0a370c266b6f6ada183d32719e4f689ac7a54086c1ec40a69a79e79921c6"  # DPOTrainer's alike
GRPO_SAVE_CHECKPOINT_SHA = "ec91bde1236491119dc68afed1d02f087b62b17f910521f8e4ba1360cc0b0e20"

# LongContextTrainerBase's overrides: one entry per upstream method name, for all three trainers
BASE_OVERRIDES: tuple[Override, ...] = (
    Override(
        method="transformers.trainer.Trainer.train",
        overridden_by=f"{TRAINER_BASE}.train",
        why="sets DeepSpeed's universal checkpoint loading before it builds the engine (all three trainers)",
        written_against="transformers==5.23.0",
        source_sha256="9a3c2bcd066d8f990115e3f396d938cc47154518c4758e3438444b3f57f2b1b0",
    ),
    Override(
        method="transformers.trainer.Trainer.get_train_dataloader",
        overridden_by=f"{TRAINER_BASE}.get_train_dataloader",
        why="SFT and DPO (`loads_sp_group_rows`), sp x dp: the prepared loader's shard is relabelled "
        "(sequence_parallel/data_order.py) so each step trains a dp-only run's rows; relies on accelerate's shard "
        "sampler reading `process_index` at iteration time. SFT's `balance_rows`: the loader's own sampler "
        "(accelerate's seeded shuffle, its epoch set through `set_epoch`) is wrapped by the work-balanced one "
        "through `set_sampler` (training/data/balance.py); "
        "GRPO's loader (TRL's repeat sampler) is returned as it is",
        written_against="transformers==5.23.0, accelerate==1.15.0, trl==1.16.0",
        source_sha256="205a99685f8facd98a273c284296c1dc5b6a598499afbfaefd5dc1d363425771",
        also_overrides=(GRPO_TRAIN_LOADER,),
        relies_on=(
            (
                "accelerate.data_loader.BatchSamplerShard._iter_with_no_split",
                "4e3931c05d9c5141334d91747ef99f2842238006ae56457ca9985f245bd4a3ed",
            ),
            (
                "accelerate.data_loader.DataLoaderShard.set_sampler",
                "d728ed60b41c7341b72d325a71cf0950da27a8892ec4e30e57ad920984673046",
            ),
            (
                "accelerate.data_loader.DataLoaderShard.set_epoch",
                "07cce703acb8d151af63e62e991f8d8ce29be45e860ccaade1f45e4957511bb4",
            ),
            (
                "accelerate.data_loader.SeedableRandomSampler.__iter__",
                "1e8040721b7cbbf5d95347bd7a7e52cfe447eef32c99322a4e4c048013637f85",
            ),
        ),
    ),
    Override(
        method="transformers.trainer.Trainer._prepare_for_training",
        overridden_by=f"{TRAINER_BASE}._prepare_for_training",
        why="SFT and DPO: the SP dataloader adapter it builds is rebuilt as ResumableSPAdapter (a subclass that "
        "forwards `set_epoch` and skips resumed micro-steps; uses the adapter's `dl`, `iter`, `micro_batches`), "
        "which `_run_epoch` then iterates; DPO's reference pass runs on the engine it built (after a resumed "
        "checkpoint was loaded into it). GRPO: run inside rl/ulysses.py's one-row registration, the adapter "
        "unwrapped back to the prompt loader",
        written_against="transformers==5.23.0, accelerate==1.15.0, deepspeed==0.19.8",
        source_sha256="f55950593d7e10c0034044f9f6d37943f6d034bab5d123ae9810cf35735f3c93",
        relies_on=(
            ULYSSES_ADAPTER,
            ULYSSES_ADAPTER_FACTORY,
            (
                "transformers.trainer.Trainer._run_epoch",
                "31aff00f34c302a241b458727e59ae4befab906c51632831b90f6dac4357b823",
            ),
            PREPARE_DEEPSPEED,
        ),
    ),
    Override(
        method="transformers.trainer.Trainer.get_batch_samples",
        overridden_by=f"{TRAINER_BASE}.get_batch_samples",
        why="also counts on all ranks what the step's loss is a mean over: SFT's label tokens (`shift_labels`) "
        "for the token-weighted SP loss, DPO's pairs; nothing for GRPO",
        written_against="transformers==5.23.0",
        source_sha256="0b3727386f73f67053b12b91e01c69673c8baf57e9a68769220a25515c468f94",
    ),
    Override(
        method="transformers.trainer.Trainer.get_eval_dataloader",
        overridden_by=f"{TRAINER_BASE}.get_eval_dataloader",
        why="SFT and DPO: eval rows split across ranks (padding rows without labels or pairs, not repeats) and, "
        "under SP, wrapped in DeepSpeed's SP dataloader adapter like the train dataloader; GRPO: TRL's",
        written_against="transformers==5.23.0, accelerate==1.15.0, trl==1.16.0",
        source_sha256="dd1c9287ad46f5ae6fdc17fa93304b41fc87e6b6d4f157d1415741cd9e44c77b",
        also_overrides=(GRPO_EVAL_LOADER,),
        relies_on=(ULYSSES_ADAPTER_FACTORY,),
    ),
    Override(
        method="transformers.trainer.Trainer.evaluation_loop",
        overridden_by=f"{TRAINER_BASE}.evaluation_loop",
        why="SFT and DPO: loss only (no logits gathered) and `eval_loss` replaced by the mean over every label "
        "token (SFT) or held-out pair (DPO); relies on DPOTrainer.prediction_step calling compute_loss",
        written_against="transformers==5.23.0, trl==1.16.0",
        source_sha256="a0fe4d6536f8a84ac906705a6de328c351dc2ac9ec7016d9577581fb6c5a43c3",
        relies_on=(
            (
                "trl.trainer.dpo_trainer.DPOTrainer.prediction_step",
                "1b6b7f23f5e020942e49f5752e7af4f8a0283d08584e6e735c8172a5ad1ae9a8",
            ),
        ),
    ),
    Override(
        method="trl.trainer.sft_trainer.SFTTrainer._save_checkpoint",
        overridden_by=f"{TRAINER_BASE}._save_checkpoint",
        why="atomic checkpoints (training/checkpoints/commit.py): marks the folder in progress, runs it (TRL's model "
        "card, GRPO's adaptive-entropy state, then the Trainer's save) with `save_total_limit` set to None, so the "
        "Trainer's rotation (which deletes old checkpoints before the new one is complete, on rank 0 alone) is off, "
        "then marks the folder complete "
        "once every rank's files are written and rotates; relies on the Trainer saving into "
        "`output_dir/checkpoint-{global_step}` and on `_maybe_log_save_evaluate` saving whenever `should_save` is "
        "set (a preemption sets it: training/faults/run_guard.py)",
        written_against="trl==1.16.0, transformers==5.23.0",
        source_sha256=SFT_SAVE_CHECKPOINT_SHA,
        also_overrides=(
            ("trl.trainer.dpo_trainer.DPOTrainer._save_checkpoint", SFT_SAVE_CHECKPOINT_SHA),
            ("trl.trainer.grpo_trainer.GRPOTrainer._save_checkpoint", GRPO_SAVE_CHECKPOINT_SHA),
        ),
        relies_on=(
            (
                "transformers.trainer.Trainer._save_checkpoint",
                "a9111e30faa9933986e022e56b5af81fd990356db64d727b4c320c852283bf3b",
            ),
            (
                "transformers.trainer.Trainer._maybe_log_save_evaluate",
                "af101534f0f7b2d7fa6984044242e6f125c51092b05c755566c14823f2b43696",
            ),
            (
                "transformers.trainer_utils.rotate_checkpoints",
                "4aac03e039844595f9446ef8f68a34e2e83086b6bdd65d146c5c15c32cb912e3",
            ),
        ),
    ),
    Override(
        method="transformers.trainer.Trainer._save",
        overridden_by=f"{TRAINER_BASE}._save",
        why="also writes the effective model config (the recipe's overrides, e.g. its rope) beside a LoRA adapter, "
        "which PEFT saves without one; relies on save_model calling _save for the output and every checkpoint",
        written_against="transformers==5.23.0, peft==0.21.2",
        source_sha256="b136889e8792837686efc159b5297c5cc60d68d75102d0b0c643c136c57223ce",
        relies_on=(
            (
                "transformers.trainer.Trainer.save_model",
                "705727ee10c8f24f7a768d9905db4c488931b05fcc42b5ee9e17333419a4797c",
            ),
            (
                "peft.peft_model.PeftModel.save_pretrained",
                "9f3bb891b8baed3d24c1aedbec9237c60ed65c36913baec4d6ca199d719b9a76",
            ),
        ),
    ),
)

# The SFT trainer's own overrides (longctx/training/trainer.py)
SFT_OVERRIDES: tuple[Override, ...] = (
    Override(
        method="trl.trainer.sft_trainer.SFTTrainer.__init__",
        overridden_by=f"{TRAINER}.__init__",
        why="the per-model fixes run after it: it has loaded the model and applied PEFT and Liger",
        written_against="trl==1.16.0",
        source_sha256="90b61e42b6900b05ae668cb2aeaee6c8ef35e62f78eacebb4ec2a7886bf33255",
    ),
    Override(
        method="trl.trainer.sft_trainer.SFTTrainer.compute_loss",
        overridden_by=f"{TRAINER}.compute_loss",
        why="in eval under SP, the training loss path (label-token-weighted across the SP group) instead of a "
        "per-shard loss; every eval call also adds to the token-weighted eval loss; in training the loss is shown "
        "to the run guard (training/faults/run_guard.py: a NaN or Inf one stops or skips the step)",
        written_against="trl==1.16.0",
        source_sha256="ca448211ff653fe621b45498c79bf4f94b26286146442c361f0a8c3592b3b4c1",
    ),
)

# ---- preference training (longctx/training/preference/trainer.py): TRL's DPOTrainer under SP
DPO_OVERRIDES: tuple[Override, ...] = (
    Override(
        method="trl.trainer.dpo_trainer.DPOTrainer.__init__",
        overridden_by=f"{DPO_TRAINER}.__init__",
        why="runs it with `precompute_ref_log_probs` set while the reference is precomputed or absent, so it builds "
        "no second model and no TRL precompute pass (which would run before the engine, without SP); the per-model "
        "fixes run after it, once it has applied PEFT and added the fused LM head",
        written_against="trl==1.16.0",
        source_sha256="632f447c71dcb04361800303be2192d8e48b2b3ccffd415fbf639c03a5dfd84f",
        relies_on=(
            (
                "trl.trainer.utils.add_fused_lm_head",
                "422d009f04b66659982f9545a90d560bdcc27fde3268de203d0c5c6d1449d211",
            ),
        ),
    ),
    Override(
        method="transformers.trainer.Trainer.create_accelerator_and_postprocess",
        overridden_by=f"{DPO_TRAINER}.create_accelerator_and_postprocess",
        why="a `frozen_model` reference gets the policy's per-model fixes (longctx/training/model_fixes.py) here: "
        "DPOTrainer.__init__ calls Trainer.__init__, which builds the accelerator in this method, before it hands "
        "the reference to TRL's own `deepspeed.initialize` (prepare_deepspeed), where no fix could still apply",
        written_against="transformers==5.23.0, trl==1.16.0",
        source_sha256="d649720bec7e782ad57f9126c98eb5cd3bc0ee59118f5445655f1a5744e436bc",
        relies_on=(
            ("trl.models.utils.prepare_deepspeed", "86d126e5d92c55d24a93f055b4c21656dbf11d26c01871518c60c2e80587ff2c"),
        ),
    ),
    Override(
        method="trl.trainer.dpo_trainer.DPOTrainer._prepare_dataset",
        overridden_by=f"{DPO_TRAINER}._prepare_dataset",
        why="rows data_prep packed (with `sequence_ids`) are used as they are; data_prep tokenized them as this "
        "method's `tokenize_fn` does (data_prep/trainers/preference.py), which "
        "tests/preference/test_preference_data.py compares",
        written_against="trl==1.16.0",
        source_sha256="35e349e8e8266df4a098b8c0b9949729e06d794f67dc24b666863f9f26e1bb55",
        relies_on=(
            ("trl.data_utils.extract_prompt", "34316f091f0b6179a02a4ddef16ca767f24fe9694b2865c0890e58016c21f4c6"),
            (
                "trl.data_utils.common_prefix_length",
                "34e85554d52b8011c30a25cca000048c3a0d10833d4c1b2ae013630225174d4c",
            ),
            ("trl.data_utils._tokenize", "5fc8cbcb4cacebc870c17a57f95786a8e21d89d875b042ea62e35d0b88d49380"),
        ),
    ),
    Override(
        method="trl.trainer.dpo_trainer.DPOTrainer._precompute_ref_logps",
        overridden_by=f"{DPO_TRAINER}._precompute_ref_logps",
        why="a no-op: the reference pass runs on the SP mesh in _prepare_for_training (preference/reference.py)",
        written_against="trl==1.16.0",
        source_sha256="f2c098c7da6ca701978f476021fbb9482837dee4b83cc04b98ca2a214e856e4d",
    ),
    Override(
        method="trl.trainer.dpo_trainer.DPOTrainer._compute_loss",
        overridden_by=f"{DPO_TRAINER}._compute_loss",
        why="answers' log-probs summed per sequence and all-reduced over the SP group (differentiable under ZeRO-3, "
        "constant other shards under ZeRO-2), the losses of TRL's formulas (and CPOTrainer's SimPO) weighted over "
        "the step's pairs, TRL's metrics per pair; relies on DPOTrainer.compute_loss calling it, on the fused head "
        "scoring pre-shifted `shift_labels`, on torch's all-reduce backward summing the ranks' gradients and on "
        "DPOTrainer.log averaging the `_metrics` lists",
        written_against="trl==1.16.0, torch==2.13.0, deepspeed==0.19.8",
        source_sha256="5e58a1699e0d76cd093095fa24cfe6ca5cb950fa73ad769d4e4c483d6ff722d2",
        relies_on=(
            (
                "trl.trainer.dpo_trainer.DPOTrainer.compute_loss",
                "c453890e84beb4cb26a59d98dc6c98d08b36b395417fa4856d3a456f6653ab46",
            ),
            (
                "trl.trainer.utils.add_fused_lm_head",
                "422d009f04b66659982f9545a90d560bdcc27fde3268de203d0c5c6d1449d211",
            ),
            (
                "torch.distributed.nn.functional._AllReduce.backward",
                "14f755ef0c3d064c04f63081b3b6eeadff18bb5f2838f16f36d318e86dc8453e",
            ),
            (
                "trl.trainer.dpo_trainer.DPOTrainer.log",
                "e80e122cfe5fd8ad2b36edb3fe106ed2c754fa24bb4c1f5e00a755aa72fe8481",
            ),
            (
                "trl.experimental.cpo.cpo_trainer.CPOTrainer.cpo_loss",
                "5b0c6188ab7e2fda06545ac1a0cd8aa92e552d4f7ef25501f18228c2234bbea3",
            ),
            (f"{STAGE12}.average_tensor", "6fd000d730e51e62a515e160f97b8981de8ce6edeace51882a12173297247c71"),
            (
                f"{STAGE3}._DeepSpeedZeroOptimizer_Stage3__avg_scatter_grads",
                "f392cb14952e5019ad97f5538a41f902e0e26dc278b6c7e1587c22835d892590",
            ),
            ("trl.trainer.utils.use_adapter", "edd0e493f99fa68595b34e5f8e26b7b19ad33c315470b53a659440695ef43657"),
        ),
    ),
)

OVERRIDES: tuple[Override, ...] = BASE_OVERRIDES + SFT_OVERRIDES + DPO_OVERRIDES + GRPO_OVERRIDES
