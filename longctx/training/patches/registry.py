"""Every replacement of upstream code this repository makes, in one list, with the version it was written against.

`PATCHES` are replacements: upstream objects swapped where no method override can reach them (registries,
module-level names, per-instance forwards). The trainer's method overrides, which replace nothing but rely on
the upstream method they call, are in overrides.py beside this file, with the same fingerprints; check.py
recomputes both.

Each patch names the upstream object replaced (a function, method, class or registry entry), where this
repository replaces it, why, and the pinned version it was written against. Each also records the sha256 of
the upstream source the patch relies on: the replaced object itself and, in `relies_on`, the upstream code
that calls it or whose behaviour the replacement assumes (for example the Trainer method that calls
`skip_first_batches` by its module-level name). `tests/launch/test_patches.py` resolves every path in a fresh
interpreter and recomputes the fingerprints, so an upgrade that changes that code fails loudly instead of
silently changing training. The test also scans the code for patch sites (an attribute assigned a function,
`__class__` swaps, `mock.patch`, `AttentionInterface.register`) and requires each to be listed here and to
carry a `# registered in longctx/training/patches/registry.py` comment, so a reader of either side finds the other,
and requires every method the trainer overrides to be listed in `OVERRIDES` (overrides.py).

After an intended upgrade, re-read each patch and override against the new upstream code, then print the new
fingerprints with `python -m longctx.training.patches.check --print` and update the entries.
"""

from longctx.training.patches.entries import Patch
from longctx.training.patches.grpo import GRPO_PATCHES

STAGE3 = "deepspeed.runtime.zero.stage3.DeepSpeedZeroOptimizer_Stage3"
STAGE12 = "deepspeed.runtime.zero.stage_1_and_2.DeepSpeedZeroOptimizer"

