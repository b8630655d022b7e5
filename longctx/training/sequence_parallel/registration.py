"""DeepSpeed's Ulysses registration, replaced once: the one home of `UlyssesSPAttentionHF.register_with_transformers`.

Why: accelerate builds the SP attention by calling DeepSpeed's `register_with_transformers` (inside `prepare`, from
`train()`), and four needs of this repository change that one call: eval keeps SP on (upstream: off), a ring in
the mesh registers the hybrid Ulysses x ring module instead (hybrid.py), a model whose layers differ in head shapes
is split per layer (per_layer_ulysses.py), and a GRPO micro-step is one row whatever the batch size (rl/ulysses.py).
Each used to wrap the classmethod in turn, so what ran depended on the order of the wrappers. Here one replacement
composes them, in one order written below, and each need is a switch its owner sets:

1. `rows` (GRPO, for the engine's preparation only): the all-to-all sized for that many rows per forward;
2. `keep_in_eval`: `disable_in_eval` forced False, so eval attention stays sharded at the trained length;
3. `ring` (`hybrid.use_ring`): the hybrid module registered instead of DeepSpeed's;
4. `layer_shapes` (without a ring: the ring refuses such models, config/rules/attention/ring.py): upstream reads the
global
   head values for the one call, then the instance is fitted per layer.

Needs 3 and 4 hand in the function that registers (their modules' `register_hybrid`, `register_fitted`), so this
module, which they import to switch themselves on, imports neither.
"""

import contextlib
from typing import NamedTuple

from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPAttentionHF

# keep_in_eval: a flag; rows: a count; ring, layer_shapes: the registration function their module gives (called
# with DeepSpeed's own first), so this module imports neither
_needs = {"rows": None, "keep_in_eval": False, "ring": None, "layer_shapes": None}
_upstream = {"function": None}  # DeepSpeed's own function, once replaced


class UlyssesCall(NamedTuple):
    """One registration call's arguments, in DeepSpeed's order: `upstream(cls, *call)` makes the call."""

    model_name_or_path: object  # accelerate passes the model
    core_attn_implementation: str
    sequence_parallel_size: int
    micro_batch_size: int
    seq_length: int | None
    seq_length_is_variable: bool
    disable_in_eval: bool
    max_length: int | None


def register_sp_attention(
    cls,
    model_name_or_path,
    core_attn_implementation,
    sequence_parallel_size,
    micro_batch_size,
    seq_length=None,
    seq_length_is_variable=True,
    disable_in_eval=False,
    max_length=None,
):
    """DeepSpeed's signature (accelerate inspects it for `disable_in_eval`), with the needs switched on applied."""
    upstream = _upstream["function"]
    call = UlyssesCall(
        model_name_or_path, core_attn_implementation, sequence_parallel_size, micro_batch_size,
        seq_length, seq_length_is_variable, disable_in_eval, max_length,
    )  # fmt: skip
    if _needs["rows"] is not None:
        call = call._replace(micro_batch_size=_needs["rows"])
    if _needs["keep_in_eval"]:
        call = call._replace(disable_in_eval=False)  # accelerate passes True; eval must shard like training
    if _needs["ring"] is not None:  # hybrid.register_hybrid: upstream's own without a ring or at sp=1
        return _needs["ring"](upstream, cls, call)
    if _needs["layer_shapes"] is not None:  # layer_shapes.register_fitted: upstream's own for uniform heads
        return _needs["layer_shapes"](upstream, cls, call)
    return upstream(cls, *call)


def install_sp_registration() -> None:
    """Replace DeepSpeed's registration by `register_sp_attention` (idempotent); every need is off until set."""
    upstream = UlyssesSPAttentionHF.register_with_transformers.__func__
    if upstream is register_sp_attention:
        return
    _upstream["function"] = upstream  # DeepSpeed's (or whatever a test put in its place)
    register_sp_attention.__wrapped__ = upstream  # accelerate inspects the signature for `disable_in_eval`
    # registered in longctx/training/patches/registry.py
    UlyssesSPAttentionHF.register_with_transformers = classmethod(register_sp_attention)


def need(name: str, value=True) -> None:
    """Switch one need on for this process (`keep_in_eval`; `ring`, `layer_shapes` with their registration
    function), installing the replacement."""
    if name not in _needs:
        raise KeyError(f"no registration need {name!r}; known: {', '.join(_needs)}")
    install_sp_registration()
    _needs[name] = value


def keep_sp_in_eval() -> None:
    """Register Ulysses attention with `disable_in_eval=False`, whatever accelerate asks (idempotent): an eval at the
    trained length stays sharded across the SP group (longctx/training/sequence_parallel/eval_loss.py)."""
    need("keep_in_eval")


@contextlib.contextmanager
def rows_per_forward(rows: int):
    """Inside, accelerate's registration of Ulysses SP sizes its all-to-all for `rows` rows per forward."""
    install_sp_registration()
    before = _needs["rows"]
    _needs["rows"] = rows
    try:
        yield
    finally:
        _needs["rows"] = before
