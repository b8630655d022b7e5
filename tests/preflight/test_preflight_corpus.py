"""A corpus of broken launches: each must exit 1 with a message naming the faulty key and its fix.

Each case is a copy of a sound launch (tiny-llama/sft-2k-cpu-sp2, or the 8-GPU fixture) with one fault written into the
recipe, its accelerate YAML or its DeepSpeed JSON, checked through the real CLI in-process (one import
of TRL for the whole file; a subprocess per case would cost seconds each).
"""

import json
from pathlib import Path

import pytest
import yaml

from longctx.commands.validate import main
from tests.helpers import REPO

BASES = {"cpu": "recipes/tiny-llama/sft-2k-cpu-sp2.yaml", "gpu": "tests/recipes/eight-gpu.yaml"}
GPU8 = ["--num-gpus", "8", "--gpu-memory-gb", "80"]
DELETE = object()


def merged(base: dict, changes: dict) -> dict:
    out = dict(base)
    for key, value in changes.items():
        if value is DELETE:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def write_launch(tmp: Path, base: str, recipe=None, accel=None, ds=None, ds_text=None) -> Path:
    """Copies of a sound recipe, its accelerate YAML and DeepSpeed JSON with the given changes."""
    r = yaml.safe_load((REPO / BASES[base]).read_text())
    a = yaml.safe_load((REPO / r["accelerate_config"]).read_text())
    d = json.loads((REPO / a["deepspeed_config"]["deepspeed_config_file"]).read_text())
    (tmp / "ds.json").write_text(ds_text if ds_text is not None else json.dumps(merged(d, ds or {})))
    a["deepspeed_config"]["deepspeed_config_file"] = str(tmp / "ds.json")
    (tmp / "accelerate.yaml").write_text(yaml.safe_dump(merged(a, accel or {})))
    r["accelerate_config"] = str(tmp / "accelerate.yaml")
    (tmp / "recipe.yaml").write_text(yaml.safe_dump(merged(r, recipe or {})))
    return tmp / "recipe.yaml"


def run(capsys, path: Path, flags=()) -> tuple[int, dict]:
    code = main([str(path), "--json", *flags])
    return code, json.loads(capsys.readouterr().out)


def pc(**sizes) -> dict:
    return {"parallelism_config": {f"parallelism_config_{k}": v for k, v in sizes.items()}}


