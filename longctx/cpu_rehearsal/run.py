"""The rehearsal's steps, each through the command a GPU run uses: preflight, data_prep, `accelerate launch`.

preflight  `python -m longctx validate <rehearsal recipe> --this-machine`, as `make sft` runs it
prepare    `python -m longctx data <rehearsal recipe>`: the recipe's format, policy, mode, alignment
train      `accelerate launch --config_file <rehearsal accelerate YAML> recipes/sft.py --config ...` (recipes/dpo.py
           for a `trainer: dpo` recipe; built by
           longctx/launch/, the mesh read back from the run), checkpoint at step SAVE_AT, final model at step STEPS
resume     the same launch with --resume_from_checkpoint <checkpoint>: step STEPS must repeat its loss
load       the final model (or LoRA adapter) back as `make eval` loads it, with the rope it trained with
sp=1       the same miniature on one process: its loss and grad norm at every step must equal the rehearsal's
           (the check of a model type no family row proves: docs/adding-a-model.md); a difference is reported
           by step and quantity
"""

import json
import os
import shutil
import time
from pathlib import Path

import yaml

from longctx.config.paths import REPO_ROOT, entrypoint
from longctx.cpu_rehearsal.derive import SAVE_AT, STEPS, Derived
from longctx.launch.accelerate_launch import accelerate_argv, free_port, python_exec, read_mesh, run
from longctx.preflight.checks.toolchain import uses_cpu_adam

LOSS_RTOL = 1e-4  # the resume's repeat of a step (fp32)
# sp=1 against SP, every step's loss and grad norm: the parity gates' tolerance (fp32; SP reorders sums, measured
# agreement ~1e-7 relative in tests/parity/test_sp_parity.py, and up to 1e-6 in grad norm on the
# rehearsal's miniatures)
SP_RTOL = 1e-5
# GRPO samples its completions on each rank for that rank's prompts, so one process draws other samples than sp ranks
# do and the two runs train on different data; exactness under SP is proven on replayed completions instead
GRPO_NOT_COMPARED = (
    "GRPO samples completions per rank, so sp=1 would train on other samples; tests/parity/test_grpo_parity.py proves "
    "GRPO under SP equal to every completion alone on replayed completions"
)


class StepFailed(RuntimeError):
    """A rehearsal step failed; the message says which and shows the tail of its output."""


def command(name: str, argv: list[str], timeout: int = 900) -> str:
    """Run one step offline from the repository root; its stdout, or StepFailed with the output's tail."""
    start = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = run(argv, offline=True, capture=True, timeout=timeout, env=env)
    took = time.monotonic() - start
    if proc.returncode != 0:
        tail = (proc.stdout[-2500:] + "\n" + proc.stderr[-4000:]).strip()
        raise StepFailed(f"{name} failed (exit {proc.returncode}, {took:.0f}s): {' '.join(argv[:8])} ...\n{tail}")
    print(f"[rehearsal] {name}: ok ({took:.0f}s)", flush=True)
    return proc.stdout


def write_files(derived: Derived, work: Path, name: str = "") -> Path:
    """The rehearsal recipe (+ its accelerate YAML and DeepSpeed JSON); returns the recipe's path."""
    work.mkdir(parents=True, exist_ok=True)
    if derived.deepspeed is not None:
        (work / f"deepspeed{name}.json").write_text(json.dumps(derived.deepspeed, indent=2))
    (work / f"accelerate{name}.yaml").write_text(yaml.safe_dump(derived.accelerate, sort_keys=False))
    path = work / f"recipe{name}.yaml"
    path.write_text(yaml.safe_dump(derived.recipe, sort_keys=False))
    return path


def launch(name: str, derived: Derived, recipe: Path, *extra: str) -> str:
    trainer = derived.recipe.get("trainer", "sft")  # recipes/dpo.py for a preference recipe
    target = [entrypoint(trainer), "--config", str(recipe), *extra]
    out = command(name, accelerate_argv(derived.recipe["accelerate_config"], target, port=free_port()))
    mesh = read_mesh(out)
    if mesh is None or (mesh.sp, mesh.world) != (derived.sp, derived.sp * derived.dp):
        raise StepFailed(f"{name}: the run reported {mesh}, not sp={derived.sp} x dp={derived.dp}:\n{out[-2000:]}")
    print(f"[rehearsal] {name}: the run read back its mesh as sp={mesh.sp} x dp={mesh.world // mesh.sp}")
    return out


