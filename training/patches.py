"""Every replacement of upstream code this repository makes, in one list, with the version it was written against.

Each entry names the upstream object replaced (a function, method, class or registry entry), where this
repository replaces it, why, and the pinned version it was written against. `tests/test_patches.py`
resolves every target and compares a fingerprint of its upstream source with the one recorded here, so an
upgrade that changes the code a patch relies on fails loudly instead of silently changing training.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Patch:
    target: str  # dotted path of the upstream object that is replaced or relied on
    installed_by: str  # `module:function` here that installs the replacement
    why: str
    written_against: str  # the pinned distribution, e.g. "transformers==5.23.0"
    source_sha256: str | None = None  # sha256 of inspect.getsource(target) at that version (None: not source)


PATCHES: tuple[Patch, ...] = (
    Patch(
        target="transformers.trainer.skip_first_batches",
        installed_by="training.resume:enable_resume",
        why="accelerate's skip_first_batches needs `.dataset` and crashes on DeepSpeed's SP dataloader adapter",
        written_against="transformers==5.23.0",
    ),
    Patch(
        target="deepspeed.runtime.sequence_parallel.ulysses_sp.UlyssesSPDataLoaderAdapter",
        installed_by="training.resume:enable_resume",
        why="its instance's class is swapped for a subclass whose `set_epoch` is forwarded and restarts the "
        "pass, and which skips resumed SP micro-steps after `set_epoch` (uses `iter`, `micro_batches`)",
        written_against="deepspeed==0.19.8",
        source_sha256="1a44b6968527160c2b6bcf43bf0c8f8bfaead68e03d00fcd2d6dec47bc55951d",
    ),
    Patch(
        target="accelerate.data_loader.BatchSamplerShard._iter_with_no_split",
        installed_by="training.resume:enable_resume",
        why="the SP loader's `process_index` is relabelled (training/sp_data_order.py) so sp x dp trains on the "
        "rows a dp-only run trains on at each step; relies on the shard being read at iteration time",
        written_against="accelerate==1.15.0",
        source_sha256="4e3931c05d9c5141334d91747ef99f2842238006ae56457ca9985f245bd4a3ed",
    ),
    Patch(
        target="torch.distributed.nn.functional._AlltoAll.forward",
        installed_by="training.gloo_all_to_all:install",
        why="its gloo branch passes a group-local index as a global `src` rank: SP subgroups (sp x dp) crash",
        written_against="torch==2.13.0",
        source_sha256="b478419bbe80df86be915bfcec46ff1fa199ad68567f9a4d5925bef773d6472e",
    ),
    Patch(
        target="transformers.integrations.deepspeed.deepspeed_sp_compute_loss",
        installed_by="training.sp_loss:install_token_weighted_sp_loss",
        why="weights tokens within one micro-batch of one SP group only; replaced (as `transformers.trainer."
        "deepspeed_sp_compute_loss`) by one weighted over all micro-batches and dp ranks of the step",
        written_against="transformers==5.23.0",
        source_sha256="b048a16f22e9e099bbcb0de31be81e321a4d88385d8e89c55d7a84b55c989fce",
    ),
    Patch(
        target="transformers.trainer.Trainer.get_batch_samples",
        installed_by="training.sp_loss:install_token_weighted_sp_loss",
        why="wrapped per trainer instance to count the step's label tokens (`shift_labels`) on all ranks",
        written_against="transformers==5.23.0",
        source_sha256="0b3727386f73f67053b12b91e01c69673c8baf57e9a68769220a25515c468f94",
    ),
    Patch(
        target="transformers.integrations.sdpa_attention.sdpa_attention_forward",
        installed_by="training.isolation:install_document_isolation",
        why="`sdpa` in AttentionInterface is replaced by the per-document isolated sdpa for packed rows under SP",
        written_against="transformers==5.23.0",
    ),
    Patch(
        target="transformers.masking_utils.sdpa_mask",
        installed_by="training.isolation:install_document_isolation",
        why="`sdpa` in AttentionMaskInterface returns no mask without padding: the isolated sdpa never reads the "
        "[B, 1, S, S] packed mask transformers would build (S^2 bytes a rank); other cases call this function",
        written_against="transformers==5.23.0",
        source_sha256="a30991b130d8ebbf3e9bf9a267fe1297001c35f3f81cb53ca55cdcf169b6df70",
    ),
    # ---- evaluation under SP (training/sp_eval.py): upstream turns SP off in eval; these turn it back on
    Patch(
        target="deepspeed.runtime.sequence_parallel.ulysses_sp.UlyssesSPAttentionHF.register_with_transformers",
        installed_by="training.sp_eval:keep_sp_in_eval",
        why="accelerate registers Ulysses attention with `disable_in_eval=True`; the wrapper forces False so eval "
        "attention stays sharded across the SP group at the trained length",
        written_against="deepspeed==0.19.8",
        source_sha256="2db24401cfd942467ef19145ce0752ce7857501b1f75543cfd20e59b8d2c9142",
    ),
    Patch(
        target="accelerate.accelerator.Accelerator._prepare_deepspeed",
        installed_by="training.sp_eval:keep_sp_in_eval",
        why="relied on, not replaced: the upstream switch (passes `disable_in_eval=True` when the signature has it)",
        written_against="accelerate==1.15.0",
        source_sha256="32d86ff7e08a1f2d55a806375b1cdab3d57eff48b3eded9d3abd4ed9c1bab564",
    ),
    Patch(
        target="trl.trainer.sft_trainer.SFTTrainer.compute_loss",
        installed_by="training.sp_eval:enable_sp_eval",
        why="per instance: in eval under SP, the training loss path (label-token-weighted across the SP group) "
        "instead of a per-shard loss; every call also adds to the token-weighted eval loss",
        written_against="trl==1.16.0",
        source_sha256="ca448211ff653fe621b45498c79bf4f94b26286146442c361f0a8c3592b3b4c1",
    ),
    Patch(
        target="transformers.trainer.Trainer.get_eval_dataloader",
        installed_by="training.sp_eval:enable_sp_eval",
        why="per instance: eval rows split across ranks (label-free padding rows, not repeats) and, under SP, "
        "wrapped in DeepSpeed's SP dataloader adapter like the train dataloader",
        written_against="transformers==5.23.0",
        source_sha256="dd1c9287ad46f5ae6fdc17fa93304b41fc87e6b6d4f157d1415741cd9e44c77b",
    ),
    Patch(
        target="transformers.trainer.Trainer.evaluation_loop",
        installed_by="training.sp_eval:enable_sp_eval",
        why="per instance: loss only (no logits gathered) and `eval_loss` replaced by the mean over every label token",
        written_against="transformers==5.23.0",
        source_sha256="a0fe4d6536f8a84ac906705a6de328c351dc2ac9ec7016d9577581fb6c5a43c3",
    ),
    # Per-instance `forward` replacements (training/alst.py: TiledMLP on each MLP, host offload around each
    # checkpointed decoder layer) and the universal-checkpoint config mutation (training/resume.py) are
    # listed here by the structure work; add every new patch to this tuple.
)
