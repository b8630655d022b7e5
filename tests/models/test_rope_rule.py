"""One rope-scaling rule: each GPU recipe's header states the positions its rope covers, preflight computes the
same number, and preflight refuses a rope that covers other than what `max_position_embeddings` claims."""

import re

import pytest

from longctx.config.paths import RECIPES_DIR
from longctx.config.topology import load_yaml_mapping
from longctx.preflight.facts import position_range, recipe_facts

GPU_RECIPES = sorted(p for p in RECIPES_DIR.rglob("*.yaml") if not load_yaml_mapping(p).get("use_cpu"))
COVERS = re.compile(r"covers ([\d,]{5,}) positions")


def facts_of(raw: dict):
    return recipe_facts(raw["model_name_or_path"], raw.get("model_init_kwargs"), raw.get("model_config_overrides"))


@pytest.mark.parametrize("path", GPU_RECIPES, ids=lambda p: str(p.relative_to(RECIPES_DIR)))
def test_header_states_the_covered_positions(path):
    header = path.read_text().split("\naccelerate_config:")[0]
    stated = [int(n.replace(",", "")) for n in COVERS.findall(header)]
    assert stated, f"{path.name}: the header must say `covers N positions`"
    raw = load_yaml_mapping(path)
    facts = facts_of(raw)
    trained = raw.get("max_length") or raw["max_prompt_length"] + raw["max_completion_length"]  # GRPO: prompt + answer
    assert stated[-1] == position_range(facts) >= trained
    claimed = (raw.get("model_config_overrides") or {}).get("max_position_embeddings")
    assert claimed in (None, position_range(facts))


def test_llama_recipes_share_one_factor_per_position():
    """factor / covered positions is the same for every Llama recipe that scales rope (the llama3 rule)."""
    ratios = set()
    for path in GPU_RECIPES:
        raw = load_yaml_mapping(path)
        rope = (raw.get("model_config_overrides") or {}).get("rope_parameters")
        if rope and rope["rope_type"] == "llama3":
            ratios.add(position_range(facts_of(raw)) / rope["factor"])
    assert ratios == {16384.0}


def test_preflight_refuses_a_rope_that_covers_more_than_claimed(capsys, tmp_path):
    import json

    import yaml

    from longctx.commands.validate import main

    raw = yaml.safe_load((RECIPES_DIR / "llama3.1-8b/sft-1m-4x8-sp8-dp4.yaml").read_text())
    raw["model_config_overrides"]["rope_parameters"]["factor"] = 128.0  # the recipe's old value
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(raw))
    assert main([str(tmp_path / "recipe.yaml"), "--json", "--intended"]) == 1
    (problem,) = [p for p in json.loads(capsys.readouterr().out)["problems"] if "rope" in p["key"]]
    assert "covers 2097152 positions but max_position_embeddings is 1048576" in problem["message"]
    assert "factor: 64.0" in problem["fix"]
