"""The GRPO trainer's registry entries (longctx/training/rl/): its two patches of DeepSpeed's Ulysses registration and
its method overrides of TRL's GRPOTrainer, fingerprinted like every other entry. registry.py's `PATCHES` and
overrides.py's `OVERRIDES` include them; check.py recomputes them."""

from longctx.training.patches.entries import Override, Patch

GRPO_TRAINER = "longctx.training.rl.trainer:LongContextGRPOTrainer"
GRPO = "trl.trainer.grpo_trainer.GRPOTrainer"
ULYSSES = "deepspeed.runtime.sequence_parallel.ulysses_sp.UlyssesSPAttentionHF"
REGISTER = (
    f"{ULYSSES}.register_with_transformers",
    "2db24401cfd942467ef19145ce0752ce7857501b1f75543cfd20e59b8d2c9142",
)
ULYSSES_FORWARD = (f"{ULYSSES}.forward", "c4832fb77b88faf837a26e365a37599db1089e0bb5f01debff0e9824928657f7")
PREPARE_DEEPSPEED = (
    "accelerate.accelerator.Accelerator._prepare_deepspeed",
    "32d86ff7e08a1f2d55a806375b1cdab3d57eff48b3eded9d3abd4ed9c1bab564",
)
FUSED_HEAD = (
    "trl.trainer.utils.add_fused_lm_head",
    "422d009f04b66659982f9545a90d560bdcc27fde3268de203d0c5c6d1449d211",
)
COMPUTE_LOSS = (f"{GRPO}.compute_loss", "a2d6ef8bd29c3e26be8d8b25fa03a298a7a7fa4a3abb851a52845bc16c0e54ce")
SCORE = (
    f"{GRPO}._generate_and_score_completions",
    "1fa48922792dcd5c72da155cfe99db477771a7c61cde15519fe8c86d0cdc0b65",
)
GRADIENT_AVERAGES = (
    (
        "deepspeed.runtime.zero.stage3.DeepSpeedZeroOptimizer_Stage3._DeepSpeedZeroOptimizer_Stage3__avg_scatter_grads",
        "f392cb14952e5019ad97f5538a41f902e0e26dc278b6c7e1587c22835d892590",
    ),
    (
        "deepspeed.runtime.zero.stage_1_and_2.DeepSpeedZeroOptimizer.average_tensor",
        "6fd000d730e51e62a515e160f97b8981de8ce6edeace51882a12173297247c71",
    ),
)

GRPO_PATCHES: tuple[Patch, ...] = (
    Patch(
        target=REGISTER[0],
        installed_by="longctx.training.rl.ulysses:local_attention",
        why="while a GRPO rank generates its own prompts, the entry DeepSpeed's registration put under the recipe's "
        "attention name in ALL_ATTENTION_FUNCTIONS (its Ulysses wrapper, which all-to-alls every call across the SP "
        "group) is swapped back to the function it wraps, and restored after; relies on the wrapper living in the "
        "instance's local mapping (GeneralInterface.__setitem__) and on generation calling attention by that name",
        written_against="deepspeed==0.19.8, transformers==5.23.0",
        source_sha256=REGISTER[1],
        relies_on=(
            ULYSSES_FORWARD,
            (
                "transformers.utils.generic.GeneralInterface",
                "23531b6f2404c42855582398410e214786063f603c1d659eac2ba36e6ba729df",
            ),
        ),
    ),
)

