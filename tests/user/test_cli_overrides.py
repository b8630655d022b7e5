"""Command-line overrides are read as TRL reads them: typed by the dataclass field, never as YAML.

`make sft ARGS="--save_strategy no"` once failed in preflight, which read `no` as YAML's false. The entrypoint
and preflight now parse through `longctx.config.recipe.parse_values`; these tests give every enum field of SFTConfig
(and our Literal keys) each of its values on the command line, through both readers.
"""

import dataclasses
import enum
import typing

import pytest
from trl import SFTConfig

from longctx.config.recipe import RecipeError, parse_recipe
from longctx.preflight.load import Machine, load_launch

RECIPE = "recipes/tiny-llama/sft-2k-cpu-sp2.yaml"


def enum_values() -> list[tuple[str, str]]:
    """(field, value) for every value of every enum-typed SFTConfig field."""
    hints = typing.get_type_hints(SFTConfig)
    out = []
    for f in dataclasses.fields(SFTConfig):
        for arg in typing.get_args(hints[f.name]) or (hints[f.name],):
            if isinstance(arg, type) and issubclass(arg, enum.Enum):
                out += [(f.name, member.value) for member in arg]
    return out


ENUM_VALUES = enum_values()


def test_every_enum_field_is_covered():
    fields = {name for name, _ in ENUM_VALUES}
    assert {
        "save_strategy",
        "eval_strategy",
        "logging_strategy",
        "hub_strategy",
        "lr_scheduler_type",
        "optim",
    } <= fields


@pytest.mark.parametrize(("key", "value"), ENUM_VALUES, ids=[f"{k}={v}" for k, v in ENUM_VALUES])
def test_enum_value_from_the_command_line(key, value):
    """The value arrives as the field's own value; a combination TRL refuses names a real key, never `recipe`."""
    flags = [f"--{key}", value]
    if key == "eval_strategy" and value != "no":
        flags += ["--prepare_data", "off"]  # prepared data has no eval split: that rule is tested elsewhere
    try:
        _, sft, _ = parse_recipe(["--config", RECIPE, *flags])
    except RecipeError as exc:
        keys = {p.key for p in exc.problems}
        assert keys and "recipe" not in keys and "command line" not in keys, str(exc)
        return
    got = getattr(sft, key)
    assert (got.value if isinstance(got, enum.Enum) else got) == value


@pytest.mark.parametrize("value", ["no", "steps", "epoch"])
def test_preflight_reads_strategies_as_strings(value):
    launch = load_launch(RECIPE, ["--save_strategy", value], Machine())
    assert not [p for p in launch.problems if p.severity == "error"], [str(p) for p in launch.problems]
    assert launch.sft.save_strategy == value and launch.raw["save_strategy"] == value


def test_strings_stay_strings_where_the_field_is_a_string():
    """`none`/`null` given to a string field are those strings, as argparse gives them."""
    _, sft, _ = parse_recipe(["--config", RECIPE, "--run_name", "null", "--report_to", "none"])
    assert sft.run_name == "null" and sft.report_to == []  # TRL maps report_to "none" to no logger


def test_bad_choice_names_the_flag():
    with pytest.raises(RecipeError) as exc:
        parse_recipe(["--config", RECIPE, "--save_strategy", "sometimes"])
    (problem,) = exc.value.problems
    assert problem.key == "save_strategy" and "sometimes" in problem.message


def test_typed_fields_are_converted_by_their_type():
    _, sft, _ = parse_recipe(["--config", RECIPE, "--learning_rate", "3e-4", "--max_steps", "7"])
    assert sft.learning_rate == pytest.approx(3e-4) and sft.max_steps == 7


def test_dict_field_takes_json_only_there():
    recipe, _, _ = parse_recipe(
        ["--config", RECIPE, "--model_config_overrides", '{"max_position_embeddings": 8192}', "--model_init", "random"]
    )
    assert recipe.model_config_overrides == '{"max_position_embeddings": 8192}'  # parsed later, as JSON


def test_preflight_and_entrypoint_parse_the_same_values():
    flags = ["--save_strategy", "no", "--logging_strategy", "steps", "--prepare_data", "unpacked"]
    recipe, sft, _ = parse_recipe(["--config", RECIPE, *flags])
    launch = load_launch(RECIPE, flags, Machine())
    assert (launch.recipe.prepare_data, launch.sft.save_strategy) == (recipe.prepare_data, sft.save_strategy)
