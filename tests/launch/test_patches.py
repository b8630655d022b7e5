"""Every replacement of upstream code is in training/patches.py, and its upstream source is what it was written for.

Four guards: the recorded fingerprints match the installed upstream source (checked in a fresh interpreter,
because tests in this process may already have installed some of the patches); every patch site in the code
(found by reading the code's syntax tree, not by a list kept here) is registered and says so in a comment;
every registered installer exists; every method the trainer overrides (read from the class, not from a list
kept here) is registered with the fingerprint of the upstream method its `super()` calls.
"""

import ast
import dataclasses
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from longctx.training.patches.check import fingerprint, mismatches, resolve, undecorated
from longctx.training.patches.overrides import OVERRIDES
from longctx.training.patches.registry import PATCHES
from tests.helpers import REPO

MARK = "registered in longctx/training/patches/registry.py"
MOCK_PATCH_CALLS = {"mock.patch", "mock.patch.object", "patch", "patch.object", "unittest.mock.patch"}


def dotted(node) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    return ""


def _is_function(node, defined: set[str]) -> bool:
    if isinstance(node, ast.Call) and dotted(node.func) in ("classmethod", "staticmethod", "functools.partial"):
        return any(_is_function(arg, defined) for arg in node.args)
    return isinstance(node, ast.Lambda) or (isinstance(node, ast.Name) and node.id in defined)


DICT_MUTATORS = {"pop", "popitem", "setdefault", "update", "clear", "__setitem__", "__delitem__"}


def _mutates_upstream_config(node) -> bool:
    """A change of accelerate's DeepSpeed plugin dict in place (`x.deepspeed_config.pop(...)`, `...[k] = v`)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in DICT_MUTATORS:
        return isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "deepspeed_config"
    targets = (
        node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
    )
    return any(
        isinstance(t, ast.Subscript) and isinstance(t.value, ast.Attribute) and t.value.attr == "deepspeed_config"
        for t in targets
    )


def _site_kind(node, defined: set[str]) -> str | None:
    """What kind of upstream replacement this node is, or None."""
    if _mutates_upstream_config(node):
        return "accelerate's `deepspeed_config` changed in place"
    if isinstance(node, ast.Assign):
        for target in node.targets:
            if not isinstance(target, ast.Attribute) or dotted(target.value) in ("self", "cls"):
                continue
            if target.attr == "__class__":
                return "__class__ swap"
            if _is_function(node.value, defined):
                return f"`{dotted(target)}` assigned a function"
    if isinstance(node, ast.Call):
        name = dotted(node.func)
        if name in MOCK_PATCH_CALLS:
            return "mock.patch"
        if name.endswith("Interface.register"):
            return f"{name}(...)"
        if name == "setattr" and len(node.args) == 3 and _is_function(node.args[2], defined):
            return "setattr(..., function)"
    return None


def patch_sites(source: str, module: str) -> list[tuple[int, str, str]]:
    """(line, kind, `module:outermost function`) for every upstream replacement in one file's source."""
    tree = ast.parse(source)
    defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    sites = []
    for top in tree.body:
        owner = f"{module}:{top.name}" if isinstance(top, ast.FunctionDef | ast.ClassDef) else f"{module}:<module>"
        for node in ast.walk(top):
            kind = _site_kind(node, defined)
            if kind:
                sites.append((node.lineno, kind, owner))
    return sites


def our_python_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [REPO / p for p in out.split() if not p.startswith("tests/")]


@pytest.mark.subprocess
def test_every_upstream_source_matches_its_fingerprint():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "longctx.training.patches.check"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"{len(PATCHES)} patches, {len(OVERRIDES)} overrides" in proc.stdout


def test_a_decorator_that_hides_its_function_is_seen_through():
    """DeepSpeed's `instrument_w_nvtx` returns a bare closure (no `__wrapped__`): `inspect.getsource` of ZeRO-3's
    reduction methods is its five lines, one fingerprint for all of them. The fingerprint is the method's own."""
    stage3 = "deepspeed.runtime.zero.stage3.DeepSpeedZeroOptimizer_Stage3._DeepSpeedZeroOptimizer_Stage3"
    grads, contiguous = (f"{stage3}__avg_scatter_{x}" for x in ("grads", "contiguous_grads"))
    assert resolve(grads).__name__ == "wrapped_fn"  # the upstream behaviour worked around
    assert undecorated(resolve(grads)).__name__ == "__avg_scatter_grads"
    assert fingerprint(grads) != fingerprint(contiguous)


