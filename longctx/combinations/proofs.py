"""Which test proves which combination: each entry is one configuration a test trains (one value per axis, the
trainer's bases where it names none) and the pytest node ids that check it against a reference.

A pair of values is proven by an entry whose configuration holds both. The pairwise runs
(tests/parity/test_pairwise.py, one configuration of the covering array each) are entries too, added by
`pairwise_proofs`. Every node id here must exist in the test suite and every configuration must pass the real checks
(tests/parity/test_combinations.py checks both). Write an entry only for what the test really runs: its recipe, its
mesh, its DeepSpeed JSON, its data.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Proof:
    nodes: tuple[str, ...]  # pytest node ids
    values: tuple[str, ...]  # `axis=value` ids; every other axis at the trainer's base
    gpu: bool = False  # a GPU test (marker `gpu`): proves values a CPU run cannot reach


def proof(nodes, *values: str, gpu: bool = False) -> Proof:
    return Proof(tuple(nodes) if isinstance(nodes, (list, tuple)) else (nodes,), values, gpu)


SP = "tests/parity/test_sp_parity.py::"
DPO = "tests/parity/test_dpo_parity.py::"
GRPO = "tests/parity/test_grpo_parity.py::test_launched_grpo_equals_every_completion_alone"
GRPO_FAMILY = "tests/parity/test_grpo_parity.py::test_each_family_in_grpo_equals_every_completion_alone"
ALST = ("checkpointing=offload", "memory=tiled_mlp")  # gradient checkpointing, checkpoint offload, TiledMLP
SFT_PARITY = ("trainer=sft", "data=trl")  # tests/recipes/parity.yaml: prompt/completion rows, TRL tokenizes

PROOFS: tuple[Proof, ...] = (
    # SFT at sp=1 vs sp=2 / 4 (tests/recipes/parity.yaml), ZeRO-2, and the ALST switches at sp=2
    proof(SP + "test_sp_matches_sp1[2]", *SFT_PARITY),
    proof(SP + "test_sp_matches_sp1[4]", *SFT_PARITY),
    proof(SP + "test_zero2_matches_sp1", *SFT_PARITY, "zero=2"),
    proof(SP + "test_alst_features_match_plain_sp2", *SFT_PARITY, "memory=tiled_mlp", "checkpointing=selective"),
    proof(SP + "test_alst_features_match_plain_sp2", *SFT_PARITY, "memory=tiled_mlp", "checkpointing=offload"),
    # DPO (tests/recipes/dpo-parity.yaml: packed pairs, 4 held-out pairs evaluated) at sp=1, 2, 4 and sp=2 x dp=2
    proof(DPO + "test_sp2_matches_sp1", "trainer=dpo", "eval=on"),
    proof(DPO + "test_sp2_matches_sp1", "trainer=dpo", "eval=on", "mesh=none"),
    proof(DPO + "test_sp2_dp2_matches_sp1_dp2", "trainer=dpo", "eval=on", "dp=2"),
    # GRPO against every completion alone (tests/recipes/grpo-parity.yaml: prompt rows, `prepare_data: unpacked`)
    proof(GRPO + "[sp2-shared-dapo]", "trainer=grpo", "prefix=on"),
    proof(GRPO + "[sp2-documents-grpo]", "trainer=grpo", "prefix=off"),
    proof(GRPO + "[sp2-dp2-shard-shared-dapo]", "trainer=grpo", "prefix=on", "dp=2"),
    proof(GRPO + "[sp2-zero2-shared-grpo]", "trainer=grpo", "prefix=on", "zero=2"),
    proof(GRPO + "[sp2-shared-grpo-checkpointing-alst]", "trainer=grpo", "prefix=on", *ALST),
    proof(GRPO + "[sp2-shared-dapo-lora]", "trainer=grpo", "prefix=on", "peft=lora"),
    # each family row GRPO trains (Qwen3.5 refused; gpt-oss with `router_aux_loss_coef: 0`, which its map value
    # does not set: refused there), sp=1 with full checkpointing
    proof(
        GRPO_FAMILY + "[qwen3-sp1-shared-dapo-full]",
        "trainer=grpo",
        "family=qwen3",
        "mesh=none",
        "checkpointing=full",
        "prefix=on",
    ),
    proof(GRPO_FAMILY + "[gemma4-sp2-documents-dapo]", "trainer=grpo", "family=gemma4", "prefix=off"),
)

# Values whose accepted pairs nothing above or in the pairwise runs proves yet, each with why: the map shows their
# pairs as unproven with this reason, and tests/parity/test_combinations.py fails on any other unproven pair.
GAPS: dict[str, str] = {}  # none left: GRPO's pairs are proven by its parity cases (issue 39)
