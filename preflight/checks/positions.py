"""Positions: max_length against the model's positional range, counting the recipe's rope scaling."""

from config.problems import Problem, error
from preflight.facts import position_range


def scaling_fix(max_length: int, native: int, theta) -> str:
    factor = -(-max_length // native)
    theta_part = f", rope_theta: {theta}" if theta else ""
    return (
        f"scale rope, e.g. model_config_overrides: {{rope_parameters: {{rope_type: yarn, factor: {float(factor)}, "
        f"original_max_position_embeddings: {native}{theta_part}}}}}, or lower max_length to {native}"
    )


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
    return problems