def losses(output_dir: Path, key: str = "loss") -> dict[int, float]:
    state = json.loads((output_dir / "trainer_state.json").read_text())
    return {row["step"]: row[key] for row in state["log_history"] if "loss" in row}


def close(a: float, b: float, rtol: float = LOSS_RTOL) -> bool:
    return abs(a - b) <= rtol * max(abs(a), abs(b))


def check_optimizer(derived: Derived, out: str) -> None:
    """Where the JSON names an offloaded AdamW, the run must have stepped with DeepSpeed's CPU Adam (the C++ op
    every GPU node of the real run builds or loads), not a stand-in."""
    if not uses_cpu_adam(derived.deepspeed or {}):
        return
    if (
        "[optimizer] the parameters step with DeepSpeedCPUAdam" not in out
    ):  # longctx/training/metrics/optimizer_report.py
        raise StepFailed(f"train: the JSON offloads AdamW; the run did not step with DeepSpeedCPUAdam:\n{out[-2000:]}")
    where = os.environ.get("TORCH_EXTENSIONS_DIR", "torch's default ~/.cache/torch_extensions")
    print(f"[rehearsal] optimizer: DeepSpeed's CPU Adam (DeepSpeedCPUAdam), built or loaded from {where}")


def train_and_resume(derived: Derived, recipe: Path, work: Path) -> Path:
    """Train, then resume from the checkpoint; returns a copy of the uninterrupted run's trainer state's folder."""
    out = Path(derived.recipe["output_dir"])
    # the rehearsal's own folder: a rerun with the same --workdir starts fresh, where a run into a folder that holds
    # checkpoints is refused (longctx/config/rules/resume.py)
    shutil.rmtree(out, ignore_errors=True)
    check_optimizer(derived, launch("train", derived, recipe))
    first = losses(out)
    if sorted(first) != list(range(1, STEPS + 1)) or not (out / f"checkpoint-{SAVE_AT}").is_dir():
        raise StepFailed(f"train: expected losses for steps 1..{STEPS} and checkpoint-{SAVE_AT}, got {sorted(first)}")
    first_norms = losses(out, "grad_norm")
    if not any(first_norms.values()):
        raise StepFailed("train: every step's grad norm is 0: the run trained nothing, so the checks after it would "
                         "compare a model with itself")  # fmt: skip
    kept = work / "first-run"
    kept.mkdir(parents=True, exist_ok=True)
    (kept / "trainer_state.json").write_text((out / "trainer_state.json").read_text())
    launch("resume", derived, recipe, "--resume_from_checkpoint", str(out / f"checkpoint-{SAVE_AT}"))
    again, norm_again = losses(out), losses(out, "grad_norm")
    if not close(first[STEPS], again[STEPS]):
        raise StepFailed(f"resume: step {STEPS} loss {again[STEPS]:.7f} after resuming, {first[STEPS]:.7f} before")
    # a GRPO loss can be ~0 while it trains (advantages sum to zero in a group): the gradient must repeat too
    if not close(first_norms[STEPS], norm_again[STEPS]):
        raise StepFailed(f"resume: step {STEPS} grad norm {norm_again[STEPS]:.7f} after resuming, "
                         f"{first_norms[STEPS]:.7f} before")  # fmt: skip
    print(
        f"[rehearsal] resume: step {STEPS} loss {again[STEPS]:.6f} = {first[STEPS]:.6f} and grad norm "
        f"{norm_again[STEPS]:.6f} = {first_norms[STEPS]:.6f} without the restart"
    )
    return kept


def load_back(recipe_path: Path) -> None:
    """The saved output loaded back as `make eval` loads it (longctx/training/model_build.py: the recipe's config
    overrides, a LoRA adapter on its configured base), its saved config carrying the rope the run trained with."""
    from longctx.config.recipe import RecipeError, parse_recipe

    start = time.monotonic()
    try:
        what, loss = _load_and_score(*parse_recipe(["--config", str(recipe_path)]))
    except (OSError, ValueError, KeyError, RecipeError) as exc:
        raise StepFailed(f"load: {type(exc).__name__}: {exc}") from None
    print(f"[rehearsal] load: ok ({time.monotonic() - start:.0f}s): {what}, loss {loss:.4f} on a sample")


