"""The upstream code evaluation under SP replaces or relies on is the code it was written against."""

import hashlib
import importlib
import inspect

import pytest

from longctx.training.patches import PATCHES

SP_EVAL = [p for p in PATCHES if p.installed_by.startswith("longctx.training.sp_eval:")]


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


@pytest.mark.parametrize("patch", SP_EVAL, ids=lambda p: p.target.rsplit(".", 2)[-2] + "." + p.target.rsplit(".")[-1])
def test_upstream_source_is_the_one_the_patch_was_written_against(patch):
    source = inspect.getsource(resolve(patch.target))
    assert hashlib.sha256(source.encode()).hexdigest() == patch.source_sha256, (
        f"{patch.target} changed upstream: re-read it, check {patch.installed_by} still does what it says, "
        "then record the new sha256"
    )


def test_the_upstream_switch_is_still_the_one_turned_back_on(monkeypatch):
    """accelerate still asks for SP off in eval, and the installed registration turns it back on."""
    from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPAttentionHF

    from longctx.training import sp_eval

    assert 'kwagrs["disable_in_eval"] = True' in inspect.getsource(resolve(SP_EVAL[1].target))
    seen = {}
    monkeypatch.setattr(
        UlyssesSPAttentionHF, "register_with_transformers", classmethod(lambda cls, **kw: seen.update(kw))
    )
    monkeypatch.setitem(sp_eval._installed, "done", False)
    sp_eval.keep_sp_in_eval()
    UlyssesSPAttentionHF.register_with_transformers(sequence_parallel_size=2, disable_in_eval=True)
    assert seen == {"sequence_parallel_size": 2, "disable_in_eval": False}
