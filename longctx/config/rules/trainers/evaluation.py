"""Recipe rules for evaluation: eval under sequence parallelism and the in-training retrieval slice."""

from longctx.config.problems import Problem, error


def evaluation_problems(recipe, args, model, topo, source: str) -> list[Problem]:
    """Every reason the recipe's eval settings cannot run on its SP mesh, each with the fix."""
    problems = []
    if recipe.retrieval_eval_steps < 0 or recipe.retrieval_eval_samples < 1:
        msg = f"must be >= 0 (0: off), with `retrieval_eval_samples` >= 1 (got {recipe.retrieval_eval_samples})"
        problems.append(error(source, "retrieval_eval_steps", msg, "use e.g. 500 and 2"))
    if recipe.retrieval_eval_steps and (args.max_length or 0) < 256:
        msg = "needs `max_length` >= 256 (the tasks' needles and question)"
        problems.append(error(source, "retrieval_eval_steps", msg, "set `max_length`, or `retrieval_eval_steps: 0`"))
    if args.eval_strategy == "no" or topo.sp_size == 1:
        return problems
    if args.per_device_eval_batch_size != args.per_device_train_batch_size:
        # DeepSpeed's Ulysses attention checks every shard against the micro-batch size it was registered with
        msg = (
            f"{args.per_device_eval_batch_size} must equal `per_device_train_batch_size` "
            f"{args.per_device_train_batch_size} under sp={topo.sp_size} (Ulysses attention is built for one "
            "micro-batch size)"
        )
        fix = f"set `per_device_eval_batch_size: {args.per_device_train_batch_size}`"
        problems.append(error(source, "per_device_eval_batch_size", msg, fix))
    if recipe.prepare_data == "off":
        msg = f"under sp={topo.sp_size} shards eval batches like training only for prepared data"
        fix = "set `prepare_data: packed` (or `unpacked`) with `eval_holdout`, or `eval_strategy: no`"
        problems.append(error(source, "eval_strategy", msg, fix))
    return problems
