"""Every command the docs show is one a reader can paste: real make targets, modules, flags, recipes and files.

Commands are read from the Markdown itself (code blocks, `$ ` lines of output blocks, inline code spans), so a
command added to a doc is checked without touching this file. What each kind must satisfy:
- `make T VAR=...`: T is a target (`make -n` exits 0 without running anything), VAR is a Makefile variable,
  RECIPE names a recipe file (or its short name), ARGS are recipe keys, and FLAGS holds flags of T's subcommand
  (`python -m longctx T`; the ladder's script for gpu-ladder, the step benchmark's for gpu-bench); the examples
  of `make help` count as a doc;
- `python -m M ...` and `python benchmarks/X.py ...`: the module or script exists, its `--help` exits 0 and lists
  every flag used; a recipe it is given exists; overrides after `--` are recipe keys;
- `accelerate launch ...`: its flags are accelerate's, the accelerate YAML and recipe exist, overrides are keys;
- `sbatch`, `pytest` and shell scripts: the files exist. Placeholders (`<name>`, `..`, `RECIPE`) are skipped.
Cheap commands also run for real: every `make` line as `make -n`, the memory plan's calibration, and
`make plan`, whose documented output must be what it prints.
"""

import dataclasses
import functools
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from longctx import cli
from tests.helpers import REPO
from tests.helpers.launching.make import run_make

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "benchmarks/README.md"]
DOCS += [REPO / "recipes/README.md", REPO / "longctx/evaluation/README.md"]
STARTS = ("make ", "python ", ".venv/bin/python ", "accelerate launch ", "sbatch ", "pytest ", "benchmarks/")
STARTS += (".venv/bin/longctx ",)  # the installed command line (pyproject's [project.scripts])
SUBCOMMANDS = tuple(cli.SUBCOMMANDS)  # every `python -m longctx SUBCOMMAND`, as the CLI lists them
# whose flags FLAGS holds, per make target: the target's `python -m longctx` subcommand, or the ladder's script
FLAGS_OF = {target: f"longctx {target}" for target in SUBCOMMANDS} | {
    "gpu-ladder": "benchmarks/gpu_memory_ladder.py",
    "gpu-bench": "benchmarks/gpu_step.py",
}
NO_RECIPE = (["export"], ["ls"])  # subcommands whose first argument is not a recipe (a run folder, a filter)
RECIPE_CLIS = {"longctx", "longctx.preflight", "longctx.leak_probe", "longctx.evaluation", "longctx.cpu_rehearsal"}


@dataclasses.dataclass(frozen=True)
class Command:
    where: str
    text: str

    def __str__(self):
        return f"{self.where}: {self.text}"


def _command(text: str) -> str:
    """A shell line without its prompt and trailing comment."""
    return re.split(r"\s+#\s", text.strip().removeprefix("$ "))[0].strip()


def commands_in(path: Path) -> list[Command]:
    """Commands in one Markdown file: lines of bash and indented blocks, `$ ` lines of output blocks, inline code."""
    found, rel = [], path.relative_to(REPO)
    lines = path.read_text().splitlines()
    fence, i = None, 0
    while i < len(lines):
        start, line = i, lines[i]
        while line.rstrip().endswith("\\") and i + 1 < len(lines):  # a continued shell line
            i += 1
            line = line.rstrip()[:-1].rstrip() + " " + lines[i].strip()
        i += 1
        if line.startswith("```"):
            fence = None if fence is not None else line[3:].strip()
            continue
        in_code = fence in ("bash", "sh", "") or (fence is None and line.startswith("    "))
        prompt = fence == "text" and line.startswith("$ ")
        if in_code or prompt:
            text = _command(line)
            if text.startswith(STARTS):
                found.append(Command(f"{rel}:{start + 1}", text))
        elif fence is None:
            spans = re.findall(r"`([^`]+)`", line)
            found += [Command(f"{rel}:{start + 1}", s.strip()) for s in spans if s.startswith(STARTS) and " " in s]
    return found


