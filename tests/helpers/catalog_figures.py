"""How recipes/README.md's catalog writes the plan's figures (tests/plan/test_catalog.py holds the table to them)."""


def length(tokens: int) -> str:
    """Tokens in K (1,024) below 1M, in M (1,048,576) from there."""
    return f"{tokens / 2**20:.2f}M" if tokens >= 2**20 else f"{tokens // 1024}K"


def catalog_cell(plan: dict, num_nodes: int) -> str:
    """The preflight column: GiB per GPU, the longest max_length that fits, host RAM per node (all terms)."""
    node = "/node" if num_nodes > 1 else ""
    fit, host = length(plan["max_length_that_fits"]), plan["host_per_node_gib"]
    return f"{plan['total_gib']:.1f} GiB (up to {fit} fits; host {host:.0f} GiB{node})"
