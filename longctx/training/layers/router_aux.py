"""The MoE router's load-balancing loss, exact under Ulysses SP: the whole sequence's, not a mean of shards'.

Why: the auxiliary loss (Switch Transformer; transformers' `load_balancing_loss_func`, which TRL's fused LM
head adds to the loss with `router_aux_loss_coef`) is E * sum_e f_e * P_e, where f_e is the fraction of
(token, top-k slot) assignments to expert e and P_e the mean router probability of e. Both are means over
the micro-batch's tokens, and the product of two means is not additive: under SP each rank holds a slice
of the sequence, so its own aux loss is another number, and the SP loss then also weights it by the
shard's label tokens (a shard of padding gets a NaN aux that poisons the step's gradient).

How: around the model's forward (`forward_with_exact_router_aux`, called by
longctx/training/sequence_parallel/loss_weighting.py)
forward hooks record each router's logits (the modules transformers itself records as `router_logits`,
read from the model class's `_can_record_outputs`, so every MoE family is found the same way). From them
each rank computes transformers' own three sums (top-k assignment counts per expert, probability sums per
expert, counted tokens; padding excluded by `attention_mask` exactly as upstream), the SP group adds them,
and the aux loss is computed once from the totals: equal to what one GPU computes on the whole micro-batch.
The probability sums carry the gradient the ZeRO stage's averaging needs, exactly as the LM term's token sum
does (longctx/training/sequence_parallel/group_sum.py: an autograd all-gather under ZeRO-3, which divides by
sp x dp; the other ranks' sums as constants under ZeRO-2, which divides by dp; with the all-gather under ZeRO-2
the aux gradient was sp times too large: gpt-oss's 0.9 trained as 7.2 at sp=8). Like TRL at sp=1, it is divided
by the step's micro-batches (TRL: `weighted_aux_loss / steps`); DeepSpeed's gradient average over the
data-parallel groups then gives the mean over all micro-batches of the step, as at sp=1. In evaluation
(longctx/training/sequence_parallel/eval_loss.py) the same aux enters once per sequence, with no gradient.
The LM part is the shard's negative log-likelihood from the fused head's `log_probs`, without the shard aux.
"""

import contextlib

import torch

from longctx.training.sequence_parallel.group_sum import sp_group_sum

STEP_MICRO_BATCHES = (
    "_sp_step_micro_batches"  # set on the accelerator by longctx/training/sequence_parallel/loss_weighting.py
)


def router_class(model):
    """(class, output index) of the modules whose output transformers records as `router_logits`, or None."""
    for module in model.modules():
        recorder = (getattr(type(module), "_can_record_outputs", None) or {}).get("router_logits")
        if recorder is not None:
            return recorder.target_class, recorder.index
    return None


@contextlib.contextmanager
def recorded_router_logits(model):
    """Yield a list that fills with each router's logits during the forward run inside the block."""
    found = router_class(model)
    logits: list[torch.Tensor] = []
    if found is None:
        yield logits
        return
    cls, index = found

    def hook(module, args, output):
        logits.append(output[index] if isinstance(output, tuple | list) else output)

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, cls)]
    try:
        yield logits
    finally:
        for handle in handles:
            handle.remove()


def router_sums(gate_logits, num_experts: int, top_k: int, attention_mask):
    """transformers' `load_balancing_loss_func` up to its final division: (counts [E], prob sums [E], tokens)."""
    device = gate_logits[0].device
    counts = torch.zeros(num_experts, dtype=torch.float32, device=device)
    probs = torch.zeros(num_experts, dtype=torch.float32, device=device)
    rows = torch.zeros((), dtype=torch.float32, device=device)
    mask = None if attention_mask is None else attention_mask.reshape(-1).to(device=device, dtype=torch.float32)
    for layer_gate in gate_logits:
        weights = torch.softmax(layer_gate.to(device), dim=-1)
        _, selected = torch.topk(weights, top_k, dim=-1)
        token_weight = torch.ones(weights.shape[0], device=device) if mask is None else mask
        counts = counts.scatter_add(0, selected.reshape(-1), token_weight.repeat_interleave(top_k).detach())
        probs = probs + (weights.float() * token_weight[:, None]).sum(dim=0)
        rows = rows + token_weight.sum()
    return counts, probs, rows


def exact_aux_loss(logits, config, attention_mask, group, divisor: str | None) -> torch.Tensor:
    """The micro-batch's aux loss from the SP group's summed router statistics; `divisor` is what DeepSpeed
    divides the summed gradients by ("dp", "sp_x_dp"), or None where no gradient is taken."""
    experts = getattr(config, "num_experts", None) or config.num_local_experts
    counts, probs, rows = router_sums(logits, experts, config.num_experts_per_tok, attention_mask)
    counts, rows = sp_group_sum(counts, group, None), sp_group_sum(rows, group, None)
    probs = sp_group_sum(probs, group, divisor)
    return experts * torch.sum((counts / rows) * (probs / rows))


def forward_with_exact_router_aux(accelerator, model, inputs, group, divisor: str | None, micro_batches: int = 1):
    """(outputs, the shard's LM token mean, the aux term to add to the SP loss); (outputs, outputs.loss, 0) without
    router logits (a dense model, or the aux loss off). The aux term is the coefficient times the whole micro-batch's
    aux loss over `micro_batches` (the step's, in training; 1 in evaluation)."""
    with recorded_router_logits(model) as logits:
        outputs = model(**inputs)
    if getattr(outputs, "aux_loss", None) is None or not logits:
        return outputs, outputs.loss, 0.0
    config = accelerator.unwrap_model(model).config.get_text_config()
    aux = exact_aux_loss(logits, config, inputs.get("attention_mask"), group, divisor)
    if getattr(outputs, "log_probs", None) is not None:  # TRL's fused head: the NLL alone, no shard aux in it
        lm = -outputs.log_probs.sum() / outputs.label_mask.sum().clamp(min=1)
    else:
        lm = outputs.loss - config.router_aux_loss_coef * outputs.aux_loss
    outputs.aux_loss = aux.detach()  # what the trainer logs as `aux_loss`: the sequence's, on every rank
    return outputs, lm, config.router_aux_loss_coef * aux / micro_batches