def make_help_commands() -> list[Command]:
    """The example of each `make help` line (`make plan RECIPE=.. [FLAGS="--gpu-memory-gb 80"]`), brackets dropped."""
    found = []
    for number, line in enumerate((REPO / "Makefile").read_text().splitlines(), 1):
        shown = re.match(r'^\t@echo "(make [^|]*?)(?:\s{2,}|"$)', line)
        if shown:
            text = shown.group(1).replace('\\"', '"').replace("[", "").replace("]", "").strip()
            found.append(Command(f"Makefile:{number} (make help)", text))
    return found


ALL = [c for doc in DOCS for c in commands_in(doc)] + make_help_commands()


def placeholder(token: str) -> bool:
    return bool(re.search(r"<[^>]*>|\.\.(?!/)|\bRECIPE\b|\bSUBCOMMAND\b|\bN\b|\bname\b", token)) or "|" in token


@functools.cache
def recipe_keys() -> frozenset[str]:
    from trl import ModelConfig, SFTConfig

    from longctx.config.recipe import RecipeArguments
    from longctx.config.trainers.preference import PreferenceConfig

    classes = (RecipeArguments, SFTConfig, PreferenceConfig, ModelConfig)  # an SFT or a `trainer: dpo` recipe's keys
    fields = {f.name for cls in classes for f in dataclasses.fields(cls)}
    return frozenset(fields | {"config"})


def flags(tokens: list[str]) -> list[str]:
    return [t.split("=")[0] for t in tokens if t.startswith("--") and t != "--"]


def key_problems(tokens: list[str]) -> list[str]:
    return [f"`{f}` is not a recipe key" for f in flags(tokens) if f[2:] not in recipe_keys()]


def recipe_problem(name: str) -> list[str]:
    from longctx.config.paths import resolve_recipe

    if placeholder(name):
        return []
    path = resolve_recipe(name)
    return [] if (REPO / path).is_file() else [f"recipe {name} does not exist ({path})"]


HELP_RUNNER = """
import contextlib, io, json, runpy, sys
out = {}
for label, argv in json.loads(sys.argv[1]):
    buf, code = io.StringIO(), 0
    sys.argv = argv[1:] if argv[0] == "-m" else argv
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
            if argv[0] == "-m":
                sys.argv = [argv[1], *argv[2:]]
                runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception as exc:
        code, buf = 1, io.StringIO(repr(exc))
    out[label] = [code, buf.getvalue()]
print("@@HELP@@" + json.dumps(out))
"""


def tool_of(cmd: list[str]) -> tuple[str, list[str]] | None:
    """(tool label, the --help invocation) for a python command: `-m module` or a benchmarks script."""
    if cmd[:2] == ["-m", "longctx"] and cmd[2:3] and cmd[2] in SUBCOMMANDS:
        return f"longctx {cmd[2]}", [*cmd[:3], "--help"]
    if cmd[0] == "-m":
        module = cmd[1]
        sub = ["plan"] if module == "longctx.preflight" and cmd[2:3] == ["plan"] else []
        if module == "longctx.memory_plan.calibration":  # no flags: run it for real (cheap)
            return module, ["-m", module]
        return " ".join([module, *sub]), ["-m", module, *sub, "--help"]
    return cmd[0], [cmd[0], "--help"]


def python_argv(text: str) -> list[str]:
    tokens = shlex.split(text)
    return tokens[1:]  # drop `python` / `.venv/bin/python`


