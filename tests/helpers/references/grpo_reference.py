"""The GRPO loss written out by hand over every completion run alone (tests/parity/test_grpo_parity.py's reference).

It never touches this repository's GRPO code: each `prompt + completion` runs alone through an eager-attention
transformers model (log-softmax of logits / T at each completion token); rewards
(tests/helpers/references/grpo_replay.py `token_reward`) and group advantages
((r - group mean) / (unbiased group std + 1e-4), as TRL); per token
-min(ratio x A, clip(ratio, 1 - eps, 1 + eps) x A) + beta x ratio x (exp(ref - logp) - (ref - logp) - 1) (TRL's
bias-corrected KL); `dapo` the step's token sum over its token count, `grpo` the mean over completions of their
token means. SGD by autograd, the old policy being the weights that sampled a generation, the reference the
starting weights (under LoRA: the base, the adapter switched off).
"""

import copy
from pathlib import Path

import torch

from tests.helpers.references.grpo_replay import token_reward

# the constants of tests/recipes/grpo-parity.yaml
G, STEPS, ITERATIONS, LR, BETA, EPSILON, TEMPERATURE, SEED = 4, 3, 2, 0.5, 0.2, 0.05, 0.9, 7


def token_log_probs(model, prompt: list[int], completion: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt + completion])
    logits = model(input_ids=ids).logits[0, :-1]
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32)) / TEMPERATURE  # float64 stays float64
    picked = logits.log_softmax(-1).gather(-1, ids[0, 1:, None])[:, 0]
    return picked[len(prompt) - 1 :]


def advantages(batch) -> list[float]:
    rewards = torch.tensor(token_reward(None, None, [c for _, c in batch]))
    groups = rewards.view(-1, G)
    mean, std = groups.mean(1, keepdim=True), groups.std(1, keepdim=True)  # unbiased, as TRL's nanstd
    return ((groups - mean) / (std + 1e-4)).flatten().tolist()


def per_token_loss(logp, old, ref, advantage) -> torch.Tensor:
    ratio = torch.exp(logp - old)
    clipped = torch.clamp(ratio, 1 - EPSILON, 1 + EPSILON)
    policy = -torch.min(ratio * advantage, clipped * advantage)
    kl = torch.exp(ref - logp) - (ref - logp) - 1
    return policy + BETA * ratio * kl


def step_loss(model, batch, old, ref, adv, loss_type: str) -> torch.Tensor:
    losses = [
        per_token_loss(token_log_probs(model, p, c), o, r, a)
        for (p, c), o, r, a in zip(batch, old, ref, adv, strict=True)
    ]
    if loss_type == "dapo":
        return torch.cat(losses).sum() / sum(len(x) for x in losses)
    return torch.stack([x.mean() for x in losses]).mean()


def with_adapter(model, lora_args: tuple):
    """The LoRA adapter TRL's GRPOTrainer wraps the model in for these recipe keys, from the same seed."""
    from peft import get_peft_model
    from transformers import set_seed
    from trl import ModelConfig, TrlParser, get_peft_config

    (model_args,) = TrlParser((ModelConfig,)).parse_args_into_dataclasses(args=list(lora_args))
    set_seed(SEED)  # GRPOTrainer.__init__ seeds just before it applies PEFT
    return get_peft_model(model, get_peft_config(model_args))


def by_hand(
    model_dir: Path, generations, loss_type: str, lora_args: tuple = (), steps: int = STEPS, dtype=torch.float32
):
    """(per-step losses, gradient norms, final trained weights) of STEPS SGD steps of the loss written out above;
    with `lora_args`, of a LoRA adapter (the reference is then the base model: the adapter switched off). Built in
    float32 (the saved weights, the adapter's draws), then run in `dtype`."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(  # MoE experts as a loop: torch's grouped GEMM has no float64
        model_dir, dtype=torch.float32, attn_implementation="eager", experts_implementation="eager"
    )
    reference = copy.deepcopy(model).requires_grad_(False)  # the starting weights: also the base under LoRA
    if lora_args:
        model = with_adapter(model, lora_args)
    model, reference = model.to(dtype), reference.to(dtype)
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(trained, lr=LR)
    losses, norms = [], []
    for step in range(steps):
        batch = generations[step // ITERATIONS]
        if step % ITERATIONS == 0:  # a new generation: the old policy is the model that sampled it
            with torch.no_grad():
                old = [token_log_probs(model, p, c) for p, c in batch]
                ref = [token_log_probs(reference, p, c) for p, c in batch]
            adv = advantages(batch)
        optimizer.zero_grad()
        loss = step_loss(model, batch, old, ref, adv, loss_type)
        loss.backward()
        norms.append(torch.sqrt(sum((p.grad.double() ** 2).sum() for p in trained)).item())
        losses.append(loss.item())
        optimizer.step()
    weights = {k.replace(".default.", "."): v.detach() for k, v in model.state_dict().items()}  # PEFT's file names
    return losses, norms, weights
