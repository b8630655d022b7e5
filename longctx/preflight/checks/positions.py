"""Positions: max_length against the model's positional range, counting the recipe's rope scaling."""

from longctx.config.problems import Problem, error
from longctx.preflight.facts import position_range


def scaling_fix(max_length: int, native: int, theta) -> str:
    factor = -(-max_length // native)
    theta_part = f", rope_theta: {theta}" if theta else ""
    return (
        f"scale rope, e.g. model_config_overrides: {{rope_parameters: {{rope_type: yarn, factor: {float(factor)}, "
        f"original_max_position_embeddings: {native}{theta_part}}}}}, or lower max_length to {native}"
    )


def needed_factor(facts, positions: int) -> float:
    """The factor of the recipe's rope type that covers `positions`, by the rule `position_range` applies."""
    rope, own = facts.rope_override, facts.native_rope
    kind = rope.get("rope_type", rope.get("type"))
    if kind == own.get("rope_type", own.get("type")) and own.get("factor"):
        return float(own["factor"]) * positions / facts.native_positions
    return positions / int(rope.get("original_max_position_embeddings") or facts.native_positions)


def coverage_problems(launch) -> list[Problem]:
    """The rope must cover exactly what `max_position_embeddings` claims: scaling further than the recipe needs
    stretches every long-range dimension for nothing (and the header's stated range would be wrong)."""
    facts = launch.facts
    claimed = facts.config.get("max_position_embeddings")
    if facts.rope_override is None or not isinstance(claimed, int) or claimed == facts.native_positions:
        return []
    reach = position_range(facts)
    if reach == claimed:
        return []
    msg = f"covers {reach} positions but max_position_embeddings is {claimed}"
    fix = f"set factor: {needed_factor(facts, claimed)} (covers {claimed}), or max_position_embeddings: {reach}"
    return [error(launch.source, facts.rope_override_key, msg, fix)]


def check(launch) -> list[Problem]:
    facts, max_length = launch.facts, launch.sft.max_length
    if facts is None:
        return []
    problems = []
    theta = facts.rope_theta
    if facts.rope_override is not None and "rope_theta" not in facts.rope_override:
        msg = "sets rope scaling without rope_theta, so the model falls back to the default theta (10000)"
        fix = f"add rope_theta: {theta} (the model's own) to it" if theta else "add the model's rope_theta to it"
        problems.append(error(launch.source, facts.rope_override_key, msg, fix))
    reach = position_range(facts)
    if max_length and reach and max_length > reach:
        native = facts.native_positions or reach
        how = f"rope override {facts.rope_override_key}" if facts.rope_override else "no rope scaling in the recipe"
        msg = f"{max_length} is beyond the {reach} positions {facts.source} covers ({how})"
        problems.append(error(launch.source, "max_length", msg, scaling_fix(max_length, native, theta)))
    return problems + coverage_problems(launch)
