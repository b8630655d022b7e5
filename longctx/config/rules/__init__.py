"""Every rule about a recipe, one module per subject, each rule written once and returning `Problem`s.

`recipe_problems` runs them all: the entrypoint refuses a recipe with any error among them (through
`longctx.config.recipe.parse_recipe`), and preflight reports the same list beside its machine-level checks.
"""

from longctx.config.problems import Problem
from longctx.config.rules.alst import alst_problems
from longctx.config.rules.attention.attention_patterns import attention_pattern_problems
from longctx.config.rules.attention.isolation import packed_isolation_problems
from longctx.config.rules.attention.prefix_sharing import prefix_sharing_problems
from longctx.config.rules.attention.ring import sp_topology_problems
from longctx.config.rules.data.chat_template import chat_template_problems
from longctx.config.rules.data.data_keys import data_key_problems
from longctx.config.rules.data.prepared_data import prepared_data_problems, row_balance_problems
from longctx.config.rules.resume import resume_recipe_problems
from longctx.config.rules.sequence import sequence_problems
from longctx.config.rules.trainers.evaluation import evaluation_problems
from longctx.config.rules.trainers.grpo import grpo_problems
from longctx.config.rules.trainers.preference import preference_problems
from longctx.config.rules.zero import zero_problems

RULES = (
    sequence_problems,
    sp_topology_problems,
    attention_pattern_problems,
    prepared_data_problems,
    row_balance_problems,
    data_key_problems,
    packed_isolation_problems,
    prefix_sharing_problems,
    resume_recipe_problems,
    alst_problems,
    evaluation_problems,
    chat_template_problems,
    zero_problems,
    preference_problems,
    grpo_problems,
)


def recipe_problems(recipe, args, model, topo, source: str) -> list[Problem]:
    """Every reason the recipe cannot run (errors) or runs worse than it could (warnings) on `topo`."""
    return [problem for rule in RULES for problem in rule(recipe, args, model, topo, source)]