PATCHES: tuple[Patch, ...] = (
    Patch(
        target="transformers.trainer.skip_first_batches",
        installed_by="longctx.training.checkpoints.resume:install_sp_aware_skip",
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
        installed_by="longctx.training.sequence_parallel.gloo_uneven_gather:install_gloo_uneven_gather",
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
        installed_by="longctx.training.sequence_parallel.gloo_all_to_all:install_gloo_all_to_all",
        why="its gloo branch passes a group-local index as a global `src` rank: SP subgroups (sp x dp) crash",
        written_against="torch==2.13.0",
        source_sha256="b478419bbe80df86be915bfcec46ff1fa199ad68567f9a4d5925bef773d6472e",
    ),
    Patch(
        target="transformers.integrations.deepspeed.deepspeed_sp_compute_loss",
        installed_by="longctx.training.sequence_parallel.loss_weighting:install_token_weighted_sp_loss",
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
        installed_by="longctx.training.attention.isolation:install_document_isolation",
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
        installed_by="longctx.training.memory.alst:enable_tiled_mlp",
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
        installed_by="longctx.training.memory.checkpoint_offload:enable_activation_checkpoint_offload",
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
        installed_by="longctx.training.attention.varlen:save_in_selective_checkpointing",
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
        installed_by="longctx.training.checkpoints.universal:use_universal_if_needed",
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
        installed_by="longctx.training.attention.sinks:enable_sinks_and_windows",
        why="`sdpa` calls with sinks (`s_aux`, gpt-oss) or a sliding window go to sink_sdpa_attention: each SP rank "
        "takes the sinks of its own query heads (Ulysses' contiguous head block), documents and windows apply per "
        "document, and the sink enters as a log-sum-exp rescale of a kernel's output; this is the formula it "
        "reproduces (tests/attention/test_sinks_attention.py), and GptOssAttention.forward the call it receives",
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
        installed_by="longctx.training.attention.sinks:enable_sinks_and_windows",
        why="`_supports_sdpa` is set True: gpt-oss refuses sdpa only because stock sdpa ignores its sinks, which "
        "the `sdpa` registered by enable_sinks_and_windows applies",
        written_against="transformers==5.23.0",
        source_sha256="29c1258b10333a6d056435c5eb8651836ffb4461608096a9452836f02edea469",
    ),
    Patch(
        target="transformers.masking_utils.sdpa_mask",
        installed_by="longctx.training.attention.isolation:install_document_isolation",
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
    # ---- DeepSpeed's Ulysses registration, replaced once (longctx/training/sequence_parallel/registration.py)
    Patch(
        target="deepspeed.runtime.sequence_parallel.ulysses_sp.UlyssesSPAttentionHF.register_with_transformers",
        installed_by="longctx.training.sequence_parallel.registration:install_sp_registration",
        why="one replacement composing, in one order, what the attention stack needs of the call accelerate makes in "
        "`prepare`: (1) GRPO's engine preparation registers for one group row per forward (`micro_batch_size=1`: "
        "its all-to-all reshapes by that batch size); (2) `disable_in_eval` forced False (accelerate passes True) so "
        "eval attention stays sharded at the trained length; (3) with `parallelism_config_sp_ring_size` > 1, "
        "HybridSPAttention is registered instead (a subclass of UlyssesSPAttentionHF over a Ulysses group of U = "
        "sp / R ranks whose core attention is the ring; the same DeepSpeed SP groups, the same mask-dropping "
        "wrapper under the core attention's name; relies on the module's forward gathering position_ids over its "
        "group and calling `self.attn` on the chunk); (4) for a config with per-layer head overrides (Gemma 4's "
        "global layers), which transformers refuses to read globally, upstream reads them for the one call, the "
        "instance is swapped to the per-call-shaped subclass and every layer's heads are checked against sp; "
        "relies on accelerate passing the keywords of this signature",
        written_against="deepspeed==0.19.8, accelerate==1.15.0, transformers==5.23.0",
        source_sha256="2db24401cfd942467ef19145ce0752ce7857501b1f75543cfd20e59b8d2c9142",
        relies_on=(
            # the upstream switch turned back on: passes `disable_in_eval=True` when the signature has it
            (
                "accelerate.accelerator.Accelerator._prepare_deepspeed",
                "32d86ff7e08a1f2d55a806375b1cdab3d57eff48b3eded9d3abd4ed9c1bab564",
            ),
            (
                "deepspeed.runtime.sequence_parallel.ulysses_sp.UlyssesSPAttentionHF.__init__",
                "709035ee5cab073ecfa6e80029e24124990b97f44fb76ef0cdb17d51a4f260c7",
            ),
            (
                "deepspeed.runtime.sequence_parallel.ulysses_sp.UlyssesSPAttentionHF.forward",
                "c4832fb77b88faf837a26e365a37599db1089e0bb5f01debff0e9824928657f7",
            ),
            (
                "deepspeed.runtime.sequence_parallel.parallel_state_sp.initialize_sequence_parallel",
                "7f45303bb95dc4330ecc704f24a56b961c147093a9cbf7282a8a0b8d02242509",
            ),
            (
                "transformers.integrations.heterogeneity.configuration_utils.HeterogeneousConfigMixin",
                "6e47234bf8accefcd376ab1f277833a9741a84a63d1590ebbedaef96194654c2",
            ),
            (
                "transformers.models.gemma4.configuration_gemma4.Gemma4TextConfig.__post_init__",
                "83a5c1c502d898c3eec6afae12fc597adf585a9f04f372669083c49f1f5fff03",
            ),
        ),
    ),
    Patch(
        target="deepspeed.runtime.sequence_parallel.ulysses_sp.UlyssesSPAttentionHF.forward",
        installed_by="longctx.training.sequence_parallel.per_layer_ulysses:register_fitted",
        why="the registered instance's class becomes a subclass whose forward first sets the head count, head size "
        "and KV head count (and the replication factor and required shapes derived from them) from the call's "
        "tensors, then runs this forward: each layer is split by its own heads; relies on the attributes __init__ "
        "derives and the exchange methods read",
        written_against="deepspeed==0.19.8",
        source_sha256="c4832fb77b88faf837a26e365a37599db1089e0bb5f01debff0e9824928657f7",
        relies_on=(
            (
                "deepspeed.runtime.sequence_parallel.ulysses_sp.UlyssesSPAttentionHF.__init__",
                "709035ee5cab073ecfa6e80029e24124990b97f44fb76ef0cdb17d51a4f260c7",
            ),
            (
                "deepspeed.runtime.sequence_parallel.ulysses_sp.UlyssesSPAttentionHF._combine_local_sequences",
                "57fe33556e1689d17427ccd3c2af03a3883ae27560d0bf17843e2a48d7e21c98",
            ),
            (
                "deepspeed.runtime.sequence_parallel.ulysses_sp.UlyssesSPAttentionHF._partition_global_sequence",
                "ca75fe1b0fa85ce978c6d5ce560572359a14e1388a9ae142ef1f6bf2221516e4",
            ),
            (
                "transformers.models.gemma4.modeling_gemma4.Gemma4TextAttention.forward",
                "4c979630136ffcdf51d57afec85a341e5dd3ab016b74c48b42b2a03244db33e0",
            ),
        ),
    ),
    # ---- Gated DeltaNet under Ulysses SP (longctx/training/layers/linear_attention.py): one class swap per family
    Patch(
        target="transformers.models.qwen3_5.modeling_qwen3_5.Qwen3_5GatedDeltaNet.forward",
        installed_by="longctx.training.layers.linear_attention:convert_layers",
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
        installed_by="longctx.training.layers.linear_attention:convert_layers",
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
        installed_by="longctx.training.layers.linear_attention:convert_layers",
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
        installed_by="longctx.training.layers.linear_attention:lift_accelerate_refusal",
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
        target=f"{STAGE3}._optimizer_step",
        installed_by="longctx.training.memory.partial_offload:install_partial_offload_fixes",
        why="partial offload (`offload_optimizer.ratio` < 1) steps the GPU sub-groups with a backup AdamW whose "
        "learning rate is frozen at engine build (the scheduler sets the CPU Adam's groups only): the scheduled "
        "values are copied into it before each GPU sub-group's step, then the upstream method runs",
        written_against="deepspeed==0.19.8",
        source_sha256="35f8511bba5ff760b250d0b0a7d062d28dda6adb699913a298de4b44dba17951",
        relies_on=(
            (f"{STAGE3}._create_fp32_partitions", "2d22754c23f57f2968c8abdaa5aa3eaeb7b9e46c954fb4aa7684ac4cc4fc40ba"),
            (f"{STAGE3}.__init__", "2ebc271180aa345f7a06274a0774e94811d03f5c480e825858c60c74aa6cf705"),
        ),
    ),
    Patch(
        target=f"{STAGE3}._rigid_state_dict",
        installed_by="longctx.training.memory.partial_offload:install_partial_offload_fixes",
        why="a checkpoint under partial offload holds the CPU Adam's state only: the upstream dict gains the backup "
        "optimizer's (the GPU sub-groups' Adam moments and steps), read with its groups holding their partitions",
        written_against="deepspeed==0.19.8",
        source_sha256="9a67500b2f2c4a7a30cfb97ba0045ff6390179b238c7bd967bce96717baa96d5",
    ),
    Patch(
        target=f"{STAGE3}._rigid_load_state_dict",
        installed_by="longctx.training.memory.partial_offload:install_partial_offload_fixes",
        why="restores the backup optimizer's state that `_rigid_state_dict` added, after the upstream load",
        written_against="deepspeed==0.19.8",
        source_sha256="4e33833d717fd28b6ca98b8947dffed0b1d57f3df0640ea4f40813cba8ffb603",
    ),
    Patch(
        target="trl.trainer.dpo_trainer.DPOTrainer.__init__",
        installed_by="longctx.training.preference.stock_trainers:refuse_stock_preference_trainers",
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
PATCHES += GRPO_PATCHES  # the GRPO trainer's (longctx/training/patches/grpo.py)
