"""Every replacement of upstream code this repository makes, in one list, with the version it was written against.

`PATCHES` are replacements: upstream objects swapped where no method override can reach them (registries,
module-level names, per-instance forwards). `OVERRIDES` are the trainer's method overrides
(longctx/training/trainer.py): they replace nothing, but call the upstream method and rely on what it does, so
they carry the same fingerprints.

Each patch names the upstream object replaced (a function, method, class or registry entry), where this
repository replaces it, why, and the pinned version it was written against. Each also records the sha256 of
the upstream source the patch relies on: the replaced object itself and, in `relies_on`, the upstream code
that calls it or whose behaviour the replacement assumes (for example the Trainer method that calls
`skip_first_batches` by its module-level name). `tests/test_patches.py` resolves every path in a fresh
interpreter and recomputes the fingerprints, so an upgrade that changes that code fails loudly instead of
silently changing training. The test also scans the code for patch sites (an attribute assigned a function,
`__class__` swaps, `mock.patch`, `AttentionInterface.register`) and requires each to be listed here and to
carry a `# registered in longctx/training/patches.py` comment, so a reader of either side finds the other,
and requires every method the trainer overrides to be listed in `OVERRIDES`.

After an intended upgrade, re-read each patch and override against the new upstream code, then print the new
fingerprints with `python -m longctx.training.patches --print` and update the entries.
"""

import argparse
import hashlib
import importlib
import inspect
import json
import sys
from dataclasses import dataclass

# Modules whose objects are replacements, not upstream: this package (by its own name, so a copy under another
# name still works), the data tool, the test modules and a script run as __main__.
FIRST_PARTY = (__name__.split(".")[0], "data_prep", "tests", "__main__")
STAGE3 = "deepspeed.runtime.zero.stage3.DeepSpeedZeroOptimizer_Stage3"
STAGE12 = "deepspeed.runtime.zero.stage_1_and_2.DeepSpeedZeroOptimizer"


@dataclass(frozen=True)
class Patch:
    target: str  # dotted path of the upstream object that is replaced
    installed_by: str  # `module:function` here that installs the replacement
    why: str
    written_against: str  # the pinned distribution(s), e.g. "transformers==5.23.0"
    source_sha256: str | None = None  # sha256 of inspect.getsource(target) at that version
    relies_on: tuple[tuple[str, str], ...] = ()  # (dotted path, sha256 of its source): upstream code it assumes


