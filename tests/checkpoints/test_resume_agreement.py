"""`resume_from_checkpoint: auto` resolved once, loaded by every rank (longctx/training/checkpoints/agreed_resume.py).

Two gloo ranks, each reading its own view of the output folder (tests/helpers/checkpoints/resume_agreement.py), as
ranks on nodes whose network filesystem caches an old listing: rank 0 sees checkpoint-2, rank 1 only checkpoint-1.
Resolved on each rank (the code before), they load different checkpoints; agreed, both load rank 0's. A rank that
cannot load that folder is every rank's error, naming it.
"""

import pytest

from longctx.config.checkpoints import SAVING_MARK, TOPOLOGY_FILE
from longctx.training.checkpoints.agreed_resume import agreed_resume, checkpoint_problem
from tests.helpers.launching.ranks import spawn_ranks

WORKER = "tests.helpers.checkpoints.resume_agreement"


@pytest.mark.distributed
def test_every_rank_loads_the_checkpoint_rank_0_resolved(tmp_path):
    each = spawn_ranks(WORKER, 2, tmp_path / "each", timeout=120, args=("each",))
    assert [r["folder"].rsplit("/", 1)[-1] for r in each] == ["checkpoint-2", "checkpoint-1"]  # the bug
    agreed = spawn_ranks(WORKER, 2, tmp_path / "agree", timeout=120, args=("agree",))
    assert agreed[0]["folder"] == agreed[1]["folder"] == str(tmp_path / "agree" / "view0" / "checkpoint-2")


@pytest.mark.distributed
def test_a_rank_that_cannot_load_it_stops_every_rank_naming_it(tmp_path):
    ranks = spawn_ranks(WORKER, 2, tmp_path, timeout=120, args=("unseen",))
    for result in ranks:
        assert "rank 1: " in result["error"] and "is not there" in result["error"]
        assert "resolved by rank 0 from 'auto'" in result["error"]


def test_what_a_rank_checks_in_the_folder_it_is_handed(tmp_path):
    folder = tmp_path / "checkpoint-3"
    assert "is not there" in checkpoint_problem(str(folder))
    folder.mkdir()
    assert "incomplete" in checkpoint_problem(str(folder))
    (folder / TOPOLOGY_FILE).write_text("{}")
    assert checkpoint_problem(str(folder)) is None
    (folder / SAVING_MARK).touch()
    assert "did not finish" in checkpoint_problem(str(folder))
    assert checkpoint_problem(None) is None


def test_one_process_resolves_as_before(tmp_path):
    assert agreed_resume("auto", tmp_path) is None
    with pytest.raises(ValueError, match="holds no complete checkpoint"):
        agreed_resume("true", tmp_path)
