"""The upstream code evaluation under SP replaces or relies on is the code it was written against."""

import hashlib
import importlib
import inspect

import pytest

from longctx.training.patches.overrides import OVERRIDES
from longctx.training.patches.registry import PATCHES

EVAL_METHODS = ("get_eval_dataloader", "compute_loss", "evaluation_loop")
REGISTRATION = "longctx.training.sequence_parallel.registration:install_sp_registration"  # keeps SP in eval
SP_EVAL = [p for p in PATCHES if p.installed_by == REGISTRATION] + [
    o
    for o in OVERRIDES
    if o.overridden_by.startswith(("longctx.training.trainer:", "longctx.training.trainer_base:"))
    and o.overridden_by.rsplit(".", 1)[-1] in EVAL_METHODS
]
PREPARE_DEEPSPEED = "accelerate.accelerator.Accelerator._prepare_deepspeed"


def resolve(path: str):
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
            break
        except ImportError:
            continue
    for name in parts[i:]:
        obj = getattr(obj, name)
    return obj


def upstream_path(entry) -> str:
    return getattr(entry, "target", None) or entry.method


def test_every_eval_method_is_registered():
    assert len(SP_EVAL) == 1 + len(EVAL_METHODS)


@pytest.mark.parametrize("entry", SP_EVAL, ids=lambda e: ".".join(upstream_path(e).rsplit(".", 2)[-2:]))
def test_upstream_source_is_the_one_the_patch_was_written_against(entry):
    source = inspect.getsource(resolve(upstream_path(entry)))
    assert hashlib.sha256(source.encode()).hexdigest() == entry.source_sha256, (
        f"{upstream_path(entry)} changed upstream: re-read it, check {entry} still does what it says, "
        "then record the new sha256"
    )


def test_the_upstream_switch_is_still_the_one_turned_back_on(monkeypatch):
    """accelerate still asks for SP off in eval, and the installed registration turns it back on."""
    from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPAttentionHF

    from longctx.training.sequence_parallel import registration

    assert PREPARE_DEEPSPEED in dict(SP_EVAL[0].relies_on)
    assert 'kwagrs["disable_in_eval"] = True' in inspect.getsource(resolve(PREPARE_DEEPSPEED))
    seen = {}

    def upstream(cls, model, attention, sp, rows, length, variable, disable_in_eval, max_length):
        seen.update(sequence_parallel_size=sp, disable_in_eval=disable_in_eval)

    monkeypatch.setattr(UlyssesSPAttentionHF, "register_with_transformers", classmethod(upstream))
    monkeypatch.setattr(registration, "_needs", dict(registration._needs, keep_in_eval=False))
    monkeypatch.setattr(registration, "_upstream", {"function": None})
    registration.keep_sp_in_eval()
    UlyssesSPAttentionHF.register_with_transformers(
        model_name_or_path=None, core_attn_implementation="sdpa", sequence_parallel_size=2, micro_batch_size=1,
        disable_in_eval=True,
    )  # fmt: skip
    assert seen == {"sequence_parallel_size": 2, "disable_in_eval": False}
