"""Pairwise runs: each configuration of the covering array (longctx/combinations/pairwise.json, `make
combinations`) trained two steps on CPU through the real launch (`accelerate launch recipes/sft.py` or `dpo.py` with
the synthesized recipe, accelerate YAML and DeepSpeed JSON, its data prepared in process as `make sft` prepares it)
and compared with two full-batch SGD steps of plain transformers over every document or sequence run alone
(tests/helpers/pairwise.py). Together the configurations hold every accepted pair of the values they reach, so a
bug where two of them meet fails the configuration that holds both, named by its label.

Tolerances are the parity gates' (tests/parity/test_sp_parity.py, tests/parity/test_dpo_parity.py): losses and grad
norms within 1e-5 relative, trained weights within 1e-6. Each test also checks its own gate against a control computed
the same way with an SP bug (SFT: each document cut at its middle, each half alone, as a rank attending to its own
shard only; DPO: a rejected answer cut off its prompt, issue 39's ring): the run must be far from it.
"""

import json

import pytest
import yaml

from longctx.combinations.axes import choice, configuration
from longctx.combinations.generate import PAIRWISE_JSON
from longctx.combinations.synthesize import write_configuration
from longctx.config.model.linear_layers import text_config
from tests.helpers import REPO
from tests.helpers import pairwise as pw
from tests.helpers.launch import accelerate_launch, assert_ok, log_history

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

CONFIGURATIONS = json.loads((REPO / PAIRWISE_JSON).read_text())
STEPS = 2
RTOL, WEIGHT_ATOL = 1e-5, 1e-6
# A DPO margin is beta x a difference of sums of ~200 log-probs each (|S| ~ 1100): fp32 holds such a sum to about
# eps x |S|, so two correct computations summing in different orders (a packed row gathered across ranks, each
# sequence alone) differ in the step-2 loss by about the gates' own tolerance (three configurations did: 1.3e-5 to
# 2.4e-5 relative, 0.9e-5 to 1.7e-5 absolute). The gate adds that floor, FLOOR x eps x beta x (|S| of the policy and
# reference sums of both answers, ~5e-5), to its step-2 loss and grad-norm tolerance for the sigmoid loss (SimPO's
# margin is of means: no floor); step 1, where policy and reference are one model, and the trained weights keep the
# plain tolerances.
FLOOR = 1


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
    """(losses, grad norms, weights, the control's first (loss, grad norm)) of plain transformers, each sequence
    alone."""
    lora = recipe if recipe.get("use_peft") else None
    if recipe.get("trainer", "sft") == "sft":
        docs = documents(recipe, rows)
        run = pw.reference_run(pw.plain_model(tmp_path / "model", lora), lambda m: pw.sft_loss(m, docs), STEPS)
        halves = [tuple(part[: len(d[0]) // 2] for part in d) for d in docs]
        halves += [tuple(part[len(d[0]) // 2 :] for part in d) for d in docs]
        return (*run, control_step(tmp_path, lora, lambda m: pw.sft_loss(m, halves)), 0.0)
    if recipe.get("prefix_sharing"):  # the same pairs laid out whole: each sequence is then one segment
        unshared = {**recipe, "prefix_sharing": False, "prepared_data_dir": str(tmp_path / "prepared-unshared")}
        rows = prepared_rows(write_configuration(tmp_path / "unshared", unshared, mesh, zero))
    pairs = pw.pairs_of(pw.split_rows(rows))
    simpo = recipe.get("loss_type") == "simpo"
    start = pw.plain_model(tmp_path / "model", None)
    with pw.torch.no_grad():
        ref = [tuple(pw.token_log_probs(start, ids, lab).sum() for ids, lab, _ in pair) for pair in pairs]
    run = pw.reference_run(
        pw.plain_model(tmp_path / "model", lora), lambda m: pw.dpo_loss(m, pairs, ref, simpo), STEPS
    )
    cut = [(chosen, pw.without_prompt(rejected)) for chosen, rejected in pairs]
    control = control_step(tmp_path, lora, lambda m: pw.dpo_loss(m, cut, ref, simpo))
    eps = pw.torch.finfo(pw.torch.float32).eps
    floor = 0.0 if simpo else FLOOR * eps * pw.BETA * max(2 * (abs(c) + abs(r)) for c, r in ref).item()
    return (*run, control, floor)


def compared(history, weights, expected) -> list[str]:
    losses, norms, trained, _, floor = expected
    found = []
    for step, (row, loss, norm) in enumerate(zip(history, losses, norms, strict=True), 1):
        for key, want in (("loss", loss), ("grad_norm", norm)):
            allowed = RTOL * abs(want) + (floor * (1 if key == "loss" else abs(want)) if step > 1 else 0.0)
            if abs(row[key] - want) > allowed:
                found.append(f"step {step} {key} {row[key]:.8g}, each sequence alone {want:.8g}")
    weights = {k.replace("language_model.", ""): v for k, v in weights.items()}  # a multimodal family's save names
    keys = [k for k in weights if k in trained]
    assert len(keys) == len(weights), f"weights the reference lacks: {sorted(set(weights) - set(trained))[:4]}"
    worst = max((weights[k] - trained[k]).abs().max().item() for k in keys)
    if worst > WEIGHT_ATOL:
        found.append(f"trained weights differ by up to {worst:.2e}")
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
    assert compared(history, weights, expected) == []
    # the gate must see the bug: the control's first loss or grad norm beyond tolerance, with a margin. A random
    # miniature barely reads its context: a row's documents attending to each other moved a Gemma 4 miniature's loss
    # by 8e-6 only (shard-local halves instead), and the halves moved the tiny Llama's by 2.5e-6; the gradient of
    # the attention weights is all context, so the grad norm moves (the gate compares both)
    (loss, norm), (first_loss, first_norm) = expected[3], (expected[0][0], expected[1][0])
    moved = max(abs(loss - first_loss) / abs(first_loss), abs(norm - first_norm) / abs(first_norm))
    print(f"control: loss {loss:.8g} vs {first_loss:.8g}, grad norm {norm:.8g} vs {first_norm:.8g}")
    print(f"fp32 floor of the DPO margins: {expected[4]:.2e}")
    assert moved > 10 * RTOL, f"the control moves the loss and grad norm by {moved:.2e} relative only"
