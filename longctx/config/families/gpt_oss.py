"""gpt-oss: a learned attention sink per head on every layer, alternating 128-token sliding windows and full
attention, 32 experts top-4 with the router's load-balancing loss on by default."""

from longctx.config.families.schema import SDPA, Family, LayerType, StandInTokens

SINK_UNDER_SP = "Ulysses by heads; each rank takes the sinks of its own query heads and the sink enters as a "
SINK_UNDER_SP += "log-sum-exp rescale of the per-document kernel's output (longctx/training/attention/sinks.py)"

GPT_OSS = Family(
    name="gpt-oss",
    model_types=("gpt_oss",),
    layer_types=(
        LayerType(name="full_attention", mixer="softmax", under_sp=SINK_UNDER_SP, proven=(SDPA,)),
        LayerType(
            name="sliding_attention", mixer="softmax", under_sp=SINK_UNDER_SP + "; window per document", proven=(SDPA,)
        ),
    ),
    snapshots=("openai/gpt-oss-20b",),
    recipes=(("gptoss20b-128k", "gpt-oss-20b/sft-128k-sp8"),),
    training_template="recipes/assets/chat_templates/gpt-oss-training.jinja",
    stand_in_tokens=StandInTokens(  # harmony (o200k_harmony): config.json eos 200002 = <|return|>, pad 199999
        bos=None,  # <|startoftext|> exists, but neither the tokenizer nor the harmony template adds it
        eos="<|return|>",
        pad="<|endoftext|>",
        extra=("<|startoftext|>", "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|call|>"),
        # harmony renders a long fixed system preamble on every conversation: at the default size the stand-in
        # spends ~200 of the rehearsal's 256 tokens on it, so it learns the rendered text with a larger vocabulary
        vocab=1024,
        learns_rendered_template=True,
    ),
    sinks=True,
    sink_model_class="transformers.models.gpt_oss.modeling_gpt_oss.GptOssPreTrainedModel",
    runtime_patches=(
        "transformers.models.gpt_oss.modeling_gpt_oss.eager_attention_forward",
        "transformers.models.gpt_oss.modeling_gpt_oss.GptOssPreTrainedModel",
    ),
    parity_tests=("tests/parity/test_gpt_oss_parity.py",),
)
