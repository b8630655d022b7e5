"""An independent reference for GRPO under SP: every completion run alone in plain transformers, the loss by hand.

The launched runs are recipes/grpo.py (through tests/helpers/references/grpo_replay.py, which replays fixed completions
and records them) on the tiny Llama, DeepSpeed ZeRO-3, Ulysses over gloo: sp=2 and sp=4, accumulation 2, 4 completions
a prompt (one prompt group per micro-step: `per_device_train_batch_size` = 4 / sp), the KL term on (beta 0.2),
`num_iterations: 2` (each generation trains two steps: the second on old-policy log-probs, ratios clipped at
epsilon 0.05), temperature 0.9, plain SGD. Each mesh runs once with prefix sharing and once without, `dapo` and
`grpo` each at both meshes and both layouts; then with sharing: sp=2 x dp=2, ZeRO-2, gradient checkpointing with
TiledMLP and checkpoint offload, LoRA. SP generation and TRL's evaluation under SP have a greedy run of their own.

The reference never touches this repository's GRPO code (tests/helpers/references/grpo_reference.py): it reads the
prompt and completion ids the ranks recorded, scores each `prompt + completion` alone with an eager-attention model,
computes the rewards and group advantages, and writes the loss out (`dapo`, `grpo`, the KL term, old-policy ratios
clipped). Three SGD steps by autograd give every step's loss and gradient norm and the final weights.

Negative controls at sp=2 (shared rows, dapo): each rank keeping only its own shard's log-probs, and document
isolation off (the completions see each other): both must fail the comparison.
"""

import copy
import json
import random
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from tests.helpers import REPO
from tests.helpers.fixtures.tiny_model import tiny_checkpoint
from tests.helpers.fixtures.zero_configs import zero_variant
from tests.helpers.launching.launch import accelerate_launch, assert_ok, log_history
from tests.helpers.launching.run_cache import run_cache
from tests.helpers.references.grpo_reference import ITERATIONS, STEPS, G, by_hand, per_token_loss, token_log_probs
from tests.helpers.references.grpo_replay import token_reward

pytestmark = pytest.mark.distributed

RECIPE = "tests/recipes/grpo-parity.yaml"
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "river",
    "stone",
    "cloud",
    "paper",
    "window",
    "orange",
    "silver",
    "market",
    "garden",
]


def write_inputs(folder: Path) -> None:
    """Eight text prompts of 20 to 120 tokens, and the starting model (random tiny Llama, saved)."""
    rng = random.Random(3)
    folder.mkdir(parents=True)
    with open(folder / "train.jsonl", "w") as f:
        for _ in range(8):
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 40)))
            f.write(json.dumps({"prompt": words + " ?"}) + "\n")
    tiny_checkpoint(folder / "model", seed=11)


@dataclass
class Run:
    history: list[dict]
    weights: dict
    generations: list[list[tuple[list[int], list[int]]]]  # per generation: (prompt, completion) in global order
    evaluations: list[dict]  # the logged `eval_*` rows


def read_generations(dump: Path, world: int) -> list[list[tuple[list[int], list[int]]]]:
    """The world's generation batches in TRL's global order: rank 0's samples, then rank 1's, ..."""
    files = [dump / f"rank{r}.jsonl" for r in range(world)]
    per_rank = [[json.loads(line) for line in f.read_text().splitlines()] for f in files]
    calls = []
    for call in zip(*per_rank, strict=True):
        calls.append([(p, c) for part in call for p, c in zip(part["prompts"], part["completions"], strict=True)])
    return calls


def accelerate_yaml(folder: Path, mesh: str) -> str:
    """`sp2`, `sp4`, `sp2-dp2-shard`: the shipped CPU topology; `sp2-zero2`: sp=2 under ZeRO-2 (the gradient path
    DeepSpeed divides by dp only)."""
    if mesh.endswith("-zero2"):
        return zero_variant(folder / "zero", sp=2, stage=2, mesh=mesh.removesuffix("-zero2"))
    return f"accelerate_configs/cpu-{mesh}.yaml"


def model_dir(data: Path, family: str) -> Path:
    """The tiny Llama the inputs hold, or a family row's model at tiny size (built once, heads for sp <= 2, the tiny
    Llama's tokenizer: tests/helpers/references/pairwise.py), seeded random weights."""
    if not family:
        return data / "model"
    from longctx.combinations.axes import FAMILY_VALUES
    from tests.helpers.references import pairwise

    folder = data / f"model-{family}"
    if not folder.is_dir():
        pairwise.model_folder(folder, dict(FAMILY_VALUES)[family]["model_name_or_path"], 2, 2)
    return folder


