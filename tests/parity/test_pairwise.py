"""Pairwise runs: each configuration of the covering array (longctx/combinations/pairwise.json, `make
combinations`) trained two steps on CPU through the real launch (`accelerate launch recipes/sft.py` or `dpo.py` with
the synthesized recipe, accelerate YAML and DeepSpeed JSON, its data prepared in process as `make sft` prepares it)
and compared with two full-batch SGD steps of plain transformers over every document or sequence run alone
(tests/helpers/references/pairwise.py). Together the configurations hold every accepted pair of the values they reach,
so a bug where two of them meet fails the configuration that holds both, named by its label.

The reference runs in float64 (and float32): losses and grad norms within 1e-5 relative of the float64 one, trained
weights within 1e-6, each plus K times the float32 reference's own distance from float64 (see K below). Each test
also checks its own gate against a control computed the same way with an SP bug (SFT: each document cut at its
middle, each half alone, as a rank attending to its own shard only; DPO: a rejected answer cut off its prompt, issue
39's ring): the run must be far from it.
"""

import json
import math

import pytest
import yaml

from longctx.combinations.axes import choice, configuration
from longctx.combinations.generate import PAIRWISE_JSON
from longctx.combinations.synthesize import write_configuration
from longctx.config.model.linear_layers import text_config
from tests.helpers import REPO
from tests.helpers.launching.launch import accelerate_launch, assert_ok, log_history
from tests.helpers.references import pairwise as pw

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

CONFIGURATIONS = json.loads((REPO / PAIRWISE_JSON).read_text())
STEPS = 2
RTOL, WEIGHT_ATOL = 1e-5, 1e-6
# The reference runs twice, in float32 and float64. A run is compared with the float64 one, allowed the gates'
# tolerance plus K times the float32 reference's own distance from it: fp32 itself is that far from exact, in any
# summation order. Two cases needed it: a DPO margin is beta x a difference of sums of ~200 log-probs (|S| ~ 1100,
# so fp32 holds each to ~1e-4: step-2 losses 1.3e-5 to 2.4e-5 relative apart from a float32 reference), and the
# Gemma 4 miniature's fp32 gradients are ~1e-5 relative from float64 in plain transformers itself (1.2e-5; ours, a
# packed row, 1.0e-5), which put its step-2 grad norms 5e-5 apart.
K = 4


def prepared_rows(path):
    """`make data` of the recipe file, in this process; its training rows."""
    from datasets import load_from_disk

    from data_prep.recipe_data import prepare_for_recipe
    from longctx.config.recipe import parse_recipe, recipe_topology

    recipe, config, model = parse_recipe(["--config", str(path)])
    folder = prepare_for_recipe(recipe, config, model, recipe_topology(recipe), str(path))
    return list(load_from_disk(str(folder / "dataset")))


def inputs(tmp_path, recipe: dict, mesh: dict) -> dict:
    """The recipe with the run's own model, data and folders (a miniature of the family, seeded)."""
    count = pw.TRAIN + (pw.HOLDOUT if recipe.get("eval_strategy") == "steps" else 0)
    ulysses = mesh["sp"] // mesh["ring"]
    model = pw.model_folder(tmp_path / "model", recipe["model_name_or_path"], ulysses, mesh["sp"])
    if recipe.get("trainer", "sft") == "sft":
        data = pw.write_documents(tmp_path / "data", count)
        dataset = data / ("ids" if recipe["prepare_data"] == "off" else "text")
    else:
        dataset = pw.write_pairs(tmp_path / "data", count)
    paths = {"dataset_name": str(dataset), "prepared_data_dir": str(tmp_path / "prepared")}
    paths["output_dir"] = str(tmp_path / "out")
    if "output_router_logits" in text_config(json.loads((model / "config.json").read_text())):
        # an MoE family's router load-balancing term is a statistic of the whole packed row, which a reference of
        # documents alone does not form: its exactness has its own gate (tests/parity/test_moe_router_parity.py,
        # sp 1/2/4, ZeRO-2, dp=2); here the LM term alone, as DPO must run anyway (it refuses the term)
        paths["router_aux_loss_coef"] = 0.0
    return {**recipe, **paths, "model_name_or_path": str(model), "model_init": "pretrained", "max_steps": STEPS}