def test_a_changed_upstream_source_fails_naming_the_patch():
    # Recording another hash is what an upgrade of the upstream code looks like to the check.
    tiled = next(p for p in PATCHES if p.installed_by == "longctx.training.memory.alst:enable_tiled_mlp")
    changed = dataclasses.replace(tiled, source_sha256="0" * 64)
    lines = mismatches((changed,))
    assert len(lines) == 1, lines
    assert (
        lines[0].startswith(f"{tiled.target}: upstream source changed") and "longctx.training.memory.alst" in lines[0]
    )
    assert mismatches((tiled,)) == []


@pytest.mark.subprocess
def test_every_patch_site_is_registered_and_marked():
    registered = {p.installed_by for p in PATCHES}
    unregistered, unmarked = [], []
    for path in our_python_files():
        rel = path.relative_to(REPO)
        source = path.read_text()
        lines = source.splitlines()
        module = ".".join(rel.with_suffix("").parts)
        for line, kind, owner in patch_sites(source, module):
            if owner not in registered:
                unregistered.append(f"{rel}:{line}: {kind} in {owner}")
            if not any(MARK in text for text in lines[max(0, line - 4) : line]):
                unmarked.append(f"{rel}:{line}: {kind} (add `# {MARK}` on or just above it)")
    problems = [
        f"missing from longctx/training/patches/registry.py PATCHES: {site}" for site in unregistered
    ] + unmarked
    assert not problems, "\n".join(problems)


def test_the_scanner_finds_each_kind_of_site():
    source = (
        "import transformers.trainer as hf\n"
        "from unittest import mock\n"
        "def mine(*a): ...\n"
        "def install(layer, obj):\n"
        "    hf.skip_first_batches = mine\n"
        "    layer.forward = lambda x: x\n"
        "    obj.__class__ = int\n"
        "    AttentionInterface.register('sdpa', mine)\n"
        "    setattr(layer, 'forward', mine)\n"
        "    hf.Cls.method = classmethod(mine)\n"
        "    with mock.patch('a.b', return_value=1):\n"
        "        pass\n"
        "    self_value = 3\n"
        "    obj.deepspeed_config.pop('optimizer', None)\n"
        "    obj.deepspeed_config['checkpoint'] = {}\n"
        "    copy = dict(obj.deepspeed_config)\n"
        "class Holder:\n"
        "    def __init__(self):\n"
        "        self.callback = mine\n"
    )
    sites = patch_sites(source, "pkg.mod")
    assert sorted(line for line, _, _ in sites) == [5, 6, 7, 8, 9, 10, 11, 14, 15]
    assert {owner for _, _, owner in sites} == {"pkg.mod:install"}


@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: p.target.rsplit(".", 2)[-2] + "." + p.target.rsplit(".")[-1])
def test_installer_exists_and_is_marked(patch):
    module_name, _, function = patch.installed_by.partition(":")
    module = importlib.import_module(module_name)
    assert callable(getattr(module, function, None)), f"{patch.installed_by} does not exist"
    assert MARK in Path(module.__file__).read_text(), f"{module.__file__} lacks `# {MARK}`"
    assert patch.written_against and "==" in patch.written_against


def overridden_methods(cls, base) -> set[str]:
    """Names of the methods `cls` defines itself that `base` (or its ancestors) also has: its overrides."""
    return {name for name, value in vars(cls).items() if callable(value) and hasattr(base, name)}


def trainer_classes():
    """(our trainer, the TRL trainer it extends): every trainer class whose overrides the registry lists."""
    from trl import DPOTrainer, GRPOTrainer, SFTTrainer

    from longctx.training.preference.trainer import LongContextDPOTrainer
    from longctx.training.rl.trainer import LongContextGRPOTrainer
    from longctx.training.trainer import LongContextSFTTrainer

    return [
        (LongContextSFTTrainer, SFTTrainer),
        (LongContextDPOTrainer, DPOTrainer),
        (LongContextGRPOTrainer, GRPOTrainer),
    ]


