"""`make sft` end to end: the default recipe through the exact launch path a user types.

The run carries a fake Hub token in ARGS and in HF_TOKEN (tests/launch/test_secrets.py lists every target that does):
it must show up nowhere in the output, the saved arguments, the trainer state or the checkpoint.
"""

import re

import pytest
from safetensors.torch import load_file

from longctx.config.paths import cli_command
from tests.helpers.launching.hub_tokens import args_with_token, env_with_tokens, secret_leaks
from tests.helpers.launching.launch import log_history
from tests.helpers.launching.make import run_make

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def make_sft(tmp_path_factory):
    out = tmp_path_factory.mktemp("sft") / "tiny-llama/sft-2k-cpu-sp2"
    # `--save_strategy no` is read as TRL reads it (the string "no", not YAML's false)
    # one checkpoint, at the last step: where a token would be saved with the training arguments and states
    args = f"--max_steps 12 --logging_steps 3 --save_strategy steps --save_steps 12 --output_dir {out}"
    proc = run_make("sft", args_with_token(args), env=env_with_tokens())
    return proc.stdout + proc.stderr, out


def test_prints_launch_line_and_mesh(make_sft):
    log, _ = make_sft
    assert "[launch] accelerate launch --config_file accelerate_configs/cpu-sp2.yaml --main_process_port " in log
    assert " recipes/sft.py --config recipes/tiny-llama/sft-2k-cpu-sp2.yaml --max_steps 12 " in log
    assert "[mesh] world=2: dp_replicate=1 x dp_shard=1 x sp=2" in log


def test_each_rank_holds_half_the_sequence(make_sft):
    log, _ = make_sft
    shard = re.search(r"rank 0 holds a shard of (\d+) tokens \(batch shape \(1, (\d+)\)\)", log)
    assert shard and int(shard.group(1)) == 2048 // 2


def test_loss_falls(make_sft):
    _, out = make_sft
    losses = [row["loss"] for row in log_history(out)]
    assert len(losses) == 4 and losses[-1] < losses[0] - 0.5


def test_model_is_saved_where_it_says(make_sft):
    log, out = make_sft
    assert f"[done] model saved to {out}" in log
    weights = load_file(out / "model.safetensors")
    assert weights["model.embed_tokens.weight"].shape == (512, 64)


def test_no_token_in_the_output_arguments_state_or_checkpoint(make_sft):
    log, out = make_sft
    assert (out / "checkpoint-12" / "training_args.bin").is_file() and (out / "training_args.bin").is_file()
    assert secret_leaks(log, out) == []


def test_prints_how_to_evaluate_load_and_export_the_run(make_sft):
    """Before: the run ended at "[done] model saved to", with no next step."""
    log, out = make_sft
    assert f"[next] evaluate: {cli_command()} eval recipes/tiny-llama/sft-2k-cpu-sp2.yaml --checkpoint {out}" in log
    assert f'[next] load: AutoModelForCausalLM.from_pretrained("{out}")' in log
    assert f"[next] export a checkpoint or push it: {cli_command()} export {out}" in log


def test_metrics_print_once_and_no_warning_nobody_can_act_on(make_sft):
    """Before: each step's metrics printed twice (a `[metrics]` line and the Trainer's), among DeepSpeed's
    "Setting accelerator to CPU" per process and torchrun's OMP_NUM_THREADS banner."""
    log, _ = make_sft
    assert log.count("'tokens_per_s': ") == 4 and "[metrics]" not in log
    assert "Setting accelerator to CPU" not in log
    assert "Setting OMP_NUM_THREADS environment variable" not in log


def test_readmes_sample_lines_are_the_runs(make_sft):
    """The README's sample output, line by line where it does not depend on the run's ARGS (the launch line, the
    losses and the paths do; tests/user/test_readme_output.py holds the whole block to a plain `make sft`)."""
    from tests.helpers.launching.readme_output import readme_sample

    log, _ = make_sft
    fixed = [line for line in readme_sample() if line.startswith(("[mesh]", "[isolation]"))]
    assert len(fixed) >= 4 and all(line in log for line in fixed), [line for line in fixed if line not in log]


def test_export_of_its_zero3_checkpoint_loads_with_plain_transformers_and_gives_the_trained_logits(
    make_sft, tmp_path, capsys
):
    """`python -m longctx export` of checkpoint-12 (the ZeRO-3 partitions of both ranks; in-process, its command
    line runs in tests/checkpoints/test_export.py) against the model the run itself saved at the same step, gathered
    from the live engine: the same logits under plain transformers."""
    import torch
    from transformers import AutoModelForCausalLM

    from longctx.cli import main as longctx

    _, out = make_sft
    assert longctx(["export", str(out / "checkpoint-12"), "--out", str(tmp_path / "plain")]) == 0
    assert "(zero checkpoint, fp32), wrote a plain model in float32" in capsys.readouterr().out
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "plain")
    trained = AutoModelForCausalLM.from_pretrained(out)
    ids = torch.arange(3, 300).unsqueeze(0)
    with torch.no_grad():
        assert torch.equal(exported(ids).logits, trained(ids).logits)
