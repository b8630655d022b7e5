"""The model families this repository knows, and the one lookup every reader goes through.

Add a family by adding its module beside this one and its row to FAMILIES (docs/adding-a-model.md walks through
it); `registry_problems` (longctx/config/families/check.py, run by tests/models/test_families.py) fails when a shipped
snapshot or recipe has no row, or a row names a file, recipe or type that is not there.
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
# gate, longctx/config/rules/attention/attention_patterns.py, names the reason)
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


def linear_attention_classes(families=FAMILIES) -> dict[str, str]:
    """model_type -> the upstream Gated DeltaNet class longctx/training/layers/linear_attention.py makes exact."""
    return {t: f.linear_attention_class for f in families if f.linear_attention_class for t in f.model_types}
