"""The combination map (longctx/combinations/): every pair of recipe settings is refused by the real checks or
proven by a test that exists, and docs/combinations.md and the pairwise configurations are what the map generates.

Unit lane: the map is built once in this process (no process starts); the exact node ids, parametrized ones
included, are checked against `pytest --collect-only` in the subprocess lane.
"""

import ast
import subprocess
import sys

import pytest

from longctx.combinations.axes import VALUES, choice
from longctx.combinations.covering import cpu_pairs, row_pairs
from longctx.combinations.generate import PAIRWISE_VALUES, build
from longctx.combinations.proofs import GAPS, PROOFS
from longctx.combinations.table import PROVEN, REFUSED, UNPROVEN, combination_map
from longctx.combinations.verdict import Judge
from tests.helpers import REPO


@pytest.fixture(scope="module")
def judge():
    return Judge()


@pytest.fixture(scope="module")
def built(judge):
    return build(judge)


def by_ids(pairs) -> dict[frozenset, object]:
    return {frozenset((p.a, p.b)): p for p in pairs}


def unlisted_unproven(pairs) -> list[str]:
    return [f"{p.a} x {p.b}" for p in pairs if p.status == UNPROVEN and not p.gap]


def test_generated_files_are_committed(built):
    """docs/combinations.md and longctx/combinations/pairwise.json are exactly what `make combinations` writes
    (longctx/combinations/__main__.py renders the same two)."""
    from longctx.combinations.doc import PATH, render
    from longctx.combinations.generate import PAIRWISE_JSON, pairwise_text

    pairs, rows = built
    expected = {PATH: render(pairs, rows), PAIRWISE_JSON: pairwise_text(rows)}
    for name, text in expected.items():
        assert (REPO / name).read_text() == text, f"{name} is stale: run `make combinations`"


def test_every_accepted_pair_is_proven_or_refused(built):
    pairs, _ = built
    assert unlisted_unproven(pairs) == []


def test_a_pair_without_its_proof_is_reported(judge):
    """The check above can fail: without the declared proofs and pairwise runs, accepted CPU pairs are unproven."""
    pairs = combination_map(judge, proofs=())
    assert "trainer=dpo x prefix=on" in unlisted_unproven(pairs)
    assert not [p for p in pairs if p.status == PROVEN]


def test_the_verdicts_are_the_rules(built):
    """Refusals carry the rules' own messages; what the rules accept is judged accepted."""
    pairs = by_ids(built[0])
    sinks = pairs[frozenset(("family=gpt-oss", "mesh=ring"))]
    assert sinks.status == REFUSED and "attention sinks" in sinks.refusals[0]
    frozen = pairs[frozenset(("reference=frozen_model", "zero=2"))]
    assert frozen.status == REFUSED and frozen.refusals[0].startswith("reference_log_probs: keeps a second full model")
    sft_prefix = pairs[frozenset(("trainer=sft", "prefix=on"))]
    assert sft_prefix.status == REFUSED and sft_prefix.refusals[0].startswith("prefix_sharing: unknown key")
    assert pairs[frozenset(("trainer=dpo", "prefix=on"))].status == PROVEN


def test_prefix_sharing_on_a_gpu_ring_is_refused(judge):
    """The GPU platform is judged as a GPU recipe: issue 39's prefix sharing on a GPU ring is refused by name."""
    verdict = judge.verdict(choice("trainer=dpo", "prefix=on", "mesh=ring", "attention=flash_attention_2"))
    assert any(line.startswith("prefix_sharing: is on with a ring") for line in verdict.refusals)


@pytest.mark.parametrize("trainer", ["dpo", "grpo"])
@pytest.mark.parametrize(
    "family, refused", [("llama3.x", False), ("qwen3", False), ("qwen3.5", True), ("gpt-oss", True), ("gemma4", True)]
)
def test_prefix_sharing_is_refused_before_launch_where_the_run_refuses_it(judge, trainer, family, refused):
    """Linear-attention layers (Qwen3.5), sinks and sliding windows (gpt-oss, Gemma 4): the run time refused prefix
    sharing there (longctx/training/attention/stack.py) after validate had passed it; both read one reason now."""
    verdict = judge.verdict(choice(f"trainer={trainer}", f"family={family}", "prefix=on"))
    found = [line for line in verdict.refusals if line.startswith("prefix_sharing: is on, but ")]
    assert bool(found) == refused, verdict.refusals


def test_the_run_time_refuses_prefix_sharing_with_the_rules_reason():
    """The attention stack's per-model layer raises the rule's own reason on a model it cannot share prefixes in."""
    from types import SimpleNamespace

    from transformers import MistralConfig, MistralForCausalLM

    from longctx.config.recipe import RecipeError
    from longctx.training.attention.stack import MODEL_LAYERS

    config = MistralConfig(
        hidden_size=16, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        vocab_size=32, sliding_window=64, attn_implementation="sdpa",
    )  # fmt: skip
    (layer,) = [layer for layer in MODEL_LAYERS if layer.name == "prefix_sharing"]
    recipe = SimpleNamespace(config_source="recipe.yaml")
    with pytest.raises(RecipeError, match="sliding-window or linear-attention layers"):
        layer.install(MistralForCausalLM(config), recipe, SimpleNamespace(prefix_sharing=True))


def test_declared_proofs_are_accepted_configurations(judge):
    """A proof names a configuration the checks accept (a test of a refused one proves nothing here)."""
    refused = [(p.nodes[0], judge.verdict(choice(*p.values)).refusals) for p in PROOFS]
    assert [r for r in refused if r[1]] == []


def test_gaps_are_still_gaps(built):
    """A listed gap whose pairs are all proven or refused is stale: remove it from GAPS."""
    pairs, _ = built
    for value in GAPS:
        assert any(p.gap and value in (p.a, p.b) for p in pairs), f"{value} has no unproven pair left"


def test_pairwise_rows_cover_every_reached_pair_and_are_accepted(built, judge):
    """Each configuration passes the checks as a whole (a pair refused on the bases may be in one where it runs:
    selective checkpointing with LoRA under ZeRO-2), and together they hold every accepted pair of their values."""
    pairs, rows = built
    reached, _ = cpu_pairs(pairs, PAIRWISE_VALUES)
    covered = set().union(*(row_pairs(row) for row in rows))
    assert reached - covered == set()
    assert all(judge.verdict(choice(*row)).accepted for row in rows)
    assert all(VALUES[v].cpu and v in PAIRWISE_VALUES for row in rows for v in row)


def test_proof_node_ids_name_tests_that_exist(built):
    """Each proof's file defines its test function (parametrized ids: the subprocess test below)."""
    pairs, _ = built
    missing = []
    for node in {n for p in pairs for n in p.proofs}:
        path, name = node.split("::")[0], node.split("::")[-1].split("[")[0]
        tree = ast.parse((REPO / path).read_text())
        if name not in {f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)}:
            missing.append(node)
    assert missing == []


@pytest.mark.subprocess
def test_proof_node_ids_are_collected(built):
    """The exact node ids, parametrized ones included, as `pytest --collect-only -q` lists them (slow tests too)."""
    pairs, _ = built
    nodes = {n for p in pairs for n in p.proofs}
    files = sorted({n.split("::")[0] for n in nodes})
    argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "", "-p", "no:cacheprovider", *files]
    out = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600, check=False).stdout
    assert sorted(nodes - set(out.split())) == []