PATCHES: tuple[Patch, ...] = (
    Patch(
        target="transformers.trainer.skip_first_batches",
        installed_by="longctx.training.resume:install_sp_aware_skip",
        why="accelerate's skip_first_batches needs `.dataset` and crashes on DeepSpeed's SP dataloader adapter; "
        "Trainer._run_epoch calls the module-level name, so replacing it reroutes only adapters",
        written_against="transformers==5.23.0, accelerate==1.15.0",
        source_sha256="c3e05a215cb63cadd5150bd5614197b2af019ac94a3b4d8c957e41920b1d2bcc",
        relies_on=(
            (
                "transformers.trainer.Trainer._run_epoch",
                "31aff00f34c302a241b458727e59ae4befab906c51632831b90f6dac4357b823",
            ),
        ),
    ),
    Patch(
        target="deepspeed.comm.torch.TorchBackend.all_gather",
        installed_by="longctx.training.gloo_uneven_gather:install",
        why="gloo refuses an all-gather into tensors of unequal sizes, which the SP dataloader adapter's refill does "
        "when SP ranks hold rows of different lengths; on gloo only those calls are padded for transport",
        written_against="deepspeed==0.19.8",
        source_sha256="284e90cdfe35245b5a0bcf892bb9d3f1f01c2ccc180d563c362e453c8eb1909e",
        relies_on=(
            (
                "deepspeed.runtime.sequence_parallel.ulysses_sp.UlyssesSPDataLoaderAdapter.refill",
                "4abbadb7d8275e93d077c34ad070442760cd7cc4c33a518a4b82d26d9667f271",
            ),
        ),
    ),
    Patch(
        target="torch.distributed.nn.functional._AlltoAll.forward",
        installed_by="longctx.training.gloo_all_to_all:install",
        why="its gloo branch passes a group-local index as a global `src` rank: SP subgroups (sp x dp) crash",
        written_against="torch==2.13.0",
        source_sha256="b478419bbe80df86be915bfcec46ff1fa199ad68567f9a4d5925bef773d6472e",
    ),
    Patch(
        target="transformers.integrations.deepspeed.deepspeed_sp_compute_loss",
        installed_by="longctx.training.sp_loss:install_token_weighted_sp_loss",
        why="weights tokens within one micro-batch of one SP group only; replaced (as `transformers.trainer."
        "deepspeed_sp_compute_loss`) by one weighted over all micro-batches and dp ranks of the step; relies on "
        "training_step passing the loss to backward undivided (loss_is_scaled_for_ga, scale_wrt_gas=False), on "
        "torch's all-gather backward summing the SP ranks' gradients, and on DeepSpeed dividing the summed "
        "gradients by sp x dp in ZeRO-3's reduce-scatter and by dp in ZeRO-1/2 (longctx/config/rules/zero.py)",
        written_against="transformers==5.23.0, torch==2.13.0, deepspeed==0.19.8",
        source_sha256="b048a16f22e9e099bbcb0de31be81e321a4d88385d8e89c55d7a84b55c989fce",
        relies_on=(
            (
                "transformers.trainer.Trainer.training_step",
                "e9760c8ee10308d5c1b90f667725374a18e3faf7019a65964319b29204003442",
            ),
            (
                "torch.distributed.nn.functional._AllGather.backward",
                "f4c141ae27f247ddf0efdd85c1683c6a4c13952193c4201c53b4b8013af4fef0",
            ),
            (
                f"{STAGE3}._DeepSpeedZeroOptimizer_Stage3__reduce_and_partition_ipg_grads",
                "24d09d54e4e6c38d9a4773f1fdd7c620c11b4b23fc58defadbec5be47efeb845",
            ),
            (
                f"{STAGE3}._DeepSpeedZeroOptimizer_Stage3__avg_scatter_grads",
                "f392cb14952e5019ad97f5538a41f902e0e26dc278b6c7e1587c22835d892590",
            ),
            (
                f"{STAGE3}._DeepSpeedZeroOptimizer_Stage3__avg_scatter_contiguous_grads",
                "0b21923022a454770797ac3930ec310f0bcd266468e5f683174e3069294430b2",
            ),
            (
                "deepspeed.runtime.comm.coalesced_collectives.reduce_scatter_coalesced",
                "d05c7b944514f710d32f74ef474522992b1dc9d334de78e511af810b5e4e6cc5",
            ),
            (f"{STAGE12}.average_tensor", "6fd000d730e51e62a515e160f97b8981de8ce6edeace51882a12173297247c71"),
            (
                f"{STAGE12}.gradient_reduction_w_predivide",
                "2946313f36ed9ac4587ebe0833641e61021f157786e88774dba296059bbbfcea",
            ),
            (f"{STAGE12}.allreduce_bucket", "bf7fd5c84c68e1f9ab35bcd3c3430f89dfc6026ed7a5646ecb2eaaf34fad67f0"),
        ),
    ),
    Patch(
        target="transformers.integrations.sdpa_attention.sdpa_attention_forward",
        installed_by="longctx.training.isolation:install_document_isolation",
        why="`sdpa` in AttentionInterface is replaced by the per-document isolated sdpa for packed rows under SP; "
        "DeepSpeed's Ulysses wrapper wraps whatever `sdpa` names and hands it the all-gathered position_ids",
        written_against="transformers==5.23.0, deepspeed==0.19.8",
        source_sha256="e3d016070b6ac957cd7b419a9f3572c8caafa0c0e1d135e70afb80e9c495eb8d",
        relies_on=(
            (
                "transformers.modeling_utils.AttentionInterface",
                "6ed7bf8337578f6a92a233abcfe3dbffe7a7506f0d7643f72d96317a77b704af",
            ),
            (
                "deepspeed.runtime.sequence_parallel.ulysses_sp.UlyssesSPAttentionHF.forward",
                "c4832fb77b88faf837a26e365a37599db1089e0bb5f01debff0e9824928657f7",
            ),
            (
                "deepspeed.runtime.sequence_parallel.ulysses_sp.UlyssesSPAttentionHF.register_with_transformers",
                "2db24401cfd942467ef19145ce0752ce7857501b1f75543cfd20e59b8d2c9142",
            ),
        ),
    ),
    Patch(
        target="transformers.models.llama.modeling_llama.LlamaMLP.forward",
        installed_by="longctx.training.alst:enable_tiled_mlp",
        why="`tiled_mlp`: each gated MLP instance's forward (Llama, Qwen3, ...) runs in sequence tiles through "
        "DeepSpeed's TiledMLP; zero padding assumes a bias-free gate/up/down MLP",
        written_against="transformers==5.23.0, deepspeed==0.19.8",
        source_sha256="03df2d7685cf8446594448cbd33ef676a2b088779d99d9803abe3bed2ec7ad9b",
        relies_on=(
            (
                "transformers.models.qwen3.modeling_qwen3.Qwen3MLP.forward",
                "03df2d7685cf8446594448cbd33ef676a2b088779d99d9803abe3bed2ec7ad9b",
            ),
            (
                "deepspeed.runtime.sequence_parallel.ulysses_sp.TiledMLP",
                "41e69bd4df92c91d0ec440ed1d9c4f2de71f4a99431768cfde3949337f4946e1",
            ),
        ),
    ),
    Patch(
        target="transformers.models.llama.modeling_llama.LlamaDecoderLayer.forward",
        installed_by="longctx.training.checkpoint_offload:enable_activation_checkpoint_offload",
        why="`activation_checkpoint_offload`: each checkpointed decoder layer instance's forward runs under "
        "saved-tensor hooks that move its inputs to host memory; relies on GradientCheckpointingLayer "
        "checkpointing `forward` (not `__call__`) so the bound forward is the checkpoint wrapper",
        written_against="transformers==5.23.0",
        source_sha256="75d1d62e173e8c574b8a61338d1fa5052774d13b848eecd282cde88cd6690b8e",
        relies_on=(
            (
                "transformers.modeling_layers.GradientCheckpointingLayer",
                "4d3925c00d58b7716e79c36b26c2ff878bec6356c3a512193269b3c3542ec815",
            ),
        ),
    ),
    Patch(
        target="trl.models.selective_activation_checkpointing._aten_attention_ops",
        installed_by="longctx.training.varlen:save_in_selective_checkpointing",
        why="TRL's selective checkpointing saves attention ops it knows (sdpa's aten ops, flash-attn by name); the "
        "returned set gains torch's varlen op (`torch_attn::_varlen_attn`), which packed rows run on a GPU",
        written_against="trl==1.16.0, torch==2.13.0",
        source_sha256="0c6a2ec717ee5fef497849b72304e73f06d03cc0bf4fca2f87328a6268abe726",
        relies_on=(
            (
                "trl.models.selective_activation_checkpointing.enable_selective_activation_checkpointing",
                "6170c9d5d9aad63251f46207d0dd0b640746045b786c7aa53c2ef1f494e04bb0",
            ),
            (
                "torch.nn.attention.varlen.varlen_attn",
                "36722f83c5a8ca36f20ffd63b23896b455b83cce6c978ce5ffae5f37b6a5c8df",
            ),
        ),
    ),
    Patch(
        target="accelerate.utils.dataclasses.DeepSpeedPlugin",
        installed_by="longctx.training.universal:use_universal_if_needed",
        why="the plugin's `deepspeed_config` dict gets `checkpoint.load_universal: true` before the engine is "
        "built, so a converted checkpoint resumes on another mesh; DeepSpeed reads it in its config class",
        written_against="accelerate==1.15.0, deepspeed==0.19.8",
        source_sha256="3d65defc0cef2a58a5ac5b818adf0c1058c09d377d53cc06ba8fc850c788ef08",
        relies_on=(
            (
                "deepspeed.runtime.config.DeepSpeedConfig._initialize_params",
                "ccf7da2da6a0dee9a5be741cf701b8970ea566d4e856f312e1f659c812f2df8a",
            ),
        ),
    ),
    Patch(
        target="transformers.models.gpt_oss.modeling_gpt_oss.eager_attention_forward",
        installed_by="longctx.training.sinks:enable_sinks_and_windows",
        why="`sdpa` calls with sinks (`s_aux`, gpt-oss) or a sliding window go to sink_sdpa_attention: each SP rank "
        "takes the sinks of its own query heads (Ulysses' contiguous head block), documents and windows apply per "
        "document, and the sink enters as a log-sum-exp rescale of a kernel's output; this is the formula it "
        "reproduces (tests/test_sinks_attention.py), and GptOssAttention.forward the call it receives",
        written_against="transformers==5.23.0, deepspeed==0.19.8",
        source_sha256="3cb759e14962bed172f98260726bcbe6f253fbe8d3d43ec28ee89b2164c3b92c",
        relies_on=(
            (
                "transformers.models.gpt_oss.modeling_gpt_oss.GptOssAttention.forward",
                "38f364115ad66aed3722eb46906119ccd5660652e49dcbc586e693bee982f791",
            ),
            (
                "deepspeed.runtime.sequence_parallel.ulysses_sp.UlyssesSPAttentionHF.forward",
                "c4832fb77b88faf837a26e365a37599db1089e0bb5f01debff0e9824928657f7",
            ),
        ),
    ),
    Patch(
        target="transformers.models.gpt_oss.modeling_gpt_oss.GptOssPreTrainedModel",
        installed_by="longctx.training.sinks:enable_sinks_and_windows",
        why="`_supports_sdpa` is set True: gpt-oss refuses sdpa only because stock sdpa ignores its sinks, which "
        "the `sdpa` registered by enable_sinks_and_windows applies",
        written_against="transformers==5.23.0",
        source_sha256="29c1258b10333a6d056435c5eb8651836ffb4461608096a9452836f02edea469",
    ),
    Patch(
        target="transformers.masking_utils.sdpa_mask",
        installed_by="longctx.training.isolation:install_document_isolation",
        why="`sdpa` in AttentionMaskInterface returns no mask without padding: the isolated sdpa never reads the "
        "[B, 1, S, S] packed mask transformers would build (S^2 bytes a rank); other cases call this function",
        written_against="transformers==5.23.0",
        source_sha256="a30991b130d8ebbf3e9bf9a267fe1297001c35f3f81cb53ca55cdcf169b6df70",
    ),
    Patch(
        target="accelerate.utils.dataclasses.DeepSpeedPlugin",
        installed_by="longctx.evaluation.worker:drop_optimizer_sections",
        why="`make eval` pops the `optimizer` and `scheduler` sections from the plugin's `deepspeed_config` dict "
        "before prepare: nothing steps an optimizer in eval, and their `auto` values only a trainer fills",
        written_against="accelerate==1.15.0",
        source_sha256="3d65defc0cef2a58a5ac5b818adf0c1058c09d377d53cc06ba8fc850c788ef08",
        relies_on=(
            (
                "accelerate.accelerator.Accelerator._prepare_deepspeed",
                "32d86ff7e08a1f2d55a806375b1cdab3d57eff48b3eded9d3abd4ed9c1bab564",
            ),
        ),
    ),
    # ---- evaluation under SP (longctx/training/sp_eval.py): upstream turns SP off in eval; these turn it back on
    Patch(
        target="deepspeed.runtime.sequence_parallel.ulysses_sp.UlyssesSPAttentionHF.register_with_transformers",
        installed_by="longctx.training.sp_eval:keep_sp_in_eval",
        why="accelerate registers Ulysses attention with `disable_in_eval=True`; the wrapper forces False so eval "
        "attention stays sharded across the SP group at the trained length",
        written_against="deepspeed==0.19.8, accelerate==1.15.0",
        source_sha256="2db24401cfd942467ef19145ce0752ce7857501b1f75543cfd20e59b8d2c9142",
        relies_on=(
            # the upstream switch turned back on: passes `disable_in_eval=True` when the signature has it
            (
                "accelerate.accelerator.Accelerator._prepare_deepspeed",
                "32d86ff7e08a1f2d55a806375b1cdab3d57eff48b3eded9d3abd4ed9c1bab564",
            ),
        ),
    ),
    # ---- Gated DeltaNet under Ulysses SP (longctx/training/linear_attention_sp.py): one class swap per family
    Patch(
        target="transformers.models.qwen3_5.modeling_qwen3_5.Qwen3_5GatedDeltaNet.forward",
        installed_by="longctx.training.linear_attention_sp:convert_layers",
        why="each instance's class becomes a subclass whose forward shards heads across the SP group (all-to-all "
        "around the convolution and the recurrence) and restarts both at packed documents; relies on the layer's "
        "attribute names, the reference chunk kernel (called per document), the convolution it reproduces, the "
        "decoder layer not passing position_ids (hence the pre-hook on the text model) and that model's kwargs",
        written_against="transformers==5.23.0",
        source_sha256="8f31ae7d35daf534a763d1ca92875c5c412e06a4488885e5126907a804b52878",
        relies_on=(
            (
                "transformers.models.qwen3_5.modeling_qwen3_5.Qwen3_5GatedDeltaNet.__init__",
                "9062360fab9c4f52e1aec4270789d4455b0d64d0f8e37ce4fa467d222ee63084",
            ),
            (
                "transformers.models.qwen3_5.modeling_qwen3_5.torch_chunk_gated_delta_rule",
                "a1bbf783aa6563be40c184915a8410e4370263adf407ad222628d4a6ad8affbd",
            ),
            (
                "transformers.models.qwen3_5.modeling_qwen3_5.causal_conv1d_fn",
                "f932149bdf42900c8cdd95cce7adaa6270a337906c3e018534e0e28c83d820fd",
            ),
            (
                "transformers.models.qwen3_5.modeling_qwen3_5.Qwen3_5DecoderLayer.forward",
                "31f72560f30fda11a1eb5743f3c4e33ece47ff3c2b8f0e89e3c2f21148027900",
            ),
            (
                "transformers.models.qwen3_5.modeling_qwen3_5.Qwen3_5TextModel.forward",
                "42086b760184c60c5bff51fc5d7e7ec5e933301a46d1518e2b907deed2c916a7",
            ),
            (
                "deepspeed.runtime.sequence_parallel.ulysses_sp.UlyssesSPAttentionHF.register_with_transformers",
                "2db24401cfd942467ef19145ce0752ce7857501b1f75543cfd20e59b8d2c9142",
            ),
            (
                "deepspeed.sequence.layer._dim_zero_all_to_all",
                "7b069e027a32091afa9c2d0a25df2ff64d855b0df74ccfca3c8f8918e0b0d4ff",
            ),
        ),
    ),
    Patch(
        target="transformers.models.qwen3_5_moe.modeling_qwen3_5_moe.Qwen3_5MoeGatedDeltaNet.forward",
        installed_by="longctx.training.linear_attention_sp:convert_layers",
        why="as Qwen3_5GatedDeltaNet (the same layer in the MoE family)",
        written_against="transformers==5.23.0",
        source_sha256="8f31ae7d35daf534a763d1ca92875c5c412e06a4488885e5126907a804b52878",
        relies_on=(
            (
                "transformers.models.qwen3_5_moe.modeling_qwen3_5_moe.Qwen3_5MoeGatedDeltaNet.__init__",
                "413fe0ba883b897fa52ecd475fff73955aa8d4da69f83210877a9752b8c6ea03",
            ),
            (
                "transformers.models.qwen3_5_moe.modeling_qwen3_5_moe.torch_chunk_gated_delta_rule",
                "a1bbf783aa6563be40c184915a8410e4370263adf407ad222628d4a6ad8affbd",
            ),
        ),
    ),
    Patch(
        target="transformers.models.qwen3_next.modeling_qwen3_next.Qwen3NextGatedDeltaNet.forward",
        installed_by="longctx.training.linear_attention_sp:convert_layers",
        why="as Qwen3_5GatedDeltaNet; with Qwen3-Next's interleaved qkvz/ba projections",
        written_against="transformers==5.23.0",
        source_sha256="177c5d3df989a7b42f3b12a41bedc225ebf43ae052d5e2ac8c0a3507a61a3db4",
        relies_on=(
            (
                "transformers.models.qwen3_next.modeling_qwen3_next.Qwen3NextGatedDeltaNet.fix_query_key_value_ordering",
                "1b706d1f9a490a63c40fa7e35378758c7d66eb02762a5d60238b2f9942bc25a2",
            ),
            (
                "transformers.models.qwen3_next.modeling_qwen3_next.torch_chunk_gated_delta_rule",
                "a1bbf783aa6563be40c184915a8410e4370263adf407ad222628d4a6ad8affbd",
            ),
        ),
    ),
    Patch(
        target="accelerate.big_modeling._refuse_recurrent_layers_under_sequence_parallelism",
        installed_by="longctx.training.linear_attention_sp:lift_accelerate_refusal",
        why="replaced as `accelerate.accelerator` imported it, by a check that passes a model whose every "
        "linear-attention layer was converted above and calls the upstream refusal for any other",
        written_against="accelerate==1.15.0",
        source_sha256="4ab1d05729859f280487db847884ea0eaf6261fcfc7a898711e56fd3aaededdf",
        relies_on=(
            (
                "accelerate.accelerator.Accelerator._prepare_deepspeed",
                "32d86ff7e08a1f2d55a806375b1cdab3d57eff48b3eded9d3abd4ed9c1bab564",
            ),
        ),
    ),
    Patch(
        target="trl.trainer.dpo_trainer.DPOTrainer.__init__",
        installed_by="longctx.training.preference.guard:refuse_stock_preference_trainers",
        why="TRL's DPOTrainer, KTOTrainer and RewardTrainer have no SP path (each rank would sum its shard only): "
        "their `__init__` is wrapped to raise under sp > 1, pointing to `make dpo`; LongContextDPOTrainer passes",
        written_against="trl==1.16.0",
        source_sha256="632f447c71dcb04361800303be2192d8e48b2b3ccffd415fbf639c03a5dfd84f",
        relies_on=(
            (
                "trl.trainer.kto_trainer.KTOTrainer.__init__",
                "df42c2c259c9abf6d7381f211bb71c1095aa5e38e04f9a69d037241ddb798092",
            ),
            (
                "trl.trainer.reward_trainer.RewardTrainer.__init__",
                "e30bea5e95aadcf9d1831b206f87f761c4bedbe3b4de1a8d926f584993e98815",
            ),
        ),
    ),
)


