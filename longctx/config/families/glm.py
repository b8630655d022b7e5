"""GLM's DeepSeek sparse attention model (`glm_moe_dsa`, GLM-5): indexed attention, refused under SP."""

from longctx.config.families.common import INDEXED_ATTENTION
from longctx.config.families.schema import Family

GLM_MOE_DSA = Family(
    name="GLM MoE DSA",
    model_types=("glm_moe_dsa",),
    layer_types=(INDEXED_ATTENTION,),
    default_layer_type="indexed_attention",
)
