"""Which completions each rank of an SP group trains at each micro-step, so that a micro-step's rows hold whole
groups (prefix sharing).

Why: a micro-step's forward lays out the union of its SP group's micro-batches (longctx/training/rl/log_probs.py),
and a prompt is computed once only for the completions of that prompt the union holds. TRL cuts each rank's
generation batch into `steps_per_generation` micro-batches after shuffling it completion by completion, and each
rank generated whole groups of its own prompts; so a micro-step's union mixes one or two completions of many
prompts and shares almost nothing (at sp=8 with 8 completions a prompt and one completion a rank per micro-step:
8 prompts, each computed once per completion).

Here, with prefix sharing on, the SP group's generation batches are exchanged (every per-completion tensor TRL's
scoring produced: ids, masks, advantages, old-policy and reference log-probs; the scalar token count is global
already), the completions put in prompt order, whole prompt groups shuffled (as TRL shuffles completions, with a
generator every rank of the group seeds alike), and dealt: micro-step k takes the next `sp x
per_device_train_batch_size` completions, rank r the r-th `per_device_train_batch_size` of them. Which rank trains a
completion does not change the loss: TRL's loss types normalise over the step's tokens, sequences or completions,
the same wherever a completion sits (`bnpo`'s local batch is the SP group's micro-batch: longctx/training/rl/loss.py).
"""

import torch
import torch.distributed as dist

PAD_VALUES = {"tool_mask": 1}  # TRL pads every other completion-shaped tensor with 0 (ids: the pad token)


def kinds_of(batch: dict) -> dict[str, str]:
    """How each per-completion tensor of a scored batch is laid out: `prompt` (left-padded along the prompt),
    `token` (right-padded along the completion) or `sample` (one value, or one row, per completion)."""
    width = batch["completion_ids"].shape[1]
    kinds = {}
    for key, value in batch.items():
        if not torch.is_tensor(value) or value.dim() == 0:
            continue
        if key in ("prompt_ids", "prompt_mask"):
            kinds[key] = "prompt"
        elif value.dim() >= 2 and value.shape[1] == width:
            kinds[key] = "token"
        else:
            kinds[key] = "sample"
    return kinds


def samples_of(batch: dict, kinds: dict[str, str]) -> list[dict]:
    """A scored generation batch as one dict per completion, padding stripped."""
    prompt_real = batch["prompt_mask"].bool().cpu()
    lengths = batch["completion_mask"].sum(1).tolist()
    out = []
    for i, length in enumerate(lengths):
        sample = {}
        for key, kind in kinds.items():
            value = batch[key][i].cpu()
            sample[key] = value[prompt_real[i]] if kind == "prompt" else value[:length] if kind == "token" else value
        out.append(sample)
    return out


def batch_of(samples: list[dict], kinds: dict[str, str], scalars: dict, pad_id: int, device) -> dict:
    """The completions back into TRL's batch layout (prompts left-padded, completions right-padded)."""
    batch = dict(scalars)
    for key, kind in kinds.items():
        values = [s[key] for s in samples]
        if kind != "sample":
            width = max(v.shape[0] for v in values)
            fill = pad_id if key.endswith("_ids") else PAD_VALUES.get(key, 0)
            values = [_pad(v, width, fill, left=kind == "prompt") for v in values]
        batch[key] = torch.stack(values).to(device)
    return batch


def _pad(value: torch.Tensor, width: int, fill, left: bool) -> torch.Tensor:
    pad = value.new_full((width - value.shape[0], *value.shape[1:]), fill)
    return torch.cat([pad, value] if left else [value, pad])


def group_order(samples: list[dict], generator: torch.Generator) -> list[int]:
    """Indices of the samples, prompt groups kept together and the groups shuffled."""
    groups: dict[tuple, list[int]] = {}
    for i, s in enumerate(samples):
        groups.setdefault(tuple(s["prompt_ids"].tolist()), []).append(i)
    runs = list(groups.values())
    order = torch.randperm(len(runs), generator=generator).tolist()
    return [i for k in order for i in runs[k]]


def deal_groups(batch: dict, steps: int, per_rank: int, group, sp_rank: int, seed: int, pad_id: int) -> list[dict]:
    """This rank's `steps` micro-batches of `per_rank` completions each, dealt from its SP group's generation
    batches in shuffled prompt groups (module docstring); every rank of the group computes the same deal."""
    kinds = kinds_of(batch)
    mine = samples_of(batch, kinds)
    scalars = {k: v for k, v in batch.items() if torch.is_tensor(v) and v.dim() == 0}
    if group is None:
        everyone = [mine]
    else:
        everyone = [None] * dist.get_world_size(group)
        dist.all_gather_object(everyone, mine, group=group)
    union = [s for part in everyone for s in part]
    order = group_order(union, torch.Generator().manual_seed(seed))
    sp = len(everyone)
    device = batch["completion_ids"].device
    out = []
    for k in range(steps):
        start = (k * sp + sp_rank) * per_rank
        out.append(batch_of([union[i] for i in order[start : start + per_rank]], kinds, scalars, pad_id, device))
    return out