@dataclass(frozen=True)
class Override:
    method: str  # dotted path of the upstream method the trainer overrides (the one its `super()` calls)
    overridden_by: str  # `module:Class.method` here
    why: str
    written_against: str
    source_sha256: str  # sha256 of inspect.getsource(method) at that version
    relies_on: tuple[tuple[str, str], ...] = ()  # (dotted path, sha256 of its source): upstream code it assumes


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

# The trainers' method overrides (longctx/training/trainer.py, longctx/training/preference/trainer.py): no upstream
# object is replaced, but each
# override calls the upstream method through `super()` and assumes what it does, so its source is fingerprinted
# like a patch's. `tests/test_patches.py` requires every override of the class to be listed here.
OVERRIDES: tuple[Override, ...] = (
    Override(
        method="trl.trainer.sft_trainer.SFTTrainer.__init__",
        overridden_by=f"{TRAINER}.__init__",
        why="the per-model fixes run after it: it has loaded the model and applied PEFT and Liger",
        written_against="trl==1.16.0",
        source_sha256="90b61e42b6900b05ae668cb2aeaee6c8ef35e62f78eacebb4ec2a7886bf33255",
    ),
    Override(
        method="transformers.trainer.Trainer.train",
        overridden_by=f"{TRAINER}.train",
        why="sets DeepSpeed's universal checkpoint loading before it builds the engine",
        written_against="transformers==5.23.0",
        source_sha256="9a3c2bcd066d8f990115e3f396d938cc47154518c4758e3438444b3f57f2b1b0",
    ),
    Override(
        method="transformers.trainer.Trainer.get_train_dataloader",
        overridden_by=f"{TRAINER}.get_train_dataloader",
        why="sp x dp: the prepared loader's shard is relabelled (training/sp_data_order.py) so each step trains "
        "a dp-only run's rows; relies on accelerate's shard sampler reading `process_index` at iteration time",
        written_against="transformers==5.23.0, accelerate==1.15.0",
        source_sha256="205a99685f8facd98a273c284296c1dc5b6a598499afbfaefd5dc1d363425771",
        relies_on=(
            (
                "accelerate.data_loader.BatchSamplerShard._iter_with_no_split",
                "4e3931c05d9c5141334d91747ef99f2842238006ae56457ca9985f245bd4a3ed",
            ),
        ),
    ),
    Override(
        method="transformers.trainer.Trainer._prepare_for_training",
        overridden_by=f"{TRAINER}._prepare_for_training",
        why="the SP dataloader adapter it builds is rebuilt as ResumableSPAdapter (a subclass that forwards "
        "`set_epoch` and skips resumed micro-steps; uses the adapter's `dl`, `iter`, `micro_batches`), which "
        "`_run_epoch` then iterates",
        written_against="transformers==5.23.0, accelerate==1.15.0, deepspeed==0.19.8",
        source_sha256="f55950593d7e10c0034044f9f6d37943f6d034bab5d123ae9810cf35735f3c93",
        relies_on=(
            ULYSSES_ADAPTER,
            ULYSSES_ADAPTER_FACTORY,
            (
                "transformers.trainer.Trainer._run_epoch",
                "31aff00f34c302a241b458727e59ae4befab906c51632831b90f6dac4357b823",
            ),
        ),
    ),
    Override(
        method="transformers.trainer.Trainer.get_batch_samples",
        overridden_by=f"{TRAINER}.get_batch_samples",
        why="also counts the step's label tokens (`shift_labels`) on all ranks for the token-weighted SP loss",
        written_against="transformers==5.23.0",
        source_sha256="0b3727386f73f67053b12b91e01c69673c8baf57e9a68769220a25515c468f94",
    ),
    # ---- evaluation under SP (longctx/training/sp_eval.py)
    Override(
        method="transformers.trainer.Trainer.get_eval_dataloader",
        overridden_by=f"{TRAINER}.get_eval_dataloader",
        why="eval rows split across ranks (label-free padding rows, not repeats) and, under SP, wrapped in "
        "DeepSpeed's SP dataloader adapter like the train dataloader",
        written_against="transformers==5.23.0, accelerate==1.15.0",
        source_sha256="dd1c9287ad46f5ae6fdc17fa93304b41fc87e6b6d4f157d1415741cd9e44c77b",
        relies_on=(ULYSSES_ADAPTER_FACTORY,),
    ),
    Override(
        method="trl.trainer.sft_trainer.SFTTrainer.compute_loss",
        overridden_by=f"{TRAINER}.compute_loss",
        why="in eval under SP, the training loss path (label-token-weighted across the SP group) instead of a "
        "per-shard loss; every eval call also adds to the token-weighted eval loss",
        written_against="trl==1.16.0",
        source_sha256="ca448211ff653fe621b45498c79bf4f94b26286146442c361f0a8c3592b3b4c1",
    ),
    Override(
        method="transformers.trainer.Trainer.evaluation_loop",
        overridden_by=f"{TRAINER}.evaluation_loop",
        why="loss only (no logits gathered) and `eval_loss` replaced by the mean over every label token",
        written_against="transformers==5.23.0",
        source_sha256="a0fe4d6536f8a84ac906705a6de328c351dc2ac9ec7016d9577581fb6c5a43c3",
    ),
    Override(
        method="transformers.trainer.Trainer._save",
        overridden_by=f"{TRAINER}._save",
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
    # ---- preference training (longctx/training/preference/trainer.py): TRL's DPOTrainer under SP
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
        method="trl.trainer.dpo_trainer.DPOTrainer._prepare_dataset",
        overridden_by=f"{DPO_TRAINER}._prepare_dataset",
        why="rows data_prep packed (with `sequence_ids`) are used as they are; data_prep tokenized them as this "
        "method's `tokenize_fn` does (data_prep/preference.py), which tests/test_preference_data.py compares",
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
    Override(
        method="transformers.trainer.Trainer.train",
        overridden_by=f"{DPO_TRAINER}.train",
        why="as the SFT trainer's: DeepSpeed's universal checkpoint loading set before it builds the engine",
        written_against="transformers==5.23.0",
        source_sha256="9a3c2bcd066d8f990115e3f396d938cc47154518c4758e3438444b3f57f2b1b0",
    ),
    Override(
        method="transformers.trainer.Trainer.get_train_dataloader",
        overridden_by=f"{DPO_TRAINER}.get_train_dataloader",
        why="binds the train table of reference log-probs to the collator; sp x dp shard relabel as for SFT",
        written_against="transformers==5.23.0, accelerate==1.15.0",
        source_sha256="205a99685f8facd98a273c284296c1dc5b6a598499afbfaefd5dc1d363425771",
        relies_on=(
            (
                "accelerate.data_loader.BatchSamplerShard._iter_with_no_split",
                "4e3931c05d9c5141334d91747ef99f2842238006ae56457ca9985f245bd4a3ed",
            ),
        ),
    ),
    Override(
        method="transformers.trainer.Trainer._prepare_for_training",
        overridden_by=f"{DPO_TRAINER}._prepare_for_training",
        why="the resumable SP adapter as for SFT, then the reference pass on the engine it built (after a resumed "
        "checkpoint was loaded into it, so a resume reads the stored table instead)",
        written_against="transformers==5.23.0, accelerate==1.15.0, deepspeed==0.19.8",
        source_sha256="f55950593d7e10c0034044f9f6d37943f6d034bab5d123ae9810cf35735f3c93",
        relies_on=(ULYSSES_ADAPTER, ULYSSES_ADAPTER_FACTORY),
    ),
    Override(
        method="transformers.trainer.Trainer.get_batch_samples",
        overridden_by=f"{DPO_TRAINER}.get_batch_samples",
        why="also counts the step's pairs on all ranks (the loss is their mean)",
        written_against="transformers==5.23.0",
        source_sha256="0b3727386f73f67053b12b91e01c69673c8baf57e9a68769220a25515c468f94",
    ),
    Override(
        method="transformers.trainer.Trainer.get_eval_dataloader",
        overridden_by=f"{DPO_TRAINER}.get_eval_dataloader",
        why="held-out rows split across ranks (pair-less padding rows) and sharded by the SP adapter",
        written_against="transformers==5.23.0, accelerate==1.15.0",
        source_sha256="dd1c9287ad46f5ae6fdc17fa93304b41fc87e6b6d4f157d1415741cd9e44c77b",
        relies_on=(ULYSSES_ADAPTER_FACTORY,),
    ),
    Override(
        method="transformers.trainer.Trainer.evaluation_loop",
        overridden_by=f"{DPO_TRAINER}.evaluation_loop",
        why="loss only, and `eval_loss` the mean over every held-out pair; relies on DPOTrainer.prediction_step "
        "calling compute_loss",
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
        method="transformers.trainer.Trainer._save",
        overridden_by=f"{DPO_TRAINER}._save",
        why="as the SFT trainer's: the effective model config beside a LoRA adapter",
        written_against="transformers==5.23.0, peft==0.21.2",
        source_sha256="b136889e8792837686efc159b5297c5cc60d68d75102d0b0c643c136c57223ce",
    ),
)


def resolve(dotted: str):
    """The object a dotted path names: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(f"{dotted}: no importable module prefix")


def undecorated(obj):
    """The function a decorator closure wraps without setting `__wrapped__`, else `obj` (unwrapped as inspect does).

    Why: DeepSpeed's `instrument_w_nvtx` returns a bare `wrapped_fn(*args, **kwargs)` closing over `func`, so
    `inspect.getsource` of every method it decorates (ZeRO-3's reduction paths, `reduce_scatter_coalesced`) is
    the decorator's five lines: one fingerprint for all of them, which no change of theirs would ever alter.
    """
    obj = inspect.unwrap(obj)
    code = getattr(obj, "__code__", None)
    while code is not None and "<locals>" in obj.__qualname__ and "func" in code.co_freevars:
        inner = obj.__closure__[code.co_freevars.index("func")].cell_contents
        if not inspect.isfunction(inner):
            break
        obj = inspect.unwrap(inner)
        code = getattr(obj, "__code__", None)
    return obj


def fingerprint(dotted: str) -> str:
    """sha256 of the upstream source of the object at `dotted` (the decorated function's own, not its
    decorator's); refuses an object already replaced by us."""
    obj = undecorated(resolve(dotted))
    module = getattr(obj, "__module__", "") or ""
    if module.split(".")[0] in FIRST_PARTY:
        raise ValueError(f"{dotted} is already replaced in this process (by {module}); fingerprint a fresh one")
    name = getattr(obj, "__name__", None)  # a mangled `__name` is reached as `_Class__name`
    if isinstance(name, str) and not dotted.endswith(name):
        raise ValueError(f"{dotted} resolves to `{name}` (a wrapper?): its source is not the named object's")
    return hashlib.sha256(inspect.getsource(obj).encode()).hexdigest()


def _sources(entry: Patch | Override) -> tuple[str, dict[str, str | None]]:
    """(where this repository acts, {fingerprinted upstream path: recorded sha256}) of one registry entry."""
    if isinstance(entry, Override):
        return f"override {entry.overridden_by}", {entry.method: entry.source_sha256, **dict(entry.relies_on)}
    return f"patch installed by {entry.installed_by}", {entry.target: entry.source_sha256, **dict(entry.relies_on)}


def recorded(entries=PATCHES + OVERRIDES) -> dict[str, str | None]:
    """Every fingerprinted path with its recorded hash (targets, overridden methods and what they rely on)."""
    out: dict[str, str | None] = {}
    for entry in entries:
        out.update(_sources(entry)[1])
    return out


def mismatches(entries=PATCHES + OVERRIDES) -> list[str]:
    """One line per path whose upstream source is gone or differs from the recorded fingerprint."""
    lines = []
    for entry in entries:
        where, sources = _sources(entry)
        for path, sha in sources.items():
            try:
                now = fingerprint(path)
            except (ImportError, AttributeError, OSError, TypeError, ValueError) as exc:
                lines.append(f"{path}: cannot fingerprint ({exc}); {where}")
                continue
            if sha is not None and now != sha:
                lines.append(
                    f"{path}: upstream source changed (sha256 {now}, recorded {sha} for "
                    f"{entry.written_against}); re-read the {where} against it and update "
                    "longctx/training/patches.py"
                )
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m longctx.training.patches", description=__doc__.split("\n\n")[0])
    parser.add_argument("--print", action="store_true", help="print the current fingerprints as JSON")
    args = parser.parse_args(argv)
    if args.print:
        print(json.dumps({path: fingerprint(path) for path in recorded()}, indent=2))
        return 0
    lines = mismatches()
    for line in lines:
        print(f"error: {line}", file=sys.stderr)
    checked = f"{len(recorded())} upstream sources checked"
    print(f"[patches] {len(PATCHES)} patches, {len(OVERRIDES)} overrides, {checked}, {len(lines)} changed")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
