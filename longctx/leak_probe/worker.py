"""One rank of the isolation probe: forward packed rows through the recipe's attention under Ulysses SP.

Run by `python -m longctx probe` (in-process at sp=1, under `accelerate launch` at sp>1). At sp>1 the
attention goes through DeepSpeed's real `UlyssesSPAttentionHF`, registered the way accelerate registers
it, and each rank holds one sequence shard, as DeepSpeed's SP dataloader adapter would give it.

Checks, each a list of failures (empty = pass):
- leak: perturb each document in turn; every other document's logits and loss must not move.
- parity (`--parity`): loss and gradients of the packed batch at this sp equal the packed batch at sp=1
  and the token-weighted sum over the documents run one by one, unpacked; and a batch of one-document rows
  at this sp equals it at sp=1.
- stock (`--compare-stock`): the same leak check, and the parity at this sp, with the isolation and the
  linear-attention layers switched to upstream's code (the negative control: it must leak / differ).

Hybrid models (Qwen3.5) get their Gated DeltaNet layers made sequence-parallel and document-restarting by the
entrypoint's own installer (longctx/training/layers/linear_attention.py), so the probe covers the linear layers too.
"""

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist

from longctx.config.keys import override_values, split_argv
from longctx.leak_probe.data import IGNORE, LAYOUTS, packed_batch, perturbed, shift_labels, spans
from longctx.leak_probe.model import VOCAB, build_probe_model, load_architecture, probe_model_source, tiny_config
from longctx.training.attention.isolation import install_document_isolation, set_isolation_enabled
from longctx.training.attention.sinks import enable_sinks_and_windows
from longctx.training.layers.linear_attention import install_linear_attention_sp, set_linear_attention_sp_enabled

LOGIT_ATOL = 1e-5  # fp32: an isolated document is computed bit-for-bit alike; a leak moves logits by ~1e-2
PARITY_RTOL = 1e-5  # fp32 reordering of the same sums (all-to-all, per-document calls), as in the SP parity gate
BF16_ATOL = 1e-2


def shard(t: torch.Tensor, rank: int, sp: int) -> torch.Tensor:
    chunk = t.shape[1] // sp
    return t[:, rank * chunk : (rank + 1) * chunk]


def gather(t: torch.Tensor, sp: int) -> torch.Tensor:
    if sp == 1:
        return t
    parts = [torch.empty_like(t) for _ in range(sp)]
    dist.all_gather(parts, t.contiguous())
    return torch.cat(parts, dim=1)


def token_losses(model, batch, rank: int, sp: int):
    """(local logits, local per-token CE) of this rank's shard; ignored targets contribute 0."""
    device = model.device
    out = model(
        input_ids=shard(batch["input_ids"], rank, sp).to(device),
        position_ids=shard(batch["position_ids"], rank, sp).to(device),
    )
    targets = shard(shift_labels(batch["labels"]), rank, sp).to(device)
    ce = torch.nn.functional.cross_entropy(
        out.logits.float().transpose(1, 2), targets, ignore_index=IGNORE, reduction="none"
    )
    return out.logits.float(), ce


def leak_failures(model, batch, layouts, rank: int, sp: int, atol: float) -> list[str]:
    """Perturb every document in turn; name each other document whose logits or loss moved."""
    with torch.no_grad():
        base_logits, base_ce = (gather(t, sp) for t in token_losses(model, batch, rank, sp))
        failures = []
        for row, lengths in enumerate(layouts):
            for j, span in enumerate(spans(lengths)):
                logits, ce = (gather(t, sp) for t in token_losses(model, perturbed(batch, row, span, VOCAB), rank, sp))
                for i, (s, e) in enumerate(spans(lengths)):
                    if i == j:
                        continue
                    moved = (logits[row, s:e] - base_logits[row, s:e]).abs().max().item()
                    dloss = abs(ce[row, s:e].sum().item() - base_ce[row, s:e].sum().item())
                    if moved > atol or dloss > atol * max(1.0, e - s):
                        failures.append(
                            f"row {row} document {i} (tokens {s}-{e - 1}) changed when document {j} "
                            f"(tokens {span[0]}-{span[1] - 1}) was perturbed: logits by up to {moved:.2e}, "
                            f"loss by {dloss:.2e}"
                        )
    return failures