@functools.cache
def helps() -> dict[str, tuple[int, str]]:
    """--help output of every tool the docs call, in one interpreter (imports once)."""
    wanted = {}
    for c in ALL:
        if c.text.startswith(("python ", ".venv/bin/python ")):
            tool = tool_of(python_argv(c.text))
            wanted[tool[0]] = tool[1]
    for tool in FLAGS_OF.values():
        wanted[tool] = tool_of(["-m", *tool.split()] if "/" not in tool else [tool])[1]
    wanted["accelerate launch"] = ["-m", "accelerate.commands.launch", "--help"]
    proc = subprocess.run(
        [sys.executable, "-c", HELP_RUNNER, json.dumps(list(wanted.items()))],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert "@@HELP@@" in proc.stdout, proc.stderr[-3000:]
    return {k: tuple(v) for k, v in json.loads(proc.stdout.split("@@HELP@@")[-1]).items()}


def flag_problems(tool: str, used: list[str]) -> list[str]:
    code, text = helps()[tool]
    if code != 0:
        return [f"`{tool} --help` exits {code}: {text[-300:]}"]
    return [f"`{tool}` has no flag {f}" for f in used if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", text)]


@functools.cache
def make_targets() -> frozenset[str]:
    text = (REPO / "Makefile").read_text()
    return frozenset(re.findall(r"^([a-z][\w-]*):", text, re.MULTILINE))


@functools.cache
def make_variables() -> frozenset[str]:
    return frozenset(re.findall(r"^([A-Z_]+) \?=", (REPO / "Makefile").read_text(), re.MULTILINE))


def check_make(tokens: list[str]) -> list[str]:
    problems, run = [], ["-n"]
    target = next((t for t in tokens[1:] if "=" not in t and not t.startswith("-")), None)
    for token in tokens[1:]:
        name, eq, value = token.partition("=")
        if token.startswith("-"):  # make's own options
            continue
        if not eq:
            if token not in make_targets():
                problems.append(f"no make target `{token}`")
            run.append(token)
            continue
        if name not in make_variables():
            problems.append(f"`{name}` is not a Makefile variable")
        elif name == "RECIPE":
            problems += recipe_problem(value)
        elif name == "ARGS":
            problems += key_problems(shlex.split(value))
        elif name == "FLAGS":
            tool = FLAGS_OF.get(target)
            problems += flag_problems(tool, flags(shlex.split(value))) if tool else [f"`make {target}` takes no FLAGS"]
        if not placeholder(value):
            run.append(token)
    if not problems:
        proc = run_make(*run, check=False, timeout=60)
        if proc.returncode != 0:
            problems.append(f"`{shlex.join(proc.args)}` exits {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return problems


def check_python(text: str) -> list[str]:
    cmd = python_argv(text)
    label, _ = tool_of(cmd)
    if cmd[0] != "-m" and not (REPO / cmd[0]).is_file():
        return [f"no script {cmd[0]}"]
    args = cmd[2:] if cmd[0] == "-m" else cmd[1:]
    if label.startswith("longctx ") and cmd[1] == "longctx":
        args = args[1:]  # past the subcommand
    ours, _, overrides = (
        (args[: args.index("--")], None, args[args.index("--") + 1 :]) if "--" in args else (args, 0, [])
    )
    problems = flag_problems(label, flags(ours)) + key_problems(overrides)
    positional = [t for t in ours if not t.startswith("-") and t != "plan"]
    if cmd[0].startswith("benchmarks/"):  # a benchmark's sub-command is one of its choices
        problems += [f"`{label}` has no choice {t}" for t in positional if t not in helps()[label][1]]
    first = ours[1:2] if ours[:1] == ["plan"] and cmd[1] != "longctx" else ours[:1]  # the recipe comes first
    takes_recipe = cmd[1:2] != ["longctx"] or cmd[2:3] not in NO_RECIPE
    if cmd[0] == "-m" and cmd[1] in RECIPE_CLIS and takes_recipe and first and not first[0].startswith("-"):
        problems += recipe_problem(first[0])
    if "--recipe" in ours[:-1]:
        problems += recipe_problem(ours[ours.index("--recipe") + 1])
    return problems


def check_accelerate(tokens: list[str]) -> list[str]:
    script = next(i for i, t in enumerate(tokens) if t.endswith(".py"))
    problems = flag_problems("accelerate launch", flags(tokens[2:script]))
    problems += [] if (REPO / tokens[script]).is_file() else [f"no script {tokens[script]}"]
    config = tokens[tokens.index("--config_file") + 1]
    problems += [] if (REPO / config).is_file() else [f"no accelerate config {config}"]
    rest = tokens[script + 1 :]
    if "--config" in rest:
        problems += recipe_problem(rest[rest.index("--config") + 1])
    return problems + key_problems(rest)


def check_files(tokens: list[str]) -> list[str]:
    paths = [t for t in tokens if re.search(r"\.(py|sh|sbatch)$", t) or t.startswith("tests/")]
    problems = [f"no file {p}" for p in paths if not placeholder(p) and not (REPO / p).exists()]
    if tokens[0] == "sbatch":
        script = next(i for i, t in enumerate(tokens) if t.endswith(".sbatch"))
        problems += recipe_problem(tokens[script + 1]) + key_problems(tokens[script + 2 :])
    return problems


def check(command: Command) -> list[str]:
    tokens = shlex.split(command.text)
    if "..." in tokens:  # a kind of command (`make ...`), not one to paste
        return []
    if tokens[0] == "make":
        return check_make(tokens)
    if tokens[0].endswith("python"):
        return check_python(command.text)
    if tokens[0] == ".venv/bin/longctx":  # the same program as `python -m longctx`
        return check_python(shlex.join(["python", "-m", "longctx", *tokens[1:]]))
    if tokens[:2] == ["accelerate", "launch"]:
        return check_accelerate(tokens)
    return check_files(tokens)


def test_the_docs_show_commands():
    kinds = {shlex.split(c.text)[0] for c in ALL}
    assert {"make", "accelerate", "sbatch"} <= kinds and len(ALL) > 40, [str(c) for c in ALL]


@pytest.mark.subprocess
def test_every_documented_command_names_real_targets_modules_recipes_and_flags():
    problems = [f"{c}\n    {p}" for c in ALL for p in check(c)]
    assert not problems, "\n".join(problems)


@pytest.mark.subprocess
def test_the_checker_catches_a_wrong_command():
    wrong = [
        "make sft RECIPE=tiny-llama/sft-2k-cpu ARGS=--max_step 3",
        "make trian",
        "make data FLAGS=--forse",
        "make plan FLAGS=--num-gpu",
        "python -m longctx plan tiny-2k --gpu-memory 80",
        "python -m longctx sft llama8b-265k",
        "python -m longctx validate tests/recipes/eight-gpu.yaml --gpu-memory 80",
        "accelerate launch --config_file accelerate_configs/cpu-sp3.yaml recipes/sft.py --config recipes/x.yaml",
    ]
    caught = {text: check(Command("test", text)) for text in wrong}
    assert all(caught.values()), caught


@pytest.mark.subprocess
def test_make_plan_prints_what_the_preflight_doc_shows():
    doc = (REPO / "docs/preflight.md").read_text()
    block = re.search(r"```text\n\$ (make plan [^\n]+)\n(.*?)```", doc, re.DOTALL)
    assert block, "docs/preflight.md lost its `make plan` example"
    tokens = shlex.split(block.group(1))
    proc = run_make("-s", *tokens[1:], timeout=300)
    shown = [line for line in block.group(2).splitlines() if not line.startswith("(")]
    printed = iter(proc.stdout.splitlines())
    missing = next((line for line in shown if line not in printed), None)  # consumes: the lines must come in order
    assert missing is None, f"not printed (or out of order): {missing!r}\n{proc.stdout}"


@pytest.mark.subprocess
def test_the_layout_table_names_every_top_level_folder():
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    folders = {p.split("/")[0] for p in listed.split() if "/" in p and not p.startswith(".")}
    table = (REPO / "README.md").read_text().split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = set(re.findall(r"^\| `([\w.-]+)/`", table, re.MULTILINE))
    assert folders <= rows, f"README's layout table lacks {sorted(folders - rows)}"
