"""The data report's work balance: how uneven a recipe's steps would be across its data-parallel ranks, modeled, in
the sampler's order and balanced by work (the recipe's `balance_rows`, longctx/training/data/balance.py).

Why in the data report: the rows are fixed here, and so is how unevenly their work falls (a row of one long
document against one of many short ones); what the recipe's mesh makes of it is known once the recipe is: dp (world
/ sp), the micro-batch and the accumulation. The figures come from the training side's own code on the prepared
rows, in the order accelerate's seeded shuffle gives epoch 0: slowest rank over the mean rank, each micro-step
lasting as long as its slowest rank. Modeled from FLOPs and the H100 SXM profile's rates, not measured.
"""

from pathlib import Path

from longctx.config.prepared_manifest import DATASET


def model_config(recipe, model) -> dict | None:
    """The recipe's model config.json as read offline (its `model_config_source`, a local folder, the Hub cache or a
    shipped snapshot); None when there is none here."""
    import json

    from longctx.config.model.config_json import find_model_config

    path = find_model_config(model.model_name_or_path, getattr(recipe, "model_config_source", None))
    return json.loads(path.read_text()) if path else None


def work_balance(folder: Path, recipe, args, model, topo) -> dict | None:
    """{dp, micro_batch, accumulation, steps, before, after} for the recipe's mesh; None for DPO rows or without a
    model config (nothing to weigh attention against)."""
    from accelerate.data_loader import SeedableRandomSampler
    from datasets import load_from_disk

    from longctx.training.data.balance import balanced_order, row_documents, row_work, step_imbalance
    from longctx.training.metrics.flops import FlopCounts
    from longctx.training.metrics.hardware import DEFAULT_PROFILE, PROFILES

    config = model_config(recipe, model)
    if getattr(recipe, "trainer", "sft") == "dpo" or config is None:
        return None
    dataset = load_from_disk(str(folder / DATASET))
    per_row, lengths = row_documents(dataset)
    hw = PROFILES[DEFAULT_PROFILE]
    work = row_work(per_row, lengths, FlopCounts.from_config(config), hw)
    dp = topo.world_size // topo.sp_size
    micro, accumulation = args.per_device_train_batch_size, args.gradient_accumulation_steps
    order = list(SeedableRandomSampler(range(len(dataset)), data_seed=args.data_seed or args.seed))  # epoch 0
    shape, window = (dp, micro, accumulation), getattr(recipe, "balance_window", 1)
    return {
        "dp": dp, "micro_batch": micro, "accumulation": accumulation, "window": window, "profile": hw.name,
        "steps": len(order) // (dp * micro * accumulation),
        "before": step_imbalance(order, work, *shape),
        "after": step_imbalance(balanced_order(order, work, *shape, window), work, *shape),
    }  # fmt: skip


def balance_line(found: dict | None, setting: str) -> str | None:
    """The data report's line (printed after its summary), or None when there is nothing to say."""
    if found is None:
        return None
    mesh = f"dp={found['dp']} x micro-batch {found['micro_batch']} x accumulation {found['accumulation']}"
    from longctx.training.data.balance import nothing_to_move

    why = nothing_to_move(found["dp"], found["micro_batch"], found["accumulation"], found["window"])
    if why:
        return f"[data] work balance at {mesh}: {why}; nothing to balance"
    window = f", balance_window: {found['window']}" if found["window"] > 1 else ""
    if not found["steps"]:
        return f"[data] work balance at {mesh}: fewer rows than one optimizer step takes"
    return (
        f"[data] work balance at {mesh} over {found['steps']} step(s), slowest rank / mean (modeled on the "
        f"{found['profile']} profile, not measured): {found['before']:.3f} in the sampler's order, "
        f"{found['after']:.3f} balanced by work (balance_rows: {setting}{window})"
    )
