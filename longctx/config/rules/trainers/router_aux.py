"""The MoE router's load-balancing loss, which TRL's DPO and GRPO trainers add and the long-context ones do not
compute: one rule for both, read by preflight and by each trainer on its built model."""

from longctx.config.model.linear_layers import text_config
from longctx.config.problems import Problem, error


def router_aux_problems(coef: float | None, config: dict | None, source: str, trainer: str) -> list[Problem]:
    """TRL 1.16's DPOTrainer and GRPOTrainer add `coef` x the MoE router's load-balancing loss to their loss
    (`coef` unset: the model config's `router_aux_loss_coef`, for a model that returns router logits); the
    long-context trainers do not compute that term, so a non-zero effective coefficient is refused. `config`: the
    model's config dict (None when not on disk: only an explicit coefficient is seen then; the trainer checks again
    on the built model). `trainer`: the name the message gives."""
    text = text_config(config or {})
    effective = coef if coef is not None else (text.get("router_aux_loss_coef") or 0.0)
    if coef is None and "output_router_logits" not in text:
        effective = 0.0  # a dense model: TRL enables no aux loss
    if not effective:
        return []
    said = f"is {coef}" if coef is not None else f"is unset, so TRL takes the model config's {effective}"
    msg = (
        f"{said}: TRL adds that times the MoE router's load-balancing loss to the {trainer} loss, and the "
        f"long-context {trainer} trainer does not compute it (it would train without it)"
    )
    return [error(source, "router_aux_loss_coef", msg, f"set `router_aux_loss_coef: 0` ({trainer} without the term)")]
