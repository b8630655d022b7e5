"""Help that tells the truth: each subcommand's own `--help` (its name, the short recipe names, one example), the
plan's assumed GPU memory and its zero rows explained, a large host need warned where the node's RAM is unknown,
eval's dry run on the recipe's own device, and recipe headers that name the attention backend the recipe sets.
In-process (the CLI's `main`, preflight's report), no process started."""

import re

import pytest
import yaml

from longctx.cli import main as cli
from longctx.config.families.registry import short_names
from longctx.preflight.run import preflight_parser, run_preflight
from tests.helpers import REPO

SUBCOMMANDS = ("sft", "dpo", "data", "validate", "plan", "probe", "rehearse", "eval", "fetch", "cp")


@pytest.mark.parametrize("sub", SUBCOMMANDS)
def test_each_subcommand_help_is_its_own_with_the_short_names_and_an_example(sub, capsys):
    """Before: `plan --help` printed validate's usage and `data --help` data_prep's; several listed no short names."""
    with pytest.raises(SystemExit) as done:
        cli([sub, "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: python -m longctx {sub} ")
    assert all(name in text for name in short_names()), text
    example = text.split("example:\n", 1)[1].strip().splitlines()[0]
    assert example.startswith(f"python -m longctx {sub} "), example


@pytest.mark.parametrize("sub", ("export", "ls"))
def test_the_subcommands_without_a_recipe_show_an_example(sub, capsys):
    with pytest.raises(SystemExit):
        cli([sub, "--help"])
    assert f"example:\n  python -m longctx {sub} " in capsys.readouterr().out


def plan_of(recipe: str, *flags: str) -> list[str]:
    from longctx.preflight.plan import plan_lines

    args = preflight_parser("plan").parse_args([recipe, *flags])
    launch, _, _ = run_preflight(recipe, [], args)
    return plan_lines(launch)


def test_the_plan_says_which_gpu_memory_it_assumed_and_why():
    """Before: "the memory-fit check was skipped", then a total "of 79.2 GiB per GPU" as if it were known."""
    (total,) = [line for line in plan_of("llama3.1-8b/sft-256k-sp8") if line.lstrip().startswith("total")]
    assert "of 79.2 GiB per GPU (assumed: an 80 GB GPU, the catalog's target" in total
    assert "no GPU is visible and no --gpu-memory-gb was given" in total
    lines = plan_of("llama3.1-8b/sft-256k-sp8", "--gpu-memory-gb", "141")
    (given,) = [line for line in lines if line.lstrip().startswith("total")]
    assert given.endswith("GiB per GPU (--gpu-memory-gb 141)")


def test_every_row_that_shows_zero_says_why():
    """Before: `attention 0.00` for Qwen3.5 with no word on why (the linear-attention mixer is the larger)."""
    rows = [line for line in plan_of("qwen3.5-27b/sft-256k-sp8") if re.match(r"^  \w+\s+0\.00", line)]
    assert rows and all("(" in row for row in rows), rows
    (attention,) = [row for row in rows if row.split()[0] == "attention"]
    assert "not counted: a layer runs one token mixer; the larger" in attention


def test_a_large_host_need_with_the_nodes_ram_unknown_is_a_warning_with_the_fix():
    """Before: a 500 GiB host requirement ended in "preflight ok" with a note."""
    args = preflight_parser().parse_args(["qwen3.5-27b/sft-256k-sp8", "--intended"])
    _, problems, _ = run_preflight("qwen3.5-27b/sft-256k-sp8", [], args)
    (host,) = [p for p in problems if "host memory" in p.message]
    assert host.severity == "warning" and "the node's RAM unknown" in host.message
    assert "--host-memory-gb" in host.fix and "pin_memory: false" in host.fix


def test_evals_dry_run_estimates_on_the_recipes_device():
    """Before: the CPU recipe was estimated "at 989 TFLOP/s on 2 GPUs"."""
    from longctx.evaluation.cost import cost_line, grid_cost

    cpu = cost_line(grid_cost("recipes/tiny-llama/sft-2k-cpu-sp2.yaml", [], [1024, 2048], 4))
    assert "on 2 CPU processes" in cpu and "TFLOP/s" not in cpu and "GPU" not in cpu
    gpu = cost_line(grid_cost("recipes/llama3.1-8b/sft-256k-sp8.yaml", [], [8192], 4))
    assert "TFLOP/s on 8 GPUs" in gpu


BACKENDS = {"sdpa": r"\bsdpa\b", "flash_attention_2": r"FlashAttention-2|flash_attention_2"}


@pytest.mark.parametrize("path", sorted((REPO / "recipes").rglob("*.yaml")), ids=lambda p: p.stem)
def test_a_recipe_header_names_the_attention_backend_the_recipe_sets(path):
    """Before: llama3.1-8b/sft-256k-sp8's header said FlashAttention-2 keeps the packed conversations apart, while
    the recipe sets sdpa. The header's `Attention:` line, and any sentence saying which backend keeps documents
    apart, must name the recipe's own `attn_implementation`."""
    text = path.read_text()
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    backend = yaml.safe_load(text)["attn_implementation"]
    said = re.search(r"^# Attention: (\S+?)[,.]", header, re.MULTILINE)
    assert said is None or said.group(1) == backend, said.group(0)
    for sentence in re.findall(r"[^.(]*keeps[^.]*", header):
        named = [name for name, pattern in BACKENDS.items() if re.search(pattern, sentence)]
        assert named in ([], [backend]), sentence


def test_the_gpu_node_doc_opens_with_a_first_hour_checklist_and_names_no_machine_of_ours():
    """Before: lab notes with this project's machine paths (/work/...) and no first-hour checklist for a node; the
    checklist's commands are held to the code by tests/user/test_docs.py like every documented command."""
    text = (REPO / "docs/gpu-node.md").read_text()
    assert "## The first hour on an 8-GPU node" in text.split("## Install on the node", 1)[0]
    checklist = text.split("## The first hour on an 8-GPU node", 1)[1].split("\n## ")[0]
    steps = re.findall(r"^\d+\. ", checklist, re.MULTILINE)
    assert len(steps) >= 6
    assert not re.search(r"/work/|/root/|/home/", text)
