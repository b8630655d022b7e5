"""The shared test plumbing itself: rank spawning (tests/helpers/launching/ranks.py) and make
(tests/helpers/launching/make.py) hand every child this process's offline environment and, on a failure, name what
failed with the tail of its output; the run cache (tests/helpers/launching/run_cache.py) launches each run once."""

import os

import pytest

from tests.helpers import OFFLINE
from tests.helpers.launching.make import run_make
from tests.helpers.launching.ranks import spawn_ranks
from tests.helpers.launching.run_cache import Runs

ECHO = "tests.helpers.workers.echo_rank"


def test_every_test_and_child_is_offline():
    """tests/conftest.py sets the offline environment in this process; the helpers' children inherit it."""
    assert {key: os.environ.get(key) for key in OFFLINE} == OFFLINE


@pytest.mark.subprocess
def test_spawn_ranks_gives_each_rank_its_place_and_the_offline_environment(tmp_path):
    ranks = spawn_ranks(ECHO, 3, tmp_path, timeout=60, env={"ECHO_EXTRA": "x"})
    assert [(r["RANK"], r["LOCAL_RANK"], r["WORLD_SIZE"]) for r in ranks] == [(str(i), str(i), "3") for i in range(3)]
    assert len({r["MASTER_PORT"] for r in ranks}) == 1 and {r["MASTER_ADDR"] for r in ranks} == {"127.0.0.1"}
    assert all(r["HF_HUB_OFFLINE"] == r["HF_DATASETS_OFFLINE"] == "1" and r["ECHO_EXTRA"] == "x" for r in ranks)


@pytest.mark.subprocess
def test_spawn_ranks_names_the_failed_rank_with_its_stderr(tmp_path):
    with pytest.raises(AssertionError) as failed:
        spawn_ranks(ECHO, 2, tmp_path, timeout=60, env={"ECHO_FAIL_RANK": "1"})
    message = str(failed.value)
    assert "--- rank 0: exit 0, wrote its result" in message
    assert "--- rank 1: exit 1, wrote no" in message and "rank 1 refuses on purpose" in message


@pytest.mark.subprocess
def test_spawn_ranks_without_check_kills_a_hung_rank_and_keeps_the_others(tmp_path):
    ranks = spawn_ranks(ECHO, 2, tmp_path, timeout=2, env={"ECHO_HANG_RANK": "1"}, check=False)
    assert ranks[0]["RANK"] == "0" and ranks[1] == {}
    with pytest.raises(ProcessLookupError):  # killed and reaped, not left running
        os.kill(int((tmp_path / "rank1.pid").read_text()), 0)


@pytest.mark.subprocess
def test_run_make_fails_with_the_command_and_the_output_tail():
    with pytest.raises(AssertionError) as failed:
        run_make("-s", "no-such-target")
    assert "`make -o .venv/.installed -s no-such-target` exited 2" in str(failed.value)
    assert "No rule to make target" in str(failed.value)
    assert run_make("-s", "no-such-target", check=False).returncode == 2


def test_the_run_cache_launches_each_run_once_by_its_arguments_with_defaults_filled_in(tmp_path):
    launched = []

    def one_run(folder, data, sp: int, script: str = "recipes/sft.py", extra: tuple = ()):
        launched.append((sp, script, extra))
        return folder, data, len(launched)

    runs = Runs(one_run, tmp_path, tmp_path / "data")
    assert runs(1) == (tmp_path, tmp_path / "data", 1)
    assert runs(1) is runs(1, "recipes/sft.py") is runs(1, extra=()) is runs(sp=1)
    assert runs(2, extra=("--x",))[2] == 2 and runs(2)[2] == 3 and runs(2, extra=("--x",))[2] == 2
    assert launched == [(1, "recipes/sft.py", ()), (2, "recipes/sft.py", ("--x",)), (2, "recipes/sft.py", ())]
