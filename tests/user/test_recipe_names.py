"""Short recipe names: every catalog recipe has one, the catalog lists them, and `make sft RECIPE=llama8b-256k`
(the name the project's design uses) reaches that recipe's preflight; a near miss gets a "did you mean"."""

import re

import pytest

from longctx.cli import main
from longctx.config.families.registry import short_names
from longctx.config.paths import REPO_ROOT, recipe_names, resolve_recipe
from tests.helpers.launching.make import run_make


def test_every_recipe_has_one_short_name_and_each_resolves():
    assert sorted(short_names().values()) == recipe_names()  # one each, none for a recipe that does not exist
    for short, full in short_names().items():
        assert resolve_recipe(short) == resolve_recipe(full) and resolve_recipe(short).is_file()
        assert short not in recipe_names()  # a short name never shadows a full one


def test_the_catalog_lists_the_short_names():
    text = (REPO_ROOT / "recipes/README.md").read_text().split("<!-- short names -->", 1)[1]
    listed = dict(re.findall(r"^\| `([^`]+)` \| `([^`]+)` \|$", text.split("\n\n", 1)[0], re.MULTILINE))
    assert listed == short_names()


def test_a_near_miss_gets_did_you_mean(capsys):
    assert main(["sft", "llama8b-265k"]) == 2
    assert "did you mean llama8b-256k" in capsys.readouterr().err
    assert main(["plan", "llama3.1-8b/sft-256k"]) == 2
    assert "did you mean llama3.1-8b/sft-256k-sp8" in capsys.readouterr().err
    assert main(["sfy", "tiny-2k"]) == 2
    assert "no subcommand 'sfy'; did you mean sft?" in capsys.readouterr().err


@pytest.mark.subprocess
def test_make_sft_with_the_designs_name_reaches_that_recipes_preflight():
    """On this CPU machine preflight refuses the 8-GPU recipe: the expected end, before any download or launch."""
    proc = run_make("sft", "RECIPE=llama8b-256k", check=False, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "needs 8 GPUs per machine" in out, out
    assert "preflight FAILED: recipes/llama3.1-8b/sft-256k-sp8.yaml" in out and "[launch]" not in out
