"""The attention stack is installed in its one order, and every upstream function is replaced at one site.

The order check installs the real stack (longctx/training/attention/stack.py) in a fresh interpreter, for a
gpt-oss-shaped config (sinks and sliding windows, so isolation and the sinks layer both register `sdpa`), and reads
what the registries then hold: the sinks layer over the isolated `sdpa`, DeepSpeed's registration replaced once
with every SP need on. The same run with two layers swapped must be reported (the check can fail).
"""

import json
import subprocess
import sys
from collections import defaultdict

import pytest

from tests.helpers import REPO
from tests.launch.test_patches import dotted

INSTALL = r"""
import json, sys
from types import SimpleNamespace
from transformers import GptOssConfig
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPAttentionHF
from longctx.training.attention import isolation, sinks, stack
from longctx.training.sequence_parallel import registration

order = sys.argv[1].split(",")
stack.ATTENTION_STACK = tuple(sorted(stack.ATTENTION_STACK, key=lambda layer: order.index(layer.name)))
recipe = SimpleNamespace(
    allow_cross_document_attention=False, config_source="r.yaml", accelerate_config="accelerate_configs/cpu-sp2.yaml"
)
model = SimpleNamespace(config=GptOssConfig(num_hidden_layers=2))
model_args = SimpleNamespace(attn_implementation="sdpa", model_name_or_path=None, model_revision=None)
stack.install_attention_stack(recipe, model_args, model)
registered = UlyssesSPAttentionHF.__dict__["register_with_transformers"].__func__
print(json.dumps({
    "sdpa_is_sinks": ALL_ATTENTION_FUNCTIONS["sdpa"] is sinks.sink_sdpa_attention,
    "sinks_wrap_isolation": sinks._state.get("inner") is isolation.isolated_sdpa_attention,
    "registration_is_ours": registered is registration.register_sp_attention,
    "registration_wraps": registered.__wrapped__.__module__,
    "needs": {k: bool(v) for k, v in registration._needs.items() if k != "rows"},
}))
"""


def installed(order: list[str]) -> dict:
    command = [sys.executable, "-c", INSTALL, ",".join(order)]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def stack_problems(state: dict) -> list[str]:
    """What is wrong with the installed stack, in words (empty: each layer sits over the one below)."""
    problems = []
    if not (state["sdpa_is_sinks"] and state["sinks_wrap_isolation"]):
        problems.append("`sdpa` is not the sinks layer over the isolated sdpa (isolation must come first)")
    if not state["registration_is_ours"] or state["registration_wraps"].split(".")[0] != "deepspeed":
        problems.append("DeepSpeed's registration is not replaced once, by registration.py, over DeepSpeed's own")
    if state["needs"] != {"keep_in_eval": True, "ring": False, "layer_shapes": True}:
        problems.append(f"SP registration needs not all on: {state['needs']}")
    return problems


@pytest.mark.subprocess
def test_the_stack_installs_each_layer_over_the_one_below():
    from longctx.training.attention.stack import ATTENTION_STACK

    names = [layer.name for layer in ATTENTION_STACK]
    assert stack_problems(installed(names)) == []
    swapped = [names[1], names[0], *names[2:]]  # sinks and windows before isolation
    assert stack_problems(installed(swapped)), f"the order check passed the swapped stack {swapped}"


def replacement_sites() -> dict[str, set[str]]:
    """{replaced upstream attribute (as the code spells it): the functions that assign it} over our code."""
    import ast

    from tests.launch.test_patches import _is_function

    sites: dict[str, set[str]] = defaultdict(set)
    ours = [p for folder in ("longctx", "data_prep", "recipes", "scripts") for p in (REPO / folder).rglob("*.py")]
    for path in ours:
        tree = ast.parse(path.read_text())
        defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        for top in tree.body:
            for node in ast.walk(top):
                if not isinstance(node, ast.Assign) or not _is_function(node.value, defined):
                    continue
                for target in node.targets:
                    if isinstance(target, ast.Attribute) and dotted(target.value) not in ("self", "cls"):
                        owner = getattr(top, "name", "<module>")
                        sites[dotted(target)].add(f"{path.relative_to(REPO)}:{owner}")
    return sites


def test_every_upstream_function_is_replaced_at_one_site():
    """DeepSpeed's `register_with_transformers` was wrapped by three installers (eval, ring, layer shapes) and a
    fourth around GRPO's engine: what ran depended on their order. One site per replaced attribute."""
    twice = {target: sorted(owners) for target, owners in replacement_sites().items() if len(owners) > 1}
    assert not twice, f"replaced at more than one site (compose them in one replacement): {twice}"
    assert replacement_sites()["UlyssesSPAttentionHF.register_with_transformers"] == {
        "longctx/training/sequence_parallel/registration.py:install_sp_registration"
    }