def documents(recipe: dict, rows) -> list:
    """SFT: every trained document as (input_ids, labels, sequence ids); TRL's own rows are whole documents."""
    if recipe["prepare_data"] != "off":
        return pw.split_rows(rows)
    lines = (REPO / recipe["dataset_name"] / "train.jsonl").read_text().splitlines()
    return [(ids, ids, ids * 0) for ids in (pw.np.array(json.loads(line)["input_ids"]) for line in lines)]


def control_step(tmp_path, lora, loss_of) -> tuple[float, float]:
    """(loss, grad norm) of the first step of the control: the same reference over broken inputs."""
    losses, norms, _ = pw.reference_run(pw.plain_model(tmp_path / "model", lora), loss_of, 1)
    return losses[0], norms[0]


def reference(tmp_path, recipe: dict, mesh: dict, zero: dict, rows):
    """(the float32 run, the float64 run, the control's first (loss, grad norm), the loss's float32 resolution) of
    plain transformers, each sequence alone; a run is (losses, grad norms, weights)."""
    lora = recipe if recipe.get("use_peft") else None
    if recipe.get("trainer", "sft") == "sft":
        docs = documents(recipe, rows)
        runs = [
            pw.reference_run(pw.plain_model(tmp_path / "model", lora, dtype), lambda m: pw.sft_loss(m, docs), STEPS)
            for dtype in (pw.torch.float32, pw.torch.float64)
        ]
        halves = [tuple(part[: len(d[0]) // 2] for part in d) for d in docs]
        halves += [tuple(part[len(d[0]) // 2 :] for part in d) for d in docs]
        return (*runs, control_step(tmp_path, lora, lambda m: pw.sft_loss(m, halves)), 0.0)
    if recipe.get("prefix_sharing"):  # the same pairs laid out whole: each sequence is then one segment
        unshared = {**recipe, "prefix_sharing": False, "prepared_data_dir": str(tmp_path / "prepared-unshared")}
        rows = prepared_rows(write_configuration(tmp_path / "unshared", unshared, mesh, zero))
    pairs = pw.pairs_of(pw.split_rows(rows))
    simpo = recipe.get("loss_type") == "simpo"
    refs, runs = {}, []
    for dtype in (pw.torch.float32, pw.torch.float64):
        start = pw.plain_model(tmp_path / "model", None, dtype)
        with pw.torch.no_grad():
            refs[dtype] = [tuple(pw.token_log_probs(start, i, lab).sum() for i, lab, _ in pair) for pair in pairs]
        model = pw.plain_model(tmp_path / "model", lora, dtype)
        runs.append(pw.reference_run(model, lambda m, ref=refs[dtype]: pw.dpo_loss(m, pairs, ref, simpo), STEPS))
    cut = [(chosen, pw.without_prompt(rejected)) for chosen, rejected in pairs]
    control = control_step(tmp_path, lora, lambda m: pw.dpo_loss(m, cut, refs[pw.torch.float32], simpo))
    return (*runs, control, dpo_loss_resolution(pairs, refs[pw.torch.float64], simpo))


def dpo_loss_resolution(pairs, sums, simpo: bool) -> float:
    """How far float32 alone moves a DPO loss, from the float64 reference's starting log-prob sums: each margin is
    BETA x a difference of fp32 sums of ~200 log-probs (|S| ~ 1100, held to about eps32 x |S| each, in whatever
    order a run adds them: SP shards, packed rows, threads), and each pair's loss moves by sigmoid(-margin) times
    its margin's error. The K x float32-reference allowance is one sample of that error, and a small one when the
    reference and the ranks ran on one thread each (xdist workers, 2026-12-07): two LoRA configurations' step-2
    losses were 2.2e-5 and 1.9e-5 relative from float64, the float32 reference 7e-7; both pass on two threads."""
    eps, out = pw.torch.finfo(pw.torch.float32).eps, []
    for (chosen, rejected), (c, r) in zip(pairs, sums, strict=True):
        c, r = float(c), float(r)
        if simpo:
            counts = [max(int((lab[1:] != -100).sum()), 1) for _, lab, _ in (chosen, rejected)]
            margin = pw.BETA * (c / counts[0] - r / counts[1]) - pw.GAMMA
            size = abs(c) / counts[0] + abs(r) / counts[1]
        else:  # the policy starts as the reference: margin 0, four sums of the reference's size
            margin, size = 0.0, 2 * (abs(c) + abs(r))
        out.append(pw.BETA * eps * size / (1 + math.exp(margin)))
    return sum(out) / len(out)


def compared(history, weights, expected) -> list[str]:
    """What differs from the float64 reference by more than the tolerance plus K x the float32 reference's own
    distance from it (a DPO loss: plus its float32 resolution, `dpo_loss_resolution`)."""
    (losses, norms, trained), (losses64, norms64, trained64), _, resolution = expected
    found = []
    for step, row in enumerate(history):
        for key, want, want64, floor in (("loss", losses, losses64, resolution), ("grad_norm", norms, norms64, 0)):
            exact, fp32 = want64[step], want[step]
            if abs(row[key] - exact) > RTOL * abs(exact) + K * abs(fp32 - exact) + floor:
                found.append(
                    f"step {step + 1} {key} {row[key]:.8g}, each sequence alone {exact:.8g} ({fp32:.8g} fp32)"
                )
    weights = {k.replace("language_model.", ""): v for k, v in weights.items()}  # a multimodal family's save names
    keys = [k for k in weights if k in trained64]
    assert len(keys) == len(weights), f"weights the reference lacks: {sorted(set(weights) - set(trained64))[:4]}"
    for k in keys:
        exact = trained64[k]
        off, fp32_off = ((w.double() - exact).abs().max().item() for w in (weights[k], trained[k]))
        if off > WEIGHT_ATOL + K * fp32_off:
            found.append(f"trained weights {k} differ by {off:.2e} (fp32 reference: {fp32_off:.2e})")
    return found


@pytest.mark.parametrize("values", [c["values"] for c in CONFIGURATIONS], ids=[c["label"] for c in CONFIGURATIONS])
def test_trains_like_each_sequence_alone(tmp_path, values):
    from safetensors.torch import load_file

    recipe, mesh, zero = configuration(choice(*values))
    recipe = inputs(tmp_path, recipe, mesh)
    path = write_configuration(tmp_path / "files", recipe, mesh, zero)
    rows = prepared_rows(path) if recipe["prepare_data"] != "off" else [None] * pw.TRAIN
    assert len(rows) % mesh["dp"] == 0, f"{len(rows)} rows do not split over dp={mesh['dp']}"
    recipe["gradient_accumulation_steps"] = len(rows) // mesh["dp"]  # every row in every step
    path = write_configuration(tmp_path / "files", recipe, mesh, zero)
    accel = yaml.safe_load(path.read_text())["accelerate_config"]
    script = "recipes/dpo.py" if recipe.get("trainer") == "dpo" else "recipes/sft.py"
    proc = accelerate_launch(accel, script, ["--config", str(path)], timeout=900)
    assert_ok(proc)
    out = tmp_path / "out"
    weights = out / "model.safetensors"
    weights = load_file(weights if weights.is_file() else out / "adapter_model.safetensors")
    expected = reference(tmp_path, recipe, mesh, zero, rows)
    history = log_history(out)
    assert len(history) == STEPS
    print(f"loss resolution (float32): {expected[3]:.2e}")
    assert compared(history, weights, expected) == []
    # the gate must see the bug: the control's first loss or grad norm beyond tolerance, with a margin. A random
    # miniature barely reads its context: a row's documents attending to each other moved a Gemma 4 miniature's loss
    # by 8e-6 only (shard-local halves instead), and the halves moved the tiny Llama's by 2.5e-6; the gradient of
    # the attention weights is all context, so the grad norm moves (the gate compares both)
    (loss, norm), (first_loss, first_norm) = expected[2], (expected[0][0][0], expected[0][1][0])
    moved = max(abs(loss - first_loss) / abs(first_loss), abs(norm - first_norm) / abs(first_norm))
    (loss64, norm64) = (expected[1][0][0], expected[1][1][0])
    gate = RTOL + K * max(abs(first_loss - loss64) / abs(loss64), abs(first_norm - norm64) / abs(norm64))
    print(f"control: loss {loss:.8g} vs {first_loss:.8g}, grad norm {norm:.8g} vs {first_norm:.8g}; gate {gate:.2e}")
    assert moved > 10 * gate, f"the control moves the loss and grad norm by {moved:.2e} relative only"
