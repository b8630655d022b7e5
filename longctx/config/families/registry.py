"""The model families this repository knows, and the one lookup every reader goes through.

Add a family by adding its module beside this one and its row to FAMILIES (docs/adding-a-model.md walks through
it); `registry_problems` (run by tests/test_families.py) fails when a shipped snapshot or recipe has no row, or
a row names a file, recipe or type that is not there.
"""

from longctx.config.families.deepseek import DEEPSEEK_V3_2, DEEPSEEK_V4
from longctx.config.families.gemma4 import GEMMA4
from longctx.config.families.glm import GLM_MOE_DSA
from longctx.config.families.gpt_oss import GPT_OSS
from longctx.config.families.llama import LLAMA
from longctx.config.families.llama4 import LLAMA4
from longctx.config.families.qwen3 import QWEN3, QWEN3_MOE
from longctx.config.families.qwen3_5 import QWEN3_5, QWEN3_5_MOE, QWEN3_NEXT
from longctx.config.families.schema import Family

# The rows proven under SP, then the ones that record why a family is refused under it (the attention-pattern
# gate, longctx/config/rules/attention_patterns.py, names the reason)
FAMILIES: tuple[Family, ...] = (
    *(LLAMA, QWEN3, QWEN3_MOE, QWEN3_5, QWEN3_5_MOE, QWEN3_NEXT, GPT_OSS, GEMMA4),
    *(LLAMA4, DEEPSEEK_V3_2, GLM_MOE_DSA, DEEPSEEK_V4),
)


def family_by_model_type(model_type: str | None, families=FAMILIES) -> Family | None:
    return next((f for f in families if model_type in f.model_types), None)


def family_of(config, families=FAMILIES) -> Family | None:
    """The family of a config (dict or transformers config): its language model's `model_type` first (a
    multimodal checkpoint's `text_config`), then the outer one."""
    get = config.get if isinstance(config, dict) else lambda key, default=None: getattr(config, key, default)
    text = get("text_config")
    inner = (text.get("model_type") if isinstance(text, dict) else getattr(text, "model_type", None)) if text else None
    return family_by_model_type(inner, families) or family_by_model_type(get("model_type"), families)


def short_names(families=FAMILIES) -> dict[str, str]:
    """Every catalog recipe's short name (`make sft RECIPE=llama8b-256k`) -> its name under recipes/."""
    return {short: recipe for family in families for short, recipe in family.recipes}


def training_templates(families=FAMILIES) -> dict[str, str]:
    """model_type -> the training chat template (with generation markers) to suggest for it."""
    return {t: f.training_template for f in families if f.training_template for t in f.model_types}


def sink_model_types(families=FAMILIES) -> tuple[str, ...]:
    return tuple(t for f in families if f.sinks for t in f.model_types)


def gated_attention_types(families=FAMILIES) -> tuple[str, ...]:
    return tuple(t for f in families if f.gated_attention for t in f.model_types)


def linear_attention_classes(families=FAMILIES) -> dict[str, str]:
    """model_type -> the upstream Gated DeltaNet class longctx/training/layers/linear_attention.py makes exact."""
    return {t: f.linear_attention_class for f in families if f.linear_attention_class for t in f.model_types}


def _duplicates(values) -> list:
    from collections import Counter

    return [value for value, count in Counter(values).items() if count > 1]


def registry_problems(families=FAMILIES) -> list[str]:
    """Everything wrong between the rows and the repository: one line each, naming the row and the fix."""
    import json

    from longctx.config.paths import ARCHITECTURES_DIR, RECIPES_DIR, REPO_ROOT, recipe_names

    problems = [f"model_type {t!r} is in two rows" for t in _duplicates(t for f in families for t in f.model_types)]
    problems += [f"short name {s!r} is in two rows" for s in _duplicates(s for f in families for s, _ in f.recipes)]
    claimed = {s for f in families for s in f.snapshots}
    for snapshot in sorted(
        str(p.parent.relative_to(ARCHITECTURES_DIR)) for p in ARCHITECTURES_DIR.glob("*/*/config.json")
    ):
        if snapshot not in claimed:
            problems.append(f"snapshot {snapshot} has no family row: add it to its family's `snapshots`")
    named = {r for f in families for _, r in f.recipes}
    problems += [
        f"recipe {r} has no short name: add it to its family's `recipes`" for r in recipe_names() if r not in named
    ]
    for f in families:
        problems += _row_problems(f, json, ARCHITECTURES_DIR, RECIPES_DIR, REPO_ROOT)
    return problems


def _row_problems(family: Family, json, architectures, recipes_dir, root) -> list[str]:
    row = f"family {family.name!r}"
    problems = []
    for snapshot in family.snapshots:
        path = architectures / snapshot / "config.json"
        if not path.is_file():
            problems.append(f"{row}: snapshot {snapshot} has no {path.relative_to(root)}")
        elif family_of(json.loads(path.read_text()), (family,)) is None:
            problems.append(f"{row}: snapshot {snapshot}'s model_type is not one of {family.model_types}")
    for short, recipe in family.recipes:
        if not (recipes_dir / f"{recipe}.yaml").is_file():
            problems.append(f"{row}: short name {short} names recipes/{recipe}.yaml, which does not exist")
    if family.training_template and not (root / family.training_template).is_file():
        problems.append(f"{row}: training_template {family.training_template} does not exist")
    for test in family.parity_tests:
        if not (root / test).is_file():
            problems.append(f"{row}: parity test {test} does not exist")
    if family.layer_type(family.default_layer_type) is None:
        problems.append(f"{row}: default_layer_type {family.default_layer_type!r} is not among its layer_types")
    for kind in family.layer_types:
        if bool(kind.proven) == bool(kind.refused):
            problems.append(f"{row}: layer type {kind.name!r} needs either `proven` implementations or `refused`")
    if family.sinks != bool(family.sink_model_class):
        problems.append(f"{row}: `sinks` and `sink_model_class` go together")
    return problems