GRPO_OVERRIDES: tuple[Override, ...] = (
    Override(
        method=f"{GRPO}.__init__",
        overridden_by=f"{GRPO_TRAINER}.__init__",
        why="runs it with `beta` 0 so it loads no reference from the policy's path (the reference is built from the "
        "recipe: rl/reference.py), then the refusals, the per-model fixes and callbacks; relies on it adding the "
        "fused LM head at the sampling temperature and reading the eos ids and generation config it builds",
        written_against="trl==1.16.0",
        source_sha256="18f01b7a46c9544b23d74e822bafa4cb087426c6285d549ebe7c1f58aa088801",
        relies_on=(
            FUSED_HEAD,
            ("trl.models.utils.prepare_deepspeed", "86d126e5d92c55d24a93f055b4c21656dbf11d26c01871518c60c2e80587ff2c"),
        ),
    ),
    Override(
        method=f"{GRPO}._get_per_token_logps_and_entropies",
        overridden_by=f"{GRPO_TRAINER}._get_per_token_logps_and_entropies",
        why="the same [B, completion tokens] log-probs and entropies from the SP group's rows (rl/log_probs.py); "
        "relies on its callers (`_compute_loss`, `_generate_and_score_completions`) passing TRL's prompt-left, "
        "completion-right layout and calling it the same number of times on every rank, on the fused head scoring "
        "`shift_labels`, and on torch's all-gather backward summing every rank's gradient for a shard",
        written_against="trl==1.16.0, torch==2.13.0",
        source_sha256="ea73c3909275851d0cd664b1e7694905fdcd9c285e848ae923d7402234f2edce",
        relies_on=(
            (f"{GRPO}._compute_loss", "80295546bbdbf6f711acce7f6e69b0100ab40aa8f23ed8052cc564ff024e3e40"),
            SCORE,
            FUSED_HEAD,
            (
                "torch.distributed.nn.functional._AllGather.backward",
                "f4c141ae27f247ddf0efdd85c1683c6a4c13952193c4201c53b4b8013af4fef0",
            ),
            ("trl.trainer.utils.use_adapter", "edd0e493f99fa68595b34e5f8e26b7b19ad33c315470b53a659440695ef43657"),
            *GRADIENT_AVERAGES,
        ),
    ),
    Override(
        method=f"{GRPO}._compute_loss",
        overridden_by=f"{GRPO_TRAINER}._compute_loss",
        why="TRL's loss as it is, `bnpo` rescaled to the SP group's micro-batch tokens (rl/loss.py), the loss shown "
        "to the run guard; relies on compute_loss calling it and on each loss type's normaliser (read in loss.py)",
        written_against="trl==1.16.0",
        source_sha256="80295546bbdbf6f711acce7f6e69b0100ab40aa8f23ed8052cc564ff024e3e40",
        relies_on=(COMPUTE_LOSS,),
    ),
    Override(
        method=f"{GRPO}._generate_single_turn",
        overridden_by=f"{GRPO_TRAINER}._generate_single_turn",
        why="vLLM: unchanged; transformers: the same completion lists from one prefill per distinct prompt, with SP "
        "attention off (rl/generation.py, rl/ulysses.py), inside TRL's unwrap/gather context; relies on `_generate` "
        "taking (completion id lists, None logprobs) and masking nothing further",
        written_against="trl==1.16.0, transformers==5.23.0",
        source_sha256="e0f02e4fc094cefdb306c6f04da26a2547c8b8225161a90e87a6803b21989b8e",
        relies_on=(
            (f"{GRPO}._generate", "2a27fdf8f5e6f3562508eec3efb9e9dade2e0bf810de5031cdfab429d0a048f2"),
            (
                "trl.models.utils.unwrap_model_for_generation",
                "583d1303c5c55405c0c7b62819e64a1909c533a07cee740ed59b276a1b82375e",
            ),
            (
                "transformers.generation.utils.GenerationMixin.generate",
                "a469558165533afe4d29b4c393287f0b572e0d20e630bc0000be81e892da4cc3",
            ),
            (
                "transformers.cache_utils.DynamicCache",
                "74ee392136820b9b69d7da5bab0bf56e35ab877698559921527605d0efd444e4",
            ),
        ),
    ),
    Override(
        method=f"{GRPO}._prepare_inputs",
        overridden_by=f"{GRPO_TRAINER}._prepare_inputs",
        why="with prefix sharing, its buffering of a generation batch over `steps_per_generation` micro-steps is "
        "redone with the SP group's batches dealt whole prompt groups per micro-step (rl/batches.py) instead of "
        "`shuffle_sequence_dict` + `split_tensor_dict`; relies on `_step` counting micro-steps (training_step)",
        written_against="trl==1.16.0",
        source_sha256="f824e7fb0714795697c9b4d574de1e139dd5f4404c2554e92cf1db7f60fa6c96",
        relies_on=(
            SCORE,
            (
                "trl.trainer.utils.split_tensor_dict",
                "b61a5760a03e95dbceddcc1e8e78c3db6d9303f01c0b1ced19b745271e56d079",
            ),
        ),
    ),
    Override(
        method=f"{GRPO}._get_train_sampler",
        overridden_by=f"{GRPO_TRAINER}._get_train_sampler",
        why="the same `RepeatSampler`, as rl/resume.py's `EpochRepeatSampler`: pass e drawn from the seed (TRL's "
        "generator advances a permutation a pass and is not saved, so a resumed run drew epoch 0's prompts); its "
        "epoch from accelerate's `set_epoch` and, with `_step`, from the restored global step at train begin, "
        "counted as the Trainer's epoch loop and the skip of a resume count them; relies on TRL's training_step "
        "counting one `_step` a micro-step",
        written_against="trl==1.16.0, transformers==5.23.0, accelerate==1.15.0",
        source_sha256="36497afb4d311dc9a80d914d27893fe075c5bbc7edde8586edfa60125e980799",
        relies_on=(
            ("trl.trainer.utils.RepeatSampler", "ba139f4a43eeecd4976bc51c850039df3b53a308e5f1c372f7922e367906cd58"),
            (f"{GRPO}.training_step", "9e18632f7dd8e8d8f0ebbdcc4431feb1a9e3c037a02cf8c3aec38aa68ee58814"),
            (
                "transformers.trainer.Trainer._init_training_state",
                "8fbd17ebb7d3793df3ad9034f17c9f6d17045863cc57a6786681f269126dbaff",
            ),
            (
                "transformers.trainer.Trainer._run_epoch",
                "31aff00f34c302a241b458727e59ae4befab906c51632831b90f6dac4357b823",
            ),
            (
                "accelerate.data_loader.DataLoaderShard.set_epoch",
                "07cce703acb8d151af63e62e991f8d8ce29be45e860ccaade1f45e4957511bb4",
            ),
        ),
    ),
    Override(
        method="transformers.trainer.Trainer.get_sp_size",
        overridden_by=f"{GRPO_TRAINER}.get_sp_size",
        why="1 for the Trainer's batch accounting (total batch size, the loader's length, which it multiplies by sp "
        "for DeepSpeed's SP adapter): each GRPO rank loads its own prompts and no adapter repeats them",
        written_against="transformers==5.23.0",
        source_sha256="33e0fcedf1d76458e001dbd25f149c124f289f25950232db5b3779278738e61e",
        relies_on=(
            (
                "transformers.trainer.Trainer.get_total_train_batch_size",
                "2832434815e1f8582ea121aa8049f5bb57d87d20a8c87ce208fb924fbab6d7d9",
            ),
            (
                "transformers.trainer.Trainer.set_initial_training_values",
                "81697f5f3100a3adc31abbfef0fb5feaead0ccc284aeec3c77f1513454efcff7",
            ),
        ),
    ),
)
