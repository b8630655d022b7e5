"""Preflight `--this-machine` checks what the JIT build of DeepSpeed's CPU Adam needs where an offload recipe runs.

The qwen3-32b 2x8 recipe's JSON offloads AdamW, so DeepSpeed steps with its CPU Adam, compiled on first use. On a
machine without a compiler or ninja the run would fail at engine build on every node; preflight says so first.
"""

import json
import sys

from longctx.commands.validate import main
from longctx.preflight.checks.toolchain import missing_tools

OFFLOAD = "qwen3-32b/sft-256k-2x8-sp8-dp2"


def toolchain_problems(capsys, *flags: str) -> list[dict]:
    main([OFFLOAD, *flags, "--json"])
    # the JSON line; importing deepspeed (is the op prebuilt?) logs its accelerator on stdout
    (out,) = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    return [p for p in out["problems"] if p["key"] == "optimizer"]


def without_toolchain(monkeypatch, tmp_path) -> None:
    """A machine with no compiler and no ninja: empty PATH, and an interpreter whose bin/ holds no ninja."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CXX", "no-such-c++")
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))


def test_a_machine_without_the_toolchain_is_refused_with_the_prebuild(monkeypatch, tmp_path, capsys):
    without_toolchain(monkeypatch, tmp_path)
    problems = toolchain_problems(capsys, "--this-machine")
    assert [p["severity"] for p in problems] == ["error", "error"]
    assert "no C++ compiler `no-such-c++`" in problems[0]["message"] and "`ninja`" in problems[1]["message"]
    assert all("DS_BUILD_CPU_ADAM=1" in p["fix"] and "make install-gpu" in p["fix"] for p in problems)
    assert all(p["file"].endswith("deepspeed_configs/zero3-offload-optimizer.json") for p in problems)


def test_this_machine_has_the_toolchain_and_other_machines_are_not_judged_by_it(monkeypatch, tmp_path, capsys):
    assert missing_tools() == []  # g++, ninja (the venv's, or the system's) and Python.h: the tier builds the op
    assert toolchain_problems(capsys, "--this-machine") == []
    without_toolchain(monkeypatch, tmp_path)
    assert toolchain_problems(capsys, "--intended") == []  # a launch for other machines: not this one's tools
