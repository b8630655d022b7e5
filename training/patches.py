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
        why="the adapter has no `set_epoch`; its instance's class is swapped for a subclass that forwards it",
        written_against="deepspeed==0.19.8",
    ),
    Patch(
        target="transformers.integrations.sdpa_attention.sdpa_attention_forward",
        installed_by="training.isolation:install_document_isolation",
        why="`sdpa` in AttentionInterface is replaced by the per-document isolated sdpa for packed rows under SP",
        written_against="transformers==5.23.0",
    ),
    # Per-instance `forward` replacements (training/alst.py: TiledMLP on each MLP, host offload around each
    # checkpointed decoder layer) and the universal-checkpoint config mutation (training/resume.py) are
    # listed here by the structure work; add every new patch to this tuple.
)
