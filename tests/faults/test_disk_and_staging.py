"""A run's disk and an offline node's cache, each held to its behaviour without starting a process
(docs/reliability.md); the real launches are tests/faults/test_faults_launch.py.

- disk: checkpoint size per ZeRO stage x what is kept against the free space; every GPU recipe's limit is the plan's;
- staging: what a recipe needs from the Hub, fetched through stand-in downloaders, and found missing offline.
"""

import json
import re
from types import SimpleNamespace

import pytest

from longctx.config.paths import REPO_ROOT, recipe_names, resolve_recipe
from longctx.config.topology import load_yaml_mapping
from longctx.launch.staging import Need, fetch, missing, needs
from longctx.memory_plan.arch import Arch
from longctx.memory_plan.checkpoint_size import GIB, checkpoint_bytes, disk_plan, suggested_limit

pytestmark = pytest.mark.faults


# ---- disk: the plan's checkpoint size, and every GPU recipe keeps what fits


def gpu_recipes() -> list[str]:
    return [name for name in recipe_names() if not load_yaml_mapping(resolve_recipe(name)).get("use_cpu")]


@pytest.mark.parametrize("name", gpu_recipes())
def test_every_gpu_recipe_keeps_the_checkpoints_the_plan_sizes_and_sets_a_collective_timeout(name):
    from longctx.preflight.load import Machine, load_launch

    launch = load_launch(name, [], Machine())
    zero = int(launch.ds["zero_optimization"]["stage"])
    lora = int(launch.model.lora_r) if launch.model.use_peft else None
    plan, _ = disk_plan(Arch.from_config(launch.facts.config), launch.sft, zero, lora)
    assert launch.sft.save_total_limit == suggested_limit(plan.checkpoint, plan.model)
    text = resolve_recipe(name).read_text()
    assert f"{plan.checkpoint / GIB:.2f} GiB a checkpoint" in re.search(r"save_total_limit:.*", text).group(0)
    assert launch.sft.ddp_timeout <= 1200  # not HF's 30 minutes


def test_the_checkpoint_size_counts_weights_and_optimizer_states_per_zero_stage():
    arch = Arch.from_config(json.loads((REPO_ROOT / "recipes/assets/tiny-llama/config.json").read_text()))
    assert checkpoint_bytes(arch, 3, weight_bytes=4) == 16 * arch.params  # fp32 weights + 12 bytes of AdamW
    assert checkpoint_bytes(arch, 2, weight_bytes=2) == 16 * arch.params  # bf16 file + module copy + 12
    assert checkpoint_bytes(arch, 3, weight_bytes=2, lora_rank=8) == 14 * arch.lora_params(8)


def test_preflight_refuses_a_run_whose_checkpoints_do_not_fit(monkeypatch, tmp_path):
    from longctx.preflight.checks import disk
    from longctx.preflight.run import preflight_parser, run_preflight

    recipe = "tiny-llama/sft-2k-cpu-sp2"  # fp32: 16 bytes a parameter a checkpoint, 4 the final model
    arch = Arch.from_config(json.loads((REPO_ROOT / "recipes/assets/tiny-llama/config.json").read_text()))
    one_kept = 2 * checkpoint_bytes(arch, 3, weight_bytes=4) + 4 * arch.params  # 1 kept + 1 being written + model
    free = int(one_kept / 0.95)  # fits one kept checkpoint, tightly; not two
    monkeypatch.setattr(disk.shutil, "disk_usage", lambda path: SimpleNamespace(free=free, total=2 * free))
    args = preflight_parser().parse_args([recipe, "--this-machine"])
    overrides = ["--output_dir", str(tmp_path / "out"), "--save_strategy", "steps", "--save_steps", "1"]
    problems = run_preflight(recipe, [*overrides, "--save_total_limit", "2"], args)[1]
    (refused,) = [p for p in problems if p.key == "output_dir"]
    assert refused.severity == "error" and "x 3 (save_total_limit 2 + 1 being written)" in refused.message
    assert refused.message.endswith("free: a save would fail") and "save_total_limit" in refused.fix
    tight = run_preflight(recipe, [*overrides, "--save_total_limit", "1"], args)[1]
    assert [p.message.endswith(": tight") for p in tight if p.key == "output_dir"] == [True]


# ---- staging a recipe for an offline node


def test_fetch_downloads_what_the_recipe_reads_and_nothing_local(capsys, monkeypatch):
    from longctx.commands.fetch import main

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # a machine with network; the downloads are stand-ins
    calls = []
    downloaders = {kind: (lambda need, kind=kind: calls.append((kind, need.name))) for kind in ("model", "tokenizer")}
    downloaders["dataset"] = lambda need: calls.append(("dataset", need.name, need.config))
    assert main(["llama8b-256k"], downloaders=downloaders) == 0
    assert calls == [("model", "meta-llama/Llama-3.1-8B-Instruct"), ("dataset", "THUDM/LongAlign-10k", None)]
    assert main(["tiny-llama/sft-2k-cpu-sp2"], downloaders=downloaders) == 0
    assert "reads only local files: nothing to fetch" in capsys.readouterr().out
    random = needs({"model_name_or_path": "org/model", "model_init": "random", "dataset_name": "org/data"})
    assert [n.kind for n in random] == ["tokenizer", "dataset"] and "config.json" in random[0].patterns
    assert fetch(random, {"tokenizer": lambda n: "t", "dataset": lambda n: "d"}, say=lambda line: None) == ["t", "d"]


def test_offline_the_missing_items_are_named_with_the_command_that_stages_them(capsys):
    from longctx.commands.fetch import main

    # the real probes: the cache only (`local_files_only`, datasets offline), never the network
    gone = missing([Need("model", "longctx-tests/never-cached"), Need("dataset", "longctx-tests/never-cached")])
    assert [n.kind for n in gone] == ["model", "dataset"]
    assert main(["llama8b-256k", "--check"], probes={"model": lambda n: False, "dataset": lambda n: True}) == 1
    said = capsys.readouterr().err
    assert "this machine is offline: model weights and config meta-llama/Llama-3.1-8B-Instruct." in said
    assert "`python -m longctx fetch llama8b-256k`" in said and "LongAlign" not in said


def test_eval_needs_no_staged_training_dataset_where_a_training_run_does():
    """`longctx eval` reads prepared rows only: offline, the recipe's uncached `dataset_name` must not stop it (it
    did: the Qwen3.5 eval test failed on `set-by-the-test`), while `make sft`'s preflight still names it."""
    from longctx.preflight.run import preflight_parser, run_preflight

    recipe = "tests/recipes/qwen35-parity.yaml"

    def dataset_problems(*flags: str) -> list:
        args = preflight_parser().parse_args([recipe, "--this-machine", *flags])
        _, problems, _ = run_preflight(recipe, [], args)
        return [p for p in problems if p.key == "dataset_name" and "not in the Hugging Face cache" in p.message]

    assert dataset_problems(), "a training launch must name the unstaged dataset"
    assert dataset_problems("--no-dataset") == []
