"""`python -m longctx export`: a run's checkpoint as a folder plain transformers loads, with the trained logits.

Quick tier: the push path (the Hub client injected, never the network; the token never printed) and the
refusals. The full run's ZeRO-3 checkpoint is exported in tests/user/test_sft_e2e.py (its run saves one). Slow: a LoRA
run through `python -m longctx sft`, exported merged from its ZeRO-3 checkpoint and again from the universal
checkpoint of the same step (the base rebuilt from `--recipe`: a LoRA checkpoint holds the adapter only), each
against the adapter the run saved over its rebuilt base (eval's loader).
"""

import subprocess
import sys

import pytest
import torch

from longctx.config.paths import cli_command
from longctx.export.hub import push
from longctx.export.weights import ExportError, find_checkpoint
from tests.helpers import REPO
from tests.helpers.launching.hub_tokens import ENV_TOKEN, env_with_tokens

RECIPE = "recipes/tiny-llama/sft-2k-cpu-sp2.yaml"
LORA = ["--use_peft", "true", "--lora_r", "4", "--lora_alpha", "8", "--lora_target_modules", "all-linear"]


class FakeHub:
    """Stands in for huggingface_hub.HfApi: records the calls; `fail` raises as an HTTP error would."""

    def __init__(self, fail: str | None = None):
        self.calls, self.fail = [], fail

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", repo_id, kwargs))
        if self.fail:
            raise OSError(self.fail)
        return f"https://huggingface.co/{repo_id}"

    def upload_folder(self, **kwargs):
        self.calls.append(("upload_folder", kwargs))


def test_push_creates_the_repository_and_uploads_the_folder(tmp_path):
    hub = FakeHub()
    assert push(tmp_path, "me/tiny", private=True, api=hub) == "https://huggingface.co/me/tiny"
    assert hub.calls[0] == ("create_repo", "me/tiny", {"private": True, "exist_ok": True, "repo_type": "model"})
    assert hub.calls[1][1]["folder_path"] == str(tmp_path) and hub.calls[1][1]["repo_id"] == "me/tiny"


def test_a_failed_push_is_one_line_without_the_token(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", ENV_TOKEN)
    with pytest.raises(RuntimeError) as caught:
        push(tmp_path, "me/tiny", api=FakeHub(fail=f"401 Unauthorized for token {ENV_TOKEN}"))
    assert ENV_TOKEN not in str(caught.value) and "push to me/tiny failed: OSError: 401" in str(caught.value)


def test_the_command_pushes_with_the_token_from_the_environment_and_never_prints_it(tmp_path, monkeypatch, capsys):
    """`python -m longctx export RUN --push-to-hub ORG/NAME -- --hub_token X`: the command line moves the token to
    HF_TOKEN, the Hub client gets it from there; the export itself is stood in for (its own tests run it)."""
    import huggingface_hub

    from longctx.cli import main as longctx

    made = []

    class Client(FakeHub):
        def __init__(self, token=None):
            super().__init__()
            made.append(self)
            self.token = token

    def fake_export(run, out, merge_lora, dtype, base):
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")
        return {"checkpoint": run, "form": "zero", "adapter": False, "dtype": "float32", "out": str(out)}

    monkeypatch.setattr("longctx.export.build.export", fake_export)
    monkeypatch.setattr(huggingface_hub, "HfApi", Client)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    argv = ["export", str(tmp_path / "run"), "--out", str(tmp_path / "x"), "--push-to-hub", "me/tiny"]
    assert longctx([*argv, "--", "--hub_token", ENV_TOKEN]) == 0
    shown = capsys.readouterr()
    assert "[export] pushed to https://huggingface.co/me/tiny" in shown.out
    assert ENV_TOKEN not in shown.out + shown.err and made[0].token == ENV_TOKEN
    assert made[0].calls[1][1]["folder_path"] == str(tmp_path / "x")


def test_a_run_without_a_deepspeed_checkpoint_is_refused_with_the_fix(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ExportError, match="save_strategy: steps"):
        find_checkpoint(tmp_path)
    with pytest.raises(ExportError, match="no such folder"):
        find_checkpoint(tmp_path / "missing")


def longctx(*argv: str, cwd=REPO, timeout=900) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "longctx", *argv]
    return subprocess.run(
        cmd, cwd=cwd, env=env_with_tokens(), capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    """A LoRA run of the tiny recipe, 2 steps on the sp=2 ZeRO-3 mesh, with a checkpoint at its last step."""
    out = tmp_path_factory.mktemp("lora") / "run"
    args = ["--max_steps", "2", "--save_strategy", "steps", "--save_steps", "2", "--output_dir", str(out)]
    proc = longctx("sft", RECIPE, "--", *LORA, *args)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert f"[next] export as one plain model: {cli_command()} export {out} --merge-lora" in proc.stdout
    return out


def reference_logits(out, ids):
    """The trained model as eval loads it: the base rebuilt from the recipe (random, seeded), the adapter the run
    saved at its end (gathered from the live engine by PEFT), merged. `out=None`: the base alone."""
    from longctx.config.recipe import parse_recipe
    from longctx.evaluation.worker import load_model

    recipe, sft, model_args = parse_recipe(["--config", RECIPE, *LORA])
    model, _ = load_model(recipe, sft, model_args, str(out) if out else None)
    with torch.no_grad():
        return model.eval()(ids).logits


def exported_logits(folder, ids):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder)
    assert type(model).__name__ == "LlamaForCausalLM"  # plain transformers, no PEFT wrapper
    with torch.no_grad():
        return model.eval()(ids).logits


@pytest.mark.slow
@pytest.mark.distributed
def test_a_lora_run_exports_merged_from_zero3_and_from_universal_with_the_trained_logits(lora_run, tmp_path):
    ids = torch.arange(3, 200).unsqueeze(0)
    expected = reference_logits(lora_run, ids)
    assert not torch.allclose(reference_logits(None, ids), expected, atol=1e-3)  # the adapter changed the model
    # the checkpoint holds the adapter only; this recipe's base is random (`model_init: random`), saved nowhere
    base_unknown = longctx("export", str(lora_run), "--merge-lora", "--out", str(tmp_path / "x"), cwd=tmp_path)
    assert base_unknown.returncode == 2 and "pass `--recipe RECIPE`" in base_unknown.stderr, base_unknown.stderr
    rebuild = ["--recipe", RECIPE, "--", *LORA]
    proc = longctx("export", str(lora_run), "--merge-lora", "--out", str(tmp_path / "zero"), *rebuild, cwd=tmp_path)
    assert proc.returncode == 0 and "(zero checkpoint, fp32), wrote a plain model" in proc.stdout, proc.stderr
    assert torch.allclose(exported_logits(tmp_path / "zero", ids), expected, atol=1e-5)
    unmerged = longctx("export", str(lora_run), "--out", str(tmp_path / "adapter"), *rebuild, cwd=tmp_path)
    assert "a PEFT LoRA adapter (pass --merge-lora for a plain model)" in unmerged.stdout, unmerged.stderr
    checkpoint = lora_run / "checkpoint-2"
    convert = [sys.executable, "-m", "longctx.training.checkpoints.universal", str(checkpoint)]
    done = subprocess.run(convert, env=env_with_tokens(), capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    proc = longctx(
        "export", str(checkpoint), "--merge-lora", "--out", str(tmp_path / "universal"), *rebuild, cwd=tmp_path
    )
    assert proc.returncode == 0 and "(universal checkpoint, fp32)" in proc.stdout, proc.stderr
    assert torch.allclose(exported_logits(tmp_path / "universal", ids), expected, atol=1e-5)