def _load_and_score(recipe, args, model_args) -> tuple[str, float]:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from longctx.training.model_build import build_config, is_adapter, load_recipe_model

    out = Path(args.output_dir)
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = load_recipe_model(recipe, model_args, args, str(out))
    trained = build_config(recipe, model_args).rope_parameters  # what the entrypoint built the model with
    saved = AutoConfig.from_pretrained(out).rope_parameters  # the effective config beside the checkpoint
    if not saved == trained == model.config.rope_parameters:
        raise ValueError(f"rope: trained {trained}, saved {saved}, loaded {model.config.rope_parameters}")
    if is_adapter(str(out)):
        adapter = load_file(out / "adapter_model.safetensors")
        loaded = {k: v for k, v in model.state_dict().items() if "lora_" in k}
        if len(loaded) != len(adapter) or not adapter:
            raise ValueError(f"the adapter has {len(adapter)} tensors but the model took {len(loaded)}")
        what = f"LoRA adapter ({len(adapter)} tensors) on the base model"
    else:
        _, info = AutoModelForCausalLM.from_pretrained(out, output_loading_info=True)
        if info["missing_keys"] or info["unexpected_keys"]:
            raise ValueError(f"missing {info['missing_keys'][:5]}, unexpected {info['unexpected_keys'][:5]}")
        what = "full model"
    ids = tokenizer("The pass key is", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        loss = model(input_ids=ids, labels=ids).loss
    if not torch.isfinite(loss):
        raise ValueError(f"the loaded model's loss is {loss}")
    return f"{what} from {out}, rope {saved.get('rope_type')} as trained", loss.item()


def differences(sp: int, runs: dict[str, tuple[dict[int, float], dict[int, float]]]) -> list[str]:
    """Where the SP run and the sp=1 run differ beyond SP_RTOL: one line per step and quantity (`runs`: quantity
    -> (sp=1's values by step, the SP run's))."""
    found = []
    for quantity, (base, other) in runs.items():
        for step in sorted(base):
            if step not in other:
                found.append(f"step {step}: no {quantity} logged at sp={sp}")
            elif not close(base[step], other[step], SP_RTOL):
                found.append(f"step {step} {quantity}: {base[step]:.7f} at sp=1, {other[step]:.7f} at sp={sp}")
    return found


def compare_sp1(derived: Derived, sp1: Derived, work: Path, first: Path) -> None:
    """The same miniature, data and seed on one process for the rehearsal's STEPS steps: every step's loss and grad
    norm must equal the first (uninterrupted) SP run's, whose log `first` saved before the resume overwrote it."""
    recipe = write_files(sp1, work, "-sp1")
    command("prepare (sp=1)", [python_exec(), "-m", "longctx", "data", str(recipe)])
    launch("train (sp=1)", sp1, recipe, "--save_strategy", "no")
    base = Path(sp1.recipe["output_dir"])
    runs = {key: (losses(base, key), losses(first, key)) for key in ("loss", "grad_norm")}
    found = differences(derived.sp, runs)
    if found:
        raise StepFailed("sp=1: the SP run computes something else than one process:\n  " + "\n  ".join(found))
    steps = len(runs["loss"][0])
    worst = max(abs(a[k] - b[k]) / max(abs(a[k]), 1e-12) for a, b in runs.values() for k in a)
    print(
        f"[rehearsal] sp=1: loss and grad norm of all {steps} steps equal at sp=1 and sp={derived.sp} "
        f"(largest relative difference {worst:.1e}, tolerance {SP_RTOL:.0e})"
    )


def rehearse(derived: Derived, sp1: Derived | None, work: Path) -> None:
    recipe = write_files(derived, work)
    command("preflight", [python_exec(), "-m", "longctx", "validate", str(recipe), "--this-machine"])
    command("prepare", [python_exec(), "-m", "longctx", "data", str(recipe)])
    first = train_and_resume(derived, recipe, work)
    load_back(recipe)
    if derived.recipe.get("trainer") == "grpo":
        print(f"[rehearsal] sp=1: not compared: {GRPO_NOT_COMPARED}")
    elif sp1 is None:
        print("[rehearsal] sp=1: the rehearsal already runs at sp=1; nothing to compare")
    else:
        compare_sp1(derived, sp1, work, first)
