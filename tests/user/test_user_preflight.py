"""Preflight checks what the run will need (issue 42, point 6), through `longctx validate RECIPE --this-machine`,
the preflight `make sft` runs before any process starts.

Before: `report_to: wandb` without wandb installed passed preflight and ended every rank in a traceback a minute in
(followed by advice about the OOM killer); `push_to_hub: true` with no token ended in a connection traceback at
trainer setup. The pair counts after the holdout and the drops are data_prep's (tests/user/test_user_data.py).
"""

from longctx.commands.validate import main as validate

TINY = "tiny-llama/sft-2k-cpu-sp2"


def preflight(capsys, *overrides: str) -> tuple[int, str]:
    code = validate([TINY, "--this-machine", "--", *overrides])
    return code, capsys.readouterr().out


def test_a_logger_that_is_not_installed_is_refused_by_name(capsys):
    code, said = preflight(capsys, "--report_to", "wandb")
    assert code == 1
    assert "`report_to`" in said and "`wandb`, whose module `wandb` is not installed" in said
    assert "pip install wandb" in said and "--report_to none" in said
    assert preflight(capsys, "--report_to", "tensorboard")[0] == 0  # installed (the dev extra): fine


def test_push_to_hub_without_a_token_is_refused_with_where_to_set_one(capsys, monkeypatch, tmp_path):
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # no token stored by `hf auth login` there
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "token"))
    code, said = preflight(capsys, "--push_to_hub", "true", "--hub_model_id", "me/tiny")
    assert code == 1 and "`push_to_hub`" in said and "no Hugging Face token is set" in said and "HF_TOKEN" in said
    monkeypatch.setenv("HF_TOKEN", "hf_NeverPrintThis0123456789abcdef")
    code, said = preflight(capsys, "--push_to_hub", "true", "--hub_model_id", "me/tiny")
    assert "no Hugging Face token" not in said and "hf_NeverPrintThis" not in said