def packed_loss_and_grads(model, batch, rank: int, sp: int):
    """Token-weighted mean loss of the packed batch and the full gradient (summed over the SP group)."""
    model.zero_grad()
    n_tokens = (shift_labels(batch["labels"]) != IGNORE).sum()
    _, ce = token_losses(model, batch, rank, sp)
    (ce.sum() / n_tokens).backward()
    loss = ce.sum().detach()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    if sp > 1:
        dist.all_reduce(loss)
        for g in grads.values():
            dist.all_reduce(g)
    return (loss / n_tokens).item(), grads


def separate_loss_and_grads(model, batch, layouts):
    """The same documents run one by one, unpacked (positions from 0, no neighbours), token-weighted."""
    model.zero_grad()
    n_tokens = (shift_labels(batch["labels"]) != IGNORE).sum()
    total = 0.0
    for row, lengths in enumerate(layouts):
        for s, e in spans(lengths):
            if e - s < 2:
                continue  # a one-token document has no target
            ids = batch["input_ids"][row : row + 1, s:e].to(model.device)
            logits = model(input_ids=ids, position_ids=torch.arange(e - s, device=model.device)[None]).logits
            ce = torch.nn.functional.cross_entropy(logits[0, :-1].float(), ids[0, 1:], reduction="sum")
            (ce / n_tokens).backward()
            total += ce.item()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    return total / n_tokens.item(), grads


def parity_failures(name: str, got, want, rtol: float = PARITY_RTOL) -> list[str]:
    (loss, grads), (ref_loss, ref_grads) = got, want
    failures = []
    if abs(loss - ref_loss) > rtol * abs(ref_loss):
        failures.append(f"{name}: loss {loss:.7f} vs {ref_loss:.7f}")
    worst = max(((grads[k] - ref_grads[k]).abs().max() / ref_grads[k].abs().max()).item() for k in grads)
    if worst > rtol * 10:
        failures.append(f"{name}: gradients differ by up to {worst:.2e} of their largest entry")
    return failures


def register_ulysses(model, attn: str, sp: int, batch_size: int) -> None:
    """DeepSpeed's Ulysses attention around whatever `attn` names now, as accelerate's prepare registers it."""
    from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPAttentionHF

    from longctx.training.sequence_parallel.per_layer_ulysses import fit_ulysses_to_layer_shapes

    fit_ulysses_to_layer_shapes()  # Gemma 4: each layer split by its own heads, as in training
    UlyssesSPAttentionHF.register_with_transformers(
        model_name_or_path=model,
        core_attn_implementation=attn,
        sequence_parallel_size=sp,
        seq_length=None,
        seq_length_is_variable=True,
        micro_batch_size=batch_size,
    )


def switch_stock(model, stock: bool) -> None:
    """Upstream's attention and Gated DeltaNet code (stock=True), or this repository's (False)."""
    set_isolation_enabled(not stock)
    set_linear_attention_sp_enabled(model, not stock)


def all_parity(model, batches: dict, reference: dict, rank: int, sp: int, prefix: str = "") -> list[str]:
    """Every batch's loss and gradients at this sp against `reference` (each batch at sp=1, ours)."""
    failures = []
    for kind, batch in batches.items():
        got = packed_loss_and_grads(model, batch, rank, sp)
        failures += parity_failures(f"{prefix}{kind} sp={sp} vs {kind} sp=1", got, reference[kind])
    return failures


