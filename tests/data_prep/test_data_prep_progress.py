"""Progress of `python -m data_prep` on stderr: a redrawn bar on a terminal (a real pty), one line per interval
in a log, nothing with --quiet; the summary on stdout is unchanged in every mode."""

import json
import os
import pty
import sys
import threading
from pathlib import Path

import pytest

from data_prep.__main__ import main
from tests.helpers import REPO

TOKENIZER = str(REPO / "recipes/assets/tiny-llama")


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    path = tmp_path_factory.mktemp("progress") / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": f"the river crosses {i} roads " * 20}) + "\n" for i in range(200)))
    return path


def cli(source: Path, out: Path, *flags: str) -> int:
    args = ["--input", str(source), "--tokenizer", TOKENIZER, "--max-length", "256", "--output", str(out)]
    return main([*args, "--force", *flags])


def test_log_mode_prints_whole_lines_with_counts_rate_and_eta(source, tmp_path, capsys):
    assert cli(source, tmp_path, "--progress-every", "0") == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    tokenize = [line for line in lines if line.startswith("[data] tokenize: ")]
    write = [line for line in lines if line.startswith("[data] pack+write: ")]
    assert tokenize and write and "\r" not in captured.err
    assert "200 documents" in tokenize[-1] and "tokens/s" in tokenize[-1] and "100% | ETA 0:00:00" in tokenize[-1]
    assert "rows" in write[-1] and "ETA" in write[-1]
    assert "[data] wrote " in captured.out


def test_quiet_prints_no_progress(source, tmp_path, capsys):
    assert cli(source, tmp_path, "--progress-every", "0", "--quiet") == 0
    captured = capsys.readouterr()
    assert "tokenize:" not in captured.err and "pack+write:" not in captured.err
    assert "[data] wrote " in captured.out


def test_terminal_mode_redraws_one_line_with_a_bar(source, tmp_path, monkeypatch):
    leader, follower = pty.openpty()
    screen = []
    reader = threading.Thread(target=_drain, args=(leader, screen))  # a full pty would block the writer
    reader.start()
    terminal = os.fdopen(follower, "w")
    monkeypatch.setattr(sys, "stderr", terminal)
    try:
        assert cli(source, tmp_path) == 0
    finally:
        monkeypatch.undo()
        terminal.close()  # the reader then gets EIO: everything written has been read
        reader.join(timeout=30)
        os.close(leader)
    text = b"".join(screen).decode()
    assert "\r[data] tokenize: " in text and "\r[data] pack+write: " in text
    assert "#################### 100%" in text and "ETA" in text


def _drain(fd: int, into: list) -> None:
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO once the terminal side is closed
            return
        if not chunk:
            return
        into.append(chunk)