def our_override_classes():
    """(our class, the upstream class its overrides are read against): the three trainers and their shared base."""
    from transformers import Trainer

    from longctx.training.trainer_base import LongContextTrainerBase

    return [(LongContextTrainerBase, Trainer), *trainer_classes()]


def first_party(cls) -> bool:
    return cls.__module__.split(".")[0] == "longctx"


def reached_upstream(trainer, name: str):
    """The upstream method a `super().name` of our classes finally reaches from `trainer`: the first class of its MRO
    that is not ours and defines `name`."""
    owner = next(c for c in trainer.__mro__ if not first_party(c) and name in vars(c))
    return vars(owner)[name]


@pytest.mark.parametrize("ours, base", our_override_classes(), ids=lambda c: c.__name__)
def test_every_trainer_override_is_registered_against_the_method_super_calls(ours, base):
    owner = f"{ours.__module__}:{ours.__qualname__}"
    registered = {o.overridden_by.rsplit(".", 1)[-1]: o for o in OVERRIDES if o.overridden_by.startswith(owner + ".")}
    assert set(registered) == overridden_methods(ours, base), (
        f"every method {ours.__name__} overrides is in OVERRIDES of longctx/training/patches/overrides.py, "
        "with the fingerprint of the upstream method (`python -m longctx.training.patches.check --print`)"
    )
    users = [trainer for trainer, _ in trainer_classes() if ours in trainer.__mro__]
    for name, override in registered.items():
        listed = [resolve(path) for path in (override.method, *dict(override.also_overrides))]
        for trainer in users:
            assert reached_upstream(trainer, name) in listed, (
                f"`super().{name}` of {ours.__name__} reaches {reached_upstream(trainer, name).__qualname__} from "
                f"{trainer.__name__}: list it in the entry's `method` or `also_overrides`"
            )
        assert override.written_against and "==" in override.written_against


def test_every_override_belongs_to_a_trainer():
    owners = {f"{ours.__module__}:{ours.__qualname__}" for ours, _ in our_override_classes()}
    assert {o.overridden_by.rsplit(".", 1)[0] for o in OVERRIDES} == owners


def override_owners() -> dict[str, set[str]]:
    """{upstream method: our classes that override it} over the three trainers' MROs. A Trainer method is one
    upstream method whichever TRL class redefines it (SFTTrainer's and DPOTrainer's `_save_checkpoint`); a
    constructor is each class's own."""
    from transformers import Trainer

    owners: dict[str, set[str]] = {}
    for trainer, _ in trainer_classes():
        for ours in filter(first_party, trainer.__mro__):
            upstream = [c for c in trainer.__mro__ if not first_party(c)]
            for name, value in vars(ours).items():
                if name == "__init__" or not callable(value) or not any(name in vars(c) for c in upstream):
                    continue
                key = f"Trainer.{name}" if hasattr(Trainer, name) else reached_upstream(trainer, name).__qualname__
                owners.setdefault(key, set()).add(ours.__name__)
    return owners


def test_no_upstream_method_is_overridden_by_two_of_our_classes():
    """What the trainers share lives once, in LongContextTrainerBase: an upstream method overridden by two of our
    classes is a copy (or a second layer over the base's) that drifts."""
    twice = {method: sorted(classes) for method, classes in override_owners().items() if len(classes) > 1}
    assert not twice, f"overridden by more than one class (move it to longctx/training/trainer_base.py): {twice}"


def test_the_override_scan_sees_a_new_override():
    from trl import SFTTrainer

    from longctx.training.trainer import LongContextSFTTrainer

    class Extended(LongContextSFTTrainer):
        def training_step(self, *args, **kwargs):
            return super().training_step(*args, **kwargs)

        def own_helper(self):
            return None

    assert overridden_methods(Extended, SFTTrainer) == {"training_step"}