def one_run(
    folder: Path, data: Path, mesh: str, shared: bool, loss_type: str, control: str = "", extra=(), family: str = ""
) -> Run:
    from safetensors.torch import load_file

    from longctx.config.topology import read_topology

    name = f"{mesh}-{'shared' if shared else 'documents'}-{loss_type}-{control or 'real'}-{len(extra)}{family}"
    out = folder / name
    (out / "dump").mkdir(parents=True)
    accel = accelerate_yaml(folder, mesh)
    topo = read_topology(REPO / accel)
    sp = topo.sp_size
    args = ["--config", RECIPE, "--accelerate_config", accel, "--model_name_or_path", str(model_dir(data, family))]
    args += ["--model_init", "pretrained"]
    args += ["--dataset_name", str(data), "--output_dir", str(out), "--per_device_train_batch_size", str(G // sp)]
    args += ["--loss_type", loss_type, "--prefix_sharing", str(shared), *extra]
    args += ["--prepared_data_dir", str(out / "prepared")]
    prepare_prompts(args)
    env = {"GRPO_REPLAY_DUMP": str(out / "dump"), "GRPO_CONTROL": control}
    proc = accelerate_launch(accel, "tests/helpers/references/grpo_replay.py", args, env=env, timeout=900)
    assert_ok(proc)
    weights = out / "model.safetensors"
    weights = weights if weights.is_file() else out / "adapter_model.safetensors"  # a LoRA run saves its adapter
    generations = read_generations(out / "dump", topo.world_size)
    state = json.loads((out / "trainer_state.json").read_text())
    evaluations = [row for row in state["log_history"] if "eval_loss" in row]
    weights = {k.replace("language_model.", ""): v for k, v in load_file(weights).items()}  # multimodal save names
    return Run(log_history(out), weights, generations, evaluations)


def prepare_prompts(argv: list[str]) -> None:
    """`make data` of the run's recipe, in this process: the prompt rows checked and held out as the recipe says
    (data_prep/trainers/prompts.py), behind the manifest the ranks read (longctx/training/data/prompts.py)."""
    from data_prep.recipe_data import prepare_for_recipe
    from longctx.config.recipe import parse_recipe, recipe_topology

    recipe, config, model = parse_recipe(argv)
    prepare_for_recipe(recipe, config, model, recipe_topology(recipe), RECIPE)


runs = run_cache("grpo_parity", write_inputs, one_run)


def beyond(run: list[float], fp32: list[float], exact: list[float]) -> float:
    """How far the run is from the float64 reference beyond K x the float32 reference's own distance from it, at
    the worst step, relative to the reference's largest value (a `grpo` loss at step 1 is a mean of zero-mean
    advantages, ~1e-7: relative to itself its float noise would look large)."""
    worst = max(max(0.0, abs(x - e) - K * abs(f - e)) for x, f, e in zip(run, fp32, exact, strict=True))
    return worst / max(abs(e) for e in exact)


# The reference runs in float32 and float64; a run is compared with the float64 one beyond K times the float32 one's
# own distance from it. Gemma 4's miniature needed it: its fp32 gradients are ~1e-5 relative from float64 in plain
# transformers itself, and ratios near the clip bound turn such differences into whole clipped tokens (at lr 0.05
# its weights were 6.7e-5 from a float32 reference after a 0.093 move).
K = 4


def compare(runs, run: Run, loss_type: str, lora_args: tuple = (), family: str = "") -> dict:
    """The worst relative differences of the run against the reference (loss, grad norm) and absolute of weights,
    each beyond K x the float32 reference's own distance from the float64 one."""
    assert len(run.generations) == -(-STEPS // ITERATIONS)
    model = model_dir(runs.data, family)
    losses, norms, weights = by_hand(model, run.generations, loss_type, lora_args)
    losses64, norms64, weights64 = by_hand(model, run.generations, loss_type, lora_args, dtype=torch.float64)
    start = by_hand(model, run.generations, loss_type, lora_args, steps=0)[2]
    weights, weights64, start = ({k.replace("language_model.", ""): v for k, v in w.items()}
                                 for w in (weights, weights64, start))  # fmt: skip
    off = {k: (run.weights[k].double() - weights64[k]).abs().max().item() for k in run.weights}
    fp32_off = {k: (weights[k].double() - weights64[k]).abs().max().item() for k in run.weights}
    return {
        "loss": beyond([row["loss"] for row in run.history], losses, losses64),
        "grad_norm": beyond([row["grad_norm"] for row in run.history], norms, norms64),
        "weights": max(max(0.0, off[k] - K * fp32_off[k]) for k in run.weights),
        "moved": max((weights[k] - start[k]).abs().max().item() for k in run.weights),
        "fp32_weights": max(fp32_off.values()),
        "reference_losses": losses,
    }


# (mesh, prefix sharing, loss type, extra recipe keys): each loss type at both meshes and both layouts; then sp x dp,
# ZeRO-2 (its other gradient path), gradient checkpointing (TRL's default) with ALST's TiledMLP and checkpoint
# offload, and LoRA (the reference is the base model, the adapter switched off), each with sharing.
ALST = ("--gradient_checkpointing", "true", "--tiled_mlp", "true", "--activation_checkpoint_offload", "true")
LORA = ("--use_peft", "true", "--lora_r", "4", "--lora_alpha", "8", "--lora_dropout", "0.0")
LORA += ("--lora_target_modules", "q_proj", "v_proj", "up_proj")
CASES = [
    ("sp2", True, "dapo", ()),
    ("sp2", False, "grpo", ()),
    ("sp4", True, "grpo", ()),
    ("sp4", False, "dapo", ()),
    ("sp2-dp2-shard", True, "dapo", ()),
    ("sp2-zero2", True, "grpo", ()),
    ("sp2", True, "grpo", ALST),
    ("sp2", True, "dapo", LORA),
]


def case_id(case) -> str:
    mesh, shared, loss_type, extra = case
    feature = "-lora" if extra == LORA else "-checkpointing-alst" if extra else ""
    return f"{mesh}-{'shared' if shared else 'documents'}-{loss_type}{feature}"


@pytest.mark.parametrize(
    "mesh, shared, loss_type, extra",
    [pytest.param(*CASES[0], id=case_id(CASES[0]))]
    + [pytest.param(*c, id=case_id(c), marks=pytest.mark.slow) for c in CASES[1:]],
)
def test_launched_grpo_equals_every_completion_alone(runs, mesh, shared, loss_type, extra):
    run = runs(mesh, shared, loss_type, "", extra)
    result = compare(runs, run, loss_type, extra if extra == LORA else ())
    print(f"{case_id((mesh, shared, loss_type, extra))}: {result}")
    assert len(run.history) == STEPS
    assert result["loss"] < 1e-5 and result["grad_norm"] < 1e-5, result
    assert result["weights"] < 1e-6 < result["moved"], result


# Each family row GRPO trains beside the tiny Llama (the combination map's GRPO pairs, longctx/combinations/
# proofs.py; Qwen3.5's linear attention is refused), with the mesh and checkpointing kinds no case above runs: sp=1
# with full checkpointing. Selective checkpointing is refused (it died in backward at sp=2: longctx/config/trainers/
# rl.py). Prefix sharing is refused with sinks and sliding windows (gpt-oss, Gemma 4); gpt-oss's router aux term too
# (not computed on group rows: `router_aux_loss_coef: 0`).
FULL = ("--gradient_checkpointing", "true")
NO_AUX = ("--router_aux_loss_coef", "0.0")
FAMILY_CASES = [
    ("sp1", True, "dapo", FULL, "qwen3"),
    ("sp2", False, "dapo", NO_AUX, "gpt-oss"),
    ("sp2", False, "dapo", (), "gemma4"),
]


def family_case_id(case) -> str:
    mesh, shared, loss_type, extra, family = case
    checkpointing = "-full" if extra == FULL else ""
    return f"{family or 'llama'}-{mesh}-{'shared' if shared else 'documents'}-{loss_type}{checkpointing}"


@pytest.mark.slow
@pytest.mark.parametrize(
    "mesh, shared, loss_type, extra, family", FAMILY_CASES, ids=[family_case_id(c) for c in FAMILY_CASES]
)
def test_each_family_in_grpo_equals_every_completion_alone(runs, mesh, shared, loss_type, extra, family):
    run = runs(mesh, shared, loss_type, "", extra, family)
    result = compare(runs, run, loss_type, family=family)
    print(f"{family_case_id((mesh, shared, loss_type, extra, family))}: {result}")
    assert len(run.history) == STEPS
    assert result["loss"] < 1e-5 and result["grad_norm"] < 1e-5, result
    assert result["weights"] < 1e-6 < result["moved"], result


@pytest.mark.slow
@pytest.mark.parametrize("control", ["shard_log_probs", "cross_attention"])
def test_negative_controls_fail_the_comparison(runs, control):
    run = runs("sp2", True, "dapo", control)
    result = compare(runs, run, "dapo")
    print(f"control {control}: {result}")
    assert result["grad_norm"] > 1e-3 or result["loss"] > 1e-3, result


# ---- generation under SP: each rank samples its own prompts, with attention local to it


def greedy(model, prompt: list[int]) -> list[int]:
    from transformers import GenerationConfig

    config = GenerationConfig(max_new_tokens=12, do_sample=False, eos_token_id=[1], pad_token_id=2)
    out = model.generate(input_ids=torch.tensor([prompt]), generation_config=config)[0, len(prompt) :].tolist()
    return out[: out.index(1) + 1] if 1 in out else out


GREEDY = ("--generation_kwargs", '{"do_sample": false}', "--max_steps", "1")
GREEDY += ("--prepare_data", "unpacked", "--max_prompt_length", "200")  # eval under SP: prepared rows
WITH_EVAL = ("--eval_strategy", "steps", "--eval_steps", "1", "--per_device_eval_batch_size", "2")
WITH_EVAL += ("--eval_holdout", "2")


def check_sp_generation(runs, run: Run):
    """The checks of the step's generation at sp=2 (the test below says what); returns the starting model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from longctx.training.rl.layout import group_tokens

    batch = run.generations[0]
    tokenizer = AutoTokenizer.from_pretrained(runs.data / "model")
    rows = [json.loads(line) for line in (runs.data / "train.jsonl").read_text().splitlines()]
    prompts = [tokenizer(text=r["prompt"])["input_ids"] for r in rows]
    first_two = [batch[0][0], batch[G][0]]  # the sampler's (seeded) choice
    assert first_two[0] != first_two[1] and all(p in prompts for p in first_two)
    assert [p for p, _ in batch] == [first_two[0]] * G + [first_two[1]] * G  # rank 0's 4, then rank 1's 4
    start = AutoModelForCausalLM.from_pretrained(runs.data / "model", dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        expected = {tuple(p): greedy(start, p) for p in first_two}
    assert all(c == expected[tuple(p)] for p, c in batch), "SP ranks generate what plain transformers generates"
    shared = [group_tokens(len(p), [len(expected[tuple(p)])] * G, True) for p in first_two]
    unshared = [group_tokens(len(p), [len(expected[tuple(p)])] * G, False) for p in first_two]
    [row] = run.history
    assert row["prefix_sharing/row_tokens"] == sum(shared) / 2  # the mean of the step's 2 micro-steps
    assert row["prefix_sharing/row_tokens_unshared"] == sum(unshared) / 2
    return start


@pytest.mark.slow
def test_sp_ranks_generate_their_own_prompts_and_train_the_union(runs):
    """At sp=2 (greedy decoding, one step): rank 0 samples all 4 completions of the first prompt and rank 1 those of
    the second, nothing twice; each completion is what plain transformers generates from the starting weights (so
    the Ulysses all-to-all was off while decoding and ZeRO-3 gathered the right weights); the step's rows held one
    whole prompt group each, their tokens logged with and without sharing."""
    check_sp_generation(runs, runs("sp2", True, "dapo", "generate", GREEDY))


@pytest.mark.slow
def test_trl_evaluation_under_sp(runs):
    """The same run with TRL's evaluation under SP on two held-out prompts: each rank generates its share of a
    group, what plain transformers generates from the trained weights, and the logged eval reward and loss (the KL
    term alone: greedy copies have zero advantage) are those written out by hand."""
    run = runs("sp2", True, "dapo", "generate", GREEDY + WITH_EVAL)
    start = check_sp_generation(runs, run)
    check_evaluation(run, run.generations[1:], start)


def check_evaluation(run: Run, evaluations, start) -> None:
    """The eval generations (one prompt group a batch, 2 copies a rank) and the logged eval reward and loss."""
    trained = copy.deepcopy(start)
    trained.load_state_dict(run.weights)
    assert len(evaluations) == 2 and all(len({tuple(p) for p, _ in e}) == 1 and len(e) == G for e in evaluations)
    with torch.no_grad():
        assert all(c == greedy(trained, p) for e in evaluations for p, c in e), "eval generation under SP"
        losses = []
        for e in evaluations:  # the batch's token mean of beta x KL (ratio 1, advantage 0)
            kl = [per_token_loss(token_log_probs(trained, p, c), token_log_probs(trained, p, c),
                                 token_log_probs(start, p, c), 0.0) for p, c in e]  # fmt: skip
            losses.append((torch.cat(kl).sum() / sum(len(x) for x in kl)).item())
    rewards = token_reward(None, None, [c for e in evaluations for _, c in e])
    [logged] = run.evaluations
    assert logged["eval_reward"] == pytest.approx(sum(rewards) / len(rewards), rel=1e-6)
    assert logged["eval_loss"] == pytest.approx(sum(losses) / len(losses), rel=1e-5)
