"""Recipe checks for evaluation under sequence parallelism, called once from config.recipe.check_recipe."""


def evaluation_problems(recipe, sft, model, topo, source: str) -> list[str]:
    """Every reason the recipe's eval settings cannot run on its SP mesh, each with the fix."""
    problems = []
    if recipe.retrieval_eval_steps < 0 or recipe.retrieval_eval_samples < 1:
        problems.append(
            f"{source}: `retrieval_eval_steps` must be >= 0 (0: off) and `retrieval_eval_samples` >= 1, got "
            f"{recipe.retrieval_eval_steps} and {recipe.retrieval_eval_samples}"
        )
    if recipe.retrieval_eval_steps and (sft.max_length or 0) < 256:
        problems.append(
            f"{source}: `retrieval_eval_steps` needs `max_length` >= 256 (the tasks' needles and question)"
        )
    if sft.eval_strategy == "no" or topo.sp_size == 1:
        return problems
    if sft.per_device_eval_batch_size != sft.per_device_train_batch_size:
        # DeepSpeed's Ulysses attention checks every shard against the micro-batch size it was registered with
        problems.append(
            f"{source}: `per_device_eval_batch_size` {sft.per_device_eval_batch_size} must equal "
            f"`per_device_train_batch_size` {sft.per_device_train_batch_size} under sp={topo.sp_size} "
            "(Ulysses attention is built for one micro-batch size); "
            f"set `per_device_eval_batch_size: {sft.per_device_train_batch_size}`"
        )
    if recipe.prepare_data == "off":
        problems.append(
            f"{source}: evaluation under sp={topo.sp_size} shards eval batches like training only for prepared "
            "data; set `prepare_data: packed` (or `unpacked`) with `eval_holdout`, or `eval_strategy: no`"
        )
    return problems
