"""The `reward_funcs` key of a `trainer: grpo` recipe: import paths of reward functions, resolved and checked.

A recipe names each reward as `module.path:function` (an installed or importable module) or `file.py:function`
(a file relative to the recipe's repository root, where every launch runs), one string or a list. Each is
imported and checked here, before launch, for what TRL 1.16's GRPOTrainer will do with it at the first step:
it calls `fn(prompts=..., completions=..., completion_ids=..., trainer_state=..., log_extra=..., log_metric=...,
**columns)`, every dataset column as a keyword, so the function must take `**kwargs` (or name every one); the
parameters it names without a default beyond those are dataset columns it needs (`required_columns`), which
preflight checks against the prompt rows.

A reward *model* (a Hub id or a folder, which TRL would load as a sequence classifier and run on every prompt +
completion whole, unsharded, on each rank) is refused by name: at the recipes' prompt lengths it is the one
forward pass no SP group shares. The fix is a function (a verifiable reward; or one that calls a served model).

The rules (longctx/config/rules/trainers/grpo.py) and the entrypoint's loader (longctx/training/rl/rewards/) share this
one resolution, so preflight refuses exactly what the launch would fail on.
"""

import hashlib
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path

from longctx.config.problems import Problem, error

KEY = "reward_funcs"
# the keywords TRL 1.16's GRPOTrainer._calculate_rewards passes besides the dataset's columns
RESERVED_ARGUMENTS = (
    "prompts",
    "completions",
    "completion_ids",
    "trainer_state",
    "log_extra",
    "log_metric",
    "environments",
)
EXAMPLE = "longctx.training.rl.rewards.passkey:passkey_exact_match"


class RewardPathError(ValueError):
    """One `reward_funcs` entry that cannot be used; `fix` says what to write instead."""

    def __init__(self, message: str, fix: str):
        super().__init__(message)
        self.fix = fix


def reward_paths(value) -> list[str]:
    """The key's value as a list of paths (YAML gives one string or a list; absent: none)."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return [v for v in value if v.strip()]  # `--reward_funcs ""` on the command line: none
    raise RewardPathError(f"is {value!r}", f"a list of `module.path:function` strings, e.g. [{EXAMPLE}]")


def _looks_like_model(path: str) -> bool:
    return ":" not in path and ("/" in path or Path(path).is_dir())


def _module(spec: str, root: Path):
    """Import `module.path` or load `file.py` (relative to `root`); RewardPathError names what failed."""
    if spec.endswith(".py"):
        file = Path(spec) if Path(spec).is_absolute() else root / spec
        if not file.is_file():
            raise RewardPathError(f"no file {file}", "give a .py file relative to the recipe's repository root")
        name = "longctx_reward_" + hashlib.sha256(str(file.resolve()).encode()).hexdigest()[:12]
        if name not in sys.modules:
            loader_spec = importlib.util.spec_from_file_location(name, file)
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[name] = module
            try:
                loader_spec.loader.exec_module(module)
            except Exception:
                del sys.modules[name]
                raise
        return sys.modules[name]
    return importlib.import_module(spec)


def resolve(path: str, root: Path | None = None):
    """The callable `path` names; RewardPathError (message, fix) when it cannot be used as a TRL reward."""
    if _looks_like_model(path):
        raise RewardPathError(
            f"`{path}` names a reward model: reward models are not supported (TRL would run a sequence classifier "
            "on every prompt + completion whole on each rank, outside the SP group)",
            f"score with a function `module.path:function` (e.g. {EXAMPLE}), or call a served model from one",
        )
    module_name, sep, attr = path.rpartition(":")
    if not sep or not module_name or not attr:
        raise RewardPathError(f"`{path}` is not `module.path:function`", f"write it as e.g. {EXAMPLE}")
    try:
        module = _module(module_name, root or Path.cwd())
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            fix = "install it, put it on PYTHONPATH, or name a file: `path/to/rewards.py:function`"
            raise RewardPathError(f"no module `{exc.name}` (importing `{module_name}`)", fix) from None
        raise RewardPathError(f"importing `{module_name}` failed: {exc}", "install what it imports") from None
    except RewardPathError:
        raise
    except Exception as exc:  # noqa: BLE001 (the user's module raised while importing: named with the key)
        msg = f"importing `{module_name}` raised {type(exc).__name__}: {exc}"
        raise RewardPathError(msg, "fix the module so that it imports") from None
    fn = getattr(module, attr, None)
    if fn is None:
        names = sorted(
            n
            for n, v in vars(module).items()
            if inspect.isfunction(v) and v.__module__ == module.__name__ and not n.startswith("_")
        )
        raise RewardPathError(f"`{module_name}` has no `{attr}`", f"use one of its callables: {', '.join(names)}")
    return _checked(fn, path)


def _checked(fn, path: str):
    if inspect.isclass(fn) or not callable(fn):
        what = "a class" if inspect.isclass(fn) else f"a {type(fn).__name__}, not callable"
        raise RewardPathError(f"`{path}` is {what}", "name a function `f(prompts, completions, **kwargs)`")
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is p.POSITIONAL_ONLY for p in params):
        raise RewardPathError(f"`{path}` has positional-only parameters", "TRL passes every argument by keyword")
    if not any(p.kind is p.VAR_KEYWORD for p in params):
        named = {p.name for p in params}
        missing = [a for a in RESERVED_ARGUMENTS[:6] if a not in named]
        if missing:
            msg = f"`{path}` takes no **kwargs, but TRL passes it {', '.join(missing)} and every dataset column"
            raise RewardPathError(msg, "add `**kwargs` to its parameters")
    return fn


def required_columns(fn) -> list[str]:
    """The dataset columns a reward function needs: its parameters without a default, TRL's own arguments aside."""
    return [
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and p.default is p.empty
        and p.name not in RESERVED_ARGUMENTS
    ]


def reward_functions(value, source: str, root: Path | None = None) -> tuple[list, list[Problem]]:
    """(the callables, the problems): every entry resolved, every failure one Problem naming the entry."""
    try:
        paths = reward_paths(value)
    except RewardPathError as exc:
        return [], [error(source, KEY, str(exc), exc.fix)]
    functions, problems = [], []
    for i, path in enumerate(paths):
        try:
            functions.append(resolve(path, root))
        except RewardPathError as exc:
            where = KEY if len(paths) == 1 else f"{KEY}[{i}]"
            problems.append(error(source, where, str(exc), exc.fix))
    return functions, problems
