"""Keys that take files, as a user writes them (issue 42, point 2).

Before: `data_files: mydata/chats.jsonl` in a recipe YAML was read letter by letter, 16 errors of the form
`` `data_files`: m: no such file, folder or glob match ``; only the list form worked. One string or a list, in the
YAML and on the command line, is the same files (as `datasets.load_dataset(data_files=...)` reads it).
"""

import json
import subprocess

import pytest
import yaml

from longctx.catalog.copy import copy_recipe
from longctx.config.paths import cli_command, resolve_recipe
from longctx.config.recipe import parse_recipe
from tests.data_prep.test_own_data import sharegpt
from tests.helpers import OFFLINE

TINY = "recipes/tiny-llama/sft-2k-cpu-sp2.yaml"


def team_recipe(tmp_path, data_files) -> tuple:
    """The tiny recipe copied into a team folder (`longctx cp`), its data a chats file of the team's."""
    team = tmp_path / "team"
    copy_recipe(resolve_recipe("tiny-2k"), team)
    (team / "mydata").mkdir()
    (team / "mydata" / "chats.jsonl").write_text("".join(json.dumps(sharegpt(i)) + "\n" for i in range(6)))
    recipe = team / TINY
    values = yaml.safe_load(recipe.read_text())
    recipe.write_text(yaml.safe_dump({**values, "data_files": data_files}))
    return team, recipe


@pytest.mark.parametrize("value", ["mydata/chats.jsonl", ["mydata/chats.jsonl"]])
def test_data_files_in_the_yaml_is_one_file_as_a_string_or_a_list(tmp_path, value):
    _, recipe = team_recipe(tmp_path, value)
    parsed, _, _ = parse_recipe(["--config", str(recipe)])
    assert parsed.data_files == ["mydata/chats.jsonl"]


def test_data_files_on_the_command_line_overrides_a_yaml_string(tmp_path):
    _, recipe = team_recipe(tmp_path, "mydata/chats.jsonl")
    parsed, _, _ = parse_recipe(["--config", str(recipe), "--data_files", "a.jsonl", "b.jsonl"])
    assert parsed.data_files == ["a.jsonl", "b.jsonl"]


@pytest.mark.subprocess
def test_longctx_data_prepares_a_yaml_whose_data_files_is_one_string(tmp_path):
    team, recipe = team_recipe(tmp_path, "mydata/chats.jsonl")
    proc = subprocess.run(
        f"{cli_command()} data {recipe} --quiet",
        shell=True,
        cwd=team,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **OFFLINE},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no such file" not in proc.stderr and "Traceback" not in proc.stderr
    report = json.loads(next(team.glob("data/prepared/*/report.json")).read_text())
    assert report["documents_in"] == 6 and report["format"] == "messages"