# (id, base, changes for write_launch, flags, the key the error names, a phrase of its fix)
CASES = [
    ("heads-sp8-4-heads", "cpu", {"accel": {"num_processes": 8, **pc(sp_size=8)}}, [], "sp_size", "1, 2, 4"),
    (
        "heads-sp3",
        "cpu",
        {"recipe": {"max_length": 2046, "pad_to_multiple_of": 2046}, "accel": {"num_processes": 3, **pc(sp_size=3)}},
        [],
        "sp_size",
        "use one of",
    ),
    ("heads-llama-sp12", "gpu", {"accel": {"num_processes": 12, **pc(sp_size=12)}}, [], "sp_size", "8, 16, 32"),
    ("world-procs-3", "cpu", {"accel": {"num_processes": 3}}, [], "num_processes", "set num_processes to 2"),
    ("world-dp-shard", "cpu", {"accel": pc(dp_shard_size=2)}, [], "num_processes", "dp_shard_size to 1"),
    ("world-cp", "cpu", {"accel": pc(cp_size=2)}, [], "cp_size", "parallelism_config_cp_size: 1"),
    ("world-tp", "cpu", {"accel": pc(tp_size=2)}, [], "tp_size", "parallelism_config_tp_size: 1"),
    ("world-gpus-4", "gpu", {}, ["--num-gpus", "4"], "num_processes", "set num_processes to 4"),
    ("world-machines", "cpu", {"accel": {"num_machines": 3}}, [], "num_machines", "multiple of num_machines"),
    ("world-no-gpu-here", "gpu", {}, ["--this-machine"], "num_processes", "machine with the GPUs"),
    (
        "seq-max-length",
        "cpu",
        {"recipe": {"max_length": 2047, "pad_to_multiple_of": 2047}},
        [],
        "max_length",
        "max_length: 2046",
    ),
    ("seq-pad-multiple", "cpu", {"recipe": {"pad_to_multiple_of": 3}}, [], "pad_to_multiple_of", "pad_to_multiple_of"),
    ("seq-fixed-unset", "cpu", {"accel": pc(sp_seq_length_is_variable=False)}, [], "sp_seq_length", "set it to 2048"),
    (
        "seq-fixed-wrong",
        "cpu",
        {"accel": pc(sp_seq_length_is_variable=False, sp_seq_length=1024)},
        [],
        "sp_seq_length",
        "set it to 2048",
    ),
    (
        "attn-eager",
        "cpu",
        {"recipe": {"attn_implementation": "eager"}, "accel": pc(sp_attn_implementation="eager")},
        [],
        "sp_attn_implementation",
        "flash_attention_2",
    ),
    (
        "attn-mismatch",
        "cpu",
        {"recipe": {"attn_implementation": "flash_attention_2"}},
        [],
        "attn_implementation",
        "make the two equal",
    ),
    (
        "attn-flex",
        "cpu",
        {"recipe": {"attn_implementation": "flex_attention"}, "accel": pc(sp_attn_implementation="flex_attention")},
        [],
        "attn_implementation",
        "accelerate YAML's kernel",
    ),
    ("attn-trl-packing", "cpu", {"recipe": {"packing": True}}, [], "packing", "padding_free: false"),
    ("attn-padding-free", "cpu", {"recipe": {"padding_free": True}}, [], "packing", "padding_free: false"),
    ("attn-flash-missing-here", "gpu", {}, ["--this-machine"], "attn_implementation", "make install-gpu"),
    (
        "pos-beyond",
        "cpu",
        {"recipe": {"max_length": 8192, "pad_to_multiple_of": 8192}},
        [],
        "max_length",
        "rope_type: yarn, factor: 2.0",
    ),
    (
        "pos-rope-no-theta",
        "cpu",
        {"recipe": {"model_config_overrides": {"rope_parameters": {"rope_type": "yarn", "factor": 4.0}}}},
        [],
        "model_config_overrides.rope_parameters",
        "rope_theta: 10000.0",
    ),
    (
        "pos-kwargs-no-theta",
        "cpu",
        {"recipe": {"model_init_kwargs": {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}}},
        [],
        "model_init_kwargs.rope_scaling",
        "rope_theta",
    ),
    ("pos-llama-256k", "gpu", {"recipe": {"max_length": 262144}}, GPU8, "max_length", "factor: 2.0"),
    (
        "pos-max-positions-only",
        "gpu",
        {"recipe": {"max_length": 262144, "model_config_overrides": {"max_position_embeddings": 262144}}},
        GPU8,
        "max_length",
        "rope_type: yarn",
    ),
    ("ds-stage-1", "cpu", {"ds": {"zero_optimization": {"stage": 1}}}, [], "zero_optimization.stage", "stage: 3"),
    (  # on a GPU launch the memory check runs too: it must not plan (or crash on) a stage it does not model
        "ds-stage-1-gpu",
        "gpu",
        {"ds": {"zero_optimization": {"stage": 1}}},
        [*GPU8, "--host-memory-gb", "512"],
        "zero_optimization.stage",
        "stage: 3",
    ),
    (
        "ds-zero3-no-reduce-scatter",
        "cpu",
        {"ds": {"zero_optimization": {"reduce_scatter": False}}},
        [],
        "zero_optimization.reduce_scatter",
        "reduce_scatter: true",
    ),
    (
        "ds-quantized-gradients",
        "gpu",
        {"ds": {"zero_optimization": {"zero_quantized_gradients": True}}},
        GPU8,
        "zero_optimization.zero_quantized_gradients",
        "set it to false",
    ),
    ("ds-bf16", "cpu", {"ds": {"bf16": {"enabled": True}}}, [], "bf16.enabled", '"auto"'),
    ("ds-micro-batch", "cpu", {"ds": {"train_micro_batch_size_per_gpu": 2}}, [], "train_micro", '"auto" (or 1)'),
    ("ds-accumulation", "cpu", {"ds": {"gradient_accumulation_steps": 4}}, [], "gradient_accumulation", "(or 1)"),
    (
        "ds-packed-micro-batch",
        "gpu",
        {"recipe": {"packing": True, "per_device_train_batch_size": 2}},
        GPU8,
        "per_device_train_batch_size",
        "set it to 1",
    ),
    ("trl-dft", "cpu", {"recipe": {"loss_type": "dft"}}, [], "loss_type", "loss_type: nll"),
    ("trl-label-smoothing", "cpu", {"recipe": {"label_smoothing_factor": 0.1}}, [], "label_smoothing", "set it to 0"),
    ("files-recipe-typo", "cpu", {"recipe": {"max_lenght": 4096}}, [], "max_lenght", "`max_length`"),
    ("files-accel-typo", "cpu", {"accel": {"num_processs": 2}}, [], "num_processs", "`num_processes`"),
    ("files-pc-typo", "cpu", {"accel": pc(sp_sise=2)}, [], "parallelism_config_sp_sise", "sp_size`"),
    ("files-ds-typo", "cpu", {"ds": {"zero_optimisation": {}}}, [], "zero_optimisation", "`zero_optimization`"),
    (
        "files-ds-zero-typo",
        "cpu",
        {"ds": {"zero_optimization": {"overlap_com": True}}},
        [],
        "overlap_com",
        "overlap_comm",
    ),
    ("files-ds-bad-json", "cpu", {"ds_text": "{not json"}, [], "(file)", "JSON syntax"),
    ("files-dataset-missing", "cpu", {"recipe": {"dataset_name": "recipes/assets/nope"}}, [], "dataset_name", "path"),
    (
        "files-model-unknown",
        "gpu",
        {"recipe": {"model_name_or_path": "acme/unknown-9b"}},
        [],
        "model_name",
        "config.json",
    ),
    ("types-dataset-name", "cpu", {"recipe": {"dataset_name": 5}}, [], "dataset_name", 'quote it: dataset_name: "5"'),
    ("types-max-length-list", "cpu", {"recipe": {"max_length": [1]}}, [], "(recipe)", "types of the recipe's values"),
    ("mem-does-not-fit", "gpu", {"recipe": {"max_length": 2**20}}, GPU8, "max_length", "lower max_length to"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_broken_launch_names_key_and_fix(case, tmp_path, capsys):
    _, base, changes, flags, key, fix = case
    code, out = run(capsys, write_launch(tmp_path, base, **changes), flags)
    errors = [p for p in out["problems"] if p["severity"] == "error"]
    assert code == 1 and not out["ok"]
    hits = [p for p in errors if key in p["key"] and fix in p["fix"]]
    assert hits, f"no error naming `{key}` with fix containing {fix!r}: {json.dumps(errors, indent=1)}"


def test_packed_rows_with_sdpa_under_sp_are_isolated_and_accepted(tmp_path, capsys):
    """longctx/training/attention/isolation.py keeps packed documents apart under sdpa, so preflight accepts them at
    sp=2."""
    code, out = run(capsys, write_launch(tmp_path, "cpu", recipe={"prepare_data": "packed"}))
    assert code == 0 and not [p for p in out["problems"] if "attend" in p["message"]], out["problems"]


def test_corpus_is_large_enough():
    assert len(CASES) >= 30


def test_missing_accelerate_config_and_deepspeed_json(tmp_path, capsys):
    path = write_launch(tmp_path, "cpu", recipe={"accelerate_config": "accelerate_configs/nope.yaml"})
    code, out = run(capsys, path)
    assert code == 1 and out["problems"][0]["key"] == "accelerate_config"
    path = write_launch(tmp_path, "cpu", accel={"deepspeed_config": {"deepspeed_config_file": "nope.json"}})
    code, out = run(capsys, path)
    assert code == 1 and any(p["key"] == "deepspeed_config_file" for p in out["problems"])


@pytest.mark.parametrize(
    "record, files",
    [({"world_size": 4, "sp_size": 4}, {}), (None, {"latest": "global_step5"})],
    ids=["topology.json", "deepspeed-shards"],
)
def test_resume_on_another_topology(record, files, tmp_path, capsys):
    ckpt = tmp_path / "checkpoint-5"
    (ckpt / "global_step5").mkdir(parents=True)
    if record:
        (ckpt / "topology.json").write_text(json.dumps(record))
    for name, text in files.items():
        (ckpt / name).write_text(text)
        for rank in range(4):
            (ckpt / "global_step5" / f"bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt").write_text("")
    code, out = run(capsys, write_launch(tmp_path, "cpu", recipe={"resume_from_checkpoint": str(ckpt)}))
    assert code == 1
    (hit,) = [p for p in out["problems"] if p["key"] == "resume_from_checkpoint"]
    assert "world_size=4" in hit["message"] and "world_size=2" in hit["message"]


def test_resume_same_topology_passes_and_missing_folder_fails(tmp_path, capsys):
    ckpt = tmp_path / "checkpoint-5"
    ckpt.mkdir()
    (ckpt / "topology.json").write_text(json.dumps({"world_size": 2, "sp_size": 2}))
    assert run(capsys, write_launch(tmp_path, "cpu", recipe={"resume_from_checkpoint": str(ckpt)}))[0] == 0
    code, out = run(capsys, write_launch(tmp_path, "cpu", recipe={"resume_from_checkpoint": str(tmp_path / "no")}))
    assert code == 1 and out["problems"][0]["key"] == "resume_from_checkpoint"


def test_llama3_rope_with_a_larger_factor_reaches_256k(tmp_path, capsys):
    rope = {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
    rope |= {"original_max_position_embeddings": 8192, "rope_theta": 500000.0}
    overrides = {"max_position_embeddings": 262144, "rope_parameters": rope}
    recipe = {"max_length": 262144, "model_config_overrides": overrides}
    code, out = run(capsys, write_launch(tmp_path, "gpu", recipe=recipe), GPU8)
    assert code == 0, out["problems"]


def test_warnings_alone_exit_0(tmp_path, capsys):
    changes = {"recipe": {"max_length": 8 * 300}, "ds": {"seq_parallel_communication_data_type": "fp32"}}
    code, out = run(capsys, write_launch(tmp_path, "gpu", **changes), GPU8)
    keys = {p["key"] for p in out["problems"] if p["severity"] == "warning"}
    assert code == 0 and out["ok"] and out["errors"] == 0
    assert {"max_length", "seq_parallel_communication_data_type"} <= keys


def test_tight_memory_is_a_warning(tmp_path, capsys):
    rope = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 131072, "rope_theta": 5e5}
    recipe = {"max_length": 917504, "model_config_overrides": {"rope_parameters": rope}}
    code, out = run(capsys, write_launch(tmp_path, "gpu", recipe=recipe), GPU8)
    tight = [p for p in out["problems"] if p["key"] == "max_length" and "tight" in p["message"]]
    assert code == 0 and tight and tight[0]["severity"] == "warning"


def test_every_fault_reported_at_once(tmp_path, capsys):
    changes = {
        "recipe": {"max_lenght": 1, "loss_type": "dft", "max_length": 8191, "pad_to_multiple_of": 8191},
        "accel": {"num_processes": 3, **pc(cp_size=2)},
        "ds": {"bf16": {"enabled": True}, "zero_optimization": {"stage": 1}},
    }
    code, out = run(capsys, write_launch(tmp_path, "cpu", **changes))
    keys = {p["key"].split(".")[-1] for p in out["problems"] if p["severity"] == "error"}
    expected = {"max_lenght", "loss_type", "max_length", "num_processes", "parallelism_config_cp_size"}
    assert code == 1 and expected | {"enabled", "stage"} <= keys, keys


def test_reduction_dtype_warning_says_what_the_key_does(tmp_path, capsys):
    """With sp > 1 `seq_parallel_communication_data_type` is the dtype of every gradient reduction (the engine puts it
    in place of `communication_data_type`), so the warning says that, and weighs it against the training precision:
    a bf16 run reducing in fp32 and an fp32 run reducing in bf16 are warned, an fp32 run reducing in fp32 is not."""
    key = "seq_parallel_communication_data_type"

    def warnings(**changes) -> list[str]:
        code, out = run(capsys, write_launch(tmp_path, "gpu", **changes), GPU8)
        assert code == 0
        return [p["message"] for p in out["problems"] if p["key"] == key]

    (bf16_in_fp32,) = warnings(ds={key: "fp32"})
    assert "every gradient reduction (the ZeRO reduce-scatter over all sp x dp ranks)" in bf16_in_fp32
    (fp32_in_bf16,) = warnings(recipe={"bf16": False}, ds={key: "bf16"})
    assert "rounding every gradient to 16 bits" in fp32_in_bf16
    assert warnings(recipe={"bf16": False}, ds={key: "fp32"}) == []
    assert warnings(ds={key: "bf16"}) == []