def run(
    recipe: str, sp: int, rank: int, isolation: bool, compare_stock: bool, parity: bool, device="cpu", overrides=None
) -> dict:
    """Every requested check on this rank; the report is the same on all ranks."""
    name, attn, config_source = probe_model_source(recipe, overrides)
    config = tiny_config(load_architecture(name, config_source), sp)
    if device == "cuda" or attn.startswith("flash"):  # one GPU per rank
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    model = build_probe_model(config, attn, seed=0, device=device)
    layouts = LAYOUTS if attn == "sdpa" else LAYOUTS[:1]  # flash isolates from position_ids at one row only
    batch = packed_batch(config.vocab_size, layouts=layouts)
    batches = {
        "packed": batch,
        "unpacked": packed_batch(config.vocab_size, layouts=[[sum(layouts[0])]] * len(layouts)),
    }
    report = {"recipe": recipe, "model": name, "attn_implementation": attn, "sp": sp, "device": device}
    report["install"] = install_document_isolation(attn, config, enabled=isolation)
    sinks_line = enable_sinks_and_windows(config, attn)  # gpt-oss: wraps the `sdpa` just registered
    report["install"] += f"\n{sinks_line}" if sinks_line else ""
    report["linear_attention"] = install_linear_attention_sp(model, sp, recipe, name)
    switch_stock(model, not isolation)
    atol = LOGIT_ATOL if model.dtype == torch.float32 else BF16_ATOL
    if parity:
        sp1 = {kind: packed_loss_and_grads(model, b, 0, 1) for kind, b in batches.items()}
        separate = separate_loss_and_grads(model, batch, layouts)
    if sp > 1:
        register_ulysses(model, attn, sp, len(layouts))
    report["leaks"] = leak_failures(model, batch, layouts, rank, sp, atol)
    if compare_stock:
        switch_stock(model, True)
        report["stock_leaks"] = leak_failures(model, batch, layouts, rank, sp, atol)
        report["stock_parity"] = all_parity(model, batches, sp1, rank, sp, "stock ") if parity else []
        switch_stock(model, False)
    if parity:
        packed = packed_loss_and_grads(model, batch, rank, sp)
        report["packed_loss"], report["packed_sp1_loss"], report["separate_loss"] = (
            packed[0],
            sp1["packed"][0],
            separate[0],
        )
        report["parity"] = parity_failures(f"packed sp={sp} vs packed sp=1", packed, sp1["packed"])
        report["parity"] += parity_failures(f"packed sp={sp} vs documents one by one", packed, separate)
        report["parity"] += all_parity(model, {"unpacked": batches["unpacked"]}, sp1, rank, sp)
    return report


def main() -> None:
    from longctx.training.shutdown import exit_cleanly

    parser = argparse.ArgumentParser()
    parser.add_argument("recipe")
    parser.add_argument("--json", required=True)
    parser.add_argument("--no-isolation", action="store_true")
    parser.add_argument("--compare-stock", action="store_true")
    parser.add_argument("--parity", action="store_true")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--ring", type=int, default=1, help="R of a hybrid sp = U x R")
    own, overrides = split_argv(sys.argv[1:])  # recipe overrides after `--`, as the probe's command line got them
    args = parser.parse_args(own)
    sp, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    import deepspeed

    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))  # before NCCL binds this rank to a device
    # DeepSpeed's SP groups live on deepspeed.comm: NCCL between GPUs, gloo between CPU processes
    deepspeed.init_distributed(dist_backend="nccl" if args.device == "cuda" else "gloo")
    isolation = not args.no_isolation
    if args.ring > 1:  # hybrid Ulysses x ring: register_ulysses then builds it (longctx/training/sequence_parallel)
        from longctx.training.sequence_parallel.hybrid import use_ring

        use_ring(args.ring)
    report = run(
        args.recipe, sp, rank, isolation, args.compare_stock, args.parity, args.device, override_values(overrides)
    )
    report["ring"] = args.ring
    if rank == 0:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    exit_cleanly(0)


if __name__ == "__main__":
    main()
