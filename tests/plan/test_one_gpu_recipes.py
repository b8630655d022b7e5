"""The one-GPU 8B recipes, each chosen by the memory plan for one node: preflight passes it there, refuses it on less.

- `llama3.1-8b/sft-192k-1gpu-h200`: one H200 (141 GB) with 128 GiB of host RAM, the machine this project borrows;
  ZeRO-3 partial optimizer offload (`offload_optimizer.ratio: 0.75`) is what brings the host under its RAM.
- `llama3.1-8b/sft-256k-1gpu-h100`: one 80 GB GPU with 256 GiB of host RAM; the whole optimizer and every
  checkpointed layer input on the host.
recipes/README.md's cells for them are the plan on their node (as tests/plan/test_catalog.py holds the others
at 80 GB).
"""

import json

import pytest

from longctx.commands.validate import main
from tests.helpers import REPO

H200 = ("llama3.1-8b/sft-192k-1gpu-h200", ["--num-gpus", "1", "--gpu-memory-gb", "141", "--host-memory-gb", "128"])
H100 = ("llama3.1-8b/sft-256k-1gpu-h100", ["--num-gpus", "1", "--gpu-memory-gb", "80", "--host-memory-gb", "256"])


def report(recipe: str, flags: list[str], capsys) -> dict:
    main([recipe, *flags, "--json"])
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("recipe", "flags"), [H200, H100], ids=["h200", "h100"])
def test_passes_on_its_node_with_no_warning(recipe, flags, capsys):
    out = report(recipe, flags, capsys)
    assert out["ok"] and out["warnings"] == 0, out["problems"]


def test_h200_recipe_is_refused_with_less_host_ram_or_an_80gb_gpu(capsys):
    recipe, flags = H200
    less_ram = report(recipe, flags[:-1] + ["96"], capsys)
    assert not less_ram["ok"] and "host memory" in less_ram["problems"][0]["message"]
    smaller_gpu = report(recipe, ["--num-gpus", "1", "--gpu-memory-gb", "80", "--host-memory-gb", "128"], capsys)
    assert not smaller_gpu["ok"] and "does not fit" in smaller_gpu["problems"][0]["message"]


def test_h100_recipe_is_refused_on_the_128_gib_node(capsys):
    recipe, flags = H100
    out = report(recipe, flags[:-1] + ["128"], capsys)
    assert not out["ok"] and "host memory" in out["problems"][0]["message"]


def test_without_partial_offload_the_h200_node_refuses_it(capsys):
    """The negative control of the choice: the same recipe with the whole optimizer offloaded needs 139 GiB."""
    recipe, flags = H200
    main([recipe, *flags, "--json", "--accelerate-config", "accelerate_configs/sp1-offload-optimizer.yaml"])
    out = json.loads(capsys.readouterr().out)
    assert not out["ok"] and out["plan"]["host_per_node_gib"] > 128


@pytest.mark.parametrize(("recipe", "flags"), [H200, H100], ids=["h200", "h100"])
def test_catalog_cell_is_the_plan_on_its_node(recipe, flags, capsys):
    plan = report(recipe, flags, capsys)["plan"]
    cell = (
        f"on its node: {plan['total_gib']:.1f} GiB of {plan['gpu_gib']:.1f} "
        f"(host {plan['host_per_node_gib']:.0f} GiB of {plan['host_memory_gib']:.0f})"
    )
    text = (REPO / "recipes" / "README.md").read_text()
    assert f"| `{recipe}` |" in text and f" | {cell} | " in text, cell
