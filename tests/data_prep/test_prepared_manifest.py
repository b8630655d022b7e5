"""Training ranks find their prepared data through data_prep's manifest: no network, no recomputed key.

data_prep's cache key hashes a Hub dataset's builder (a network call); ranks must never make it, so every
test here makes the Hub and `load_dataset_builder` unreachable on the training side.
"""

import json
import os

import pytest

from data_prep.__main__ import main as data_prep_main
from longctx.config.prepared_manifest import find_prepared, manifest_path, prep_settings, write_manifest
from longctx.config.recipe import RecipeError, parse_recipe, recipe_topology
from longctx.training.data.load_prepared import prepared_dir
from tests.helpers import REPO

RECIPE = "recipes/tiny-llama/sft-2k-cpu-sp2.yaml"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """The tiny recipe prepared once, by the real `python -m data_prep --recipe` entry."""
    out = tmp_path_factory.mktemp("prepared")
    assert data_prep_main(["--recipe", RECIPE, "--", "--prepared_data_dir", str(out)]) == 0
    return out


@pytest.fixture
def no_hub(monkeypatch):
    """Any attempt to reach the Hub (or hash a dataset builder) fails the test."""
    import datasets
    import huggingface_hub

    def unreachable(*args, **kwargs):
        raise AssertionError("a training rank tried to reach the Hub")

    monkeypatch.setattr(datasets, "load_dataset_builder", unreachable)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", unreachable)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there


def parsed(*overrides):
    recipe, sft, model = parse_recipe(["--config", RECIPE, *overrides])
    return recipe, sft, model, recipe_topology(recipe)


def test_rank_finds_the_folder_data_prep_built(prepared, no_hub):
    folder = prepared_dir(*parsed("--prepared_data_dir", str(prepared)))
    manifest = json.loads(next((prepared / "manifests").glob("*.json")).read_text())
    assert folder == prepared / next(p.name for p in prepared.iterdir() if p.name != "manifests")
    assert manifest["dataset_dir"] == str(folder) and manifest["recipe"] == RECIPE
    assert manifest["cache_key"] == json.loads((folder / "report.json").read_text())["cache_key"]


def test_hub_dataset_found_offline_through_its_manifest(prepared, no_hub):
    """A Hub-named recipe prepared on a login node: its ranks read the manifest, never the builder's hash."""
    args = parsed("--prepared_data_dir", str(prepared), "--dataset_name", "some-org/some-dataset")
    settings = prep_settings(*args)
    assert settings["hub"] == "some-org/some-dataset" and not settings["inputs"]
    built = prepared_dir(*parsed("--prepared_data_dir", str(prepared)))  # a real prepared folder to point at
    write_manifest(settings, built, "key-from-the-login-node", [], RECIPE)
    assert prepared_dir(*args) == built


def test_changed_setting_names_the_difference(prepared, no_hub):
    with pytest.raises(RecipeError) as exc:
        prepared_dir(*parsed("--prepared_data_dir", str(prepared), "--seed", "7"))
    message = str(exc.value)
    assert (
        "prepared before with: " in message
        and "seed 42 -> 7" in message
        and f"run `make data RECIPE={RECIPE}`" in message
    )


def test_edited_source_file_is_a_mismatch(prepared, no_hub, tmp_path):
    """A local source edited after `make data` is refused, naming the manifest and the fix."""
    data = tmp_path / "train.jsonl"
    data.write_text(_tiny_rows())
    out = tmp_path / "prepared"
    overrides = ["--prepared_data_dir", str(out), "--dataset_name", str(data)]
    assert data_prep_main(["--recipe", RECIPE, "--", *overrides]) == 0
    assert prepared_dir(*parsed(*overrides)).is_dir()
    os.utime(data, ns=(data.stat().st_atime_ns, data.stat().st_mtime_ns + 10**9))
    with pytest.raises(RecipeError, match=r"no longer matches: the data files of .* changed since"):
        prepared_dir(*parsed(*overrides))


def test_missing_dataset_folder_is_a_mismatch(prepared, tmp_path):
    args = parsed("--prepared_data_dir", str(tmp_path))
    settings = prep_settings(*args)
    write_manifest(settings, tmp_path / "gone", "k", [], RECIPE)
    assert manifest_path(settings).is_file()
    with pytest.raises(Exception, match=r"dataset folder .*gone is missing or incomplete"):
        find_prepared(settings, RECIPE)


def _tiny_rows() -> str:
    source = REPO / "recipes" / "assets" / "tiny-haystack" / "train.jsonl"
    return "\n".join(source.read_text().splitlines()[:8]) + "\n"
