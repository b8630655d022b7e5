"""The runtime imports no tool: what `recipes/sft.py` runs (longctx/config/, longctx/training/) stands on its own.

The copy-out set (the `<!-- copy-out set -->` block of docs/reusing-a-recipe.md) is the entrypoint,
`longctx/__init__.py`, `longctx/config/` and `longctx/training/`; a tool import anywhere in them (even inside a
function, reached only when a recipe key is on, as the in-training retrieval callback once reached
`longctx.evaluation`) breaks a copied recipe. The imports are read from the code's syntax tree, every `import`
and `from ... import` at any depth and `importlib.import_module("...")` with a literal name; the tools are every
other subpackage of `longctx` (found on disk, so a new tool is covered without editing this test) and `data_prep`.
tests/user/test_copy_out.py runs the copy.
"""

import ast
from pathlib import Path

from tests.helpers import REPO

RUNTIME = ("longctx.config", "longctx.training")
ENTRYPOINT = REPO / "recipes" / "sft.py"


def tool_packages() -> set[str]:
    """Every subpackage of longctx that is not the runtime, and the data tool."""
    subpackages = {f"longctx.{p.name}" for p in (REPO / "longctx").iterdir() if (p / "__init__.py").is_file()}
    return (subpackages - set(RUNTIME)) | {"data_prep"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_module_call(node) -> str | None:
    """The literal name of an `importlib.import_module("...")` call, else None."""
    if not isinstance(node, ast.Call) or ast.unparse(node.func) not in ("importlib.import_module", "import_module"):
        return None
    first = node.args[0] if node.args else None
    return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None


def imported_modules(source: str, module: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the source, relative ones resolved against `module`."""
    package = module.split(".")
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module
            if node.level:  # `from ..x import y` inside package a.b.c names a.x
                base = ".".join(package[: len(package) - node.level] + ([node.module] if node.module else []))
            found += [(node.lineno, base)] + [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
        elif _import_module_call(node):
            found.append((node.lineno, _import_module_call(node)))
    return found


def tool_imports(path: Path, tools: set[str], source: str | None = None) -> list[str]:
    """One line per import of a tool in the file at `path` (or in `source`, read as that file)."""
    hits = []
    source = path.read_text() if source is None else source
    for line, name in imported_modules(source, module_name(path)):
        tool = next((t for t in tools if name == t or name.startswith(t + ".")), None)
        if tool:
            hits.append(f"{path.relative_to(REPO)}:{line}: imports {name} (the tool {tool})")
    return hits


def runtime_files() -> list[Path]:
    return [ENTRYPOINT] + [f for pkg in RUNTIME for f in sorted((REPO / pkg.replace(".", "/")).rglob("*.py"))]


def test_the_runtime_imports_no_tool():
    tools = tool_packages()
    assert {"longctx.evaluation", "longctx.preflight", "longctx.launch", "data_prep"} <= tools
    problems = [hit for path in runtime_files() for hit in tool_imports(path, tools)]
    assert not problems, "the copy-out runtime must not import a tool:\n" + "\n".join(problems)


def test_the_bottom_layer_imports_nothing_above_it():
    above = tool_packages() | {"longctx.training"}
    config_files = sorted((REPO / "longctx" / "config").rglob("*.py"))
    problems = [hit for path in config_files for hit in tool_imports(path, above)]
    assert not problems, "longctx/config/ imports nothing of ours above it:\n" + "\n".join(problems)


def test_the_scanner_finds_each_kind_of_import():
    source = (
        "import os\n"
        "from longctx.training.sequence_parallel import mesh\n"
        "def slice_of_eval():\n"
        "    from longctx.evaluation.worker import shard_sums\n"
        "    import data_prep.pipeline\n"
        "    return importlib.import_module('longctx.preflight.checks')\n"
        "from ...leak_probe import worker\n"
        "from .scoring import verdict\n"
    )
    path = REPO / "longctx" / "training" / "retrieval" / "example.py"  # where the source is read as; not written
    hits = tool_imports(path, tool_packages(), source)
    assert sorted(hit.split(": ", 1)[0].rsplit(":", 1)[1] for hit in hits) == ["4", "4", "5", "6", "7", "7"], hits
    assert any("imports longctx.leak_probe.worker" in hit for hit in hits)  # the relative import, resolved
    found = {name for _, name in imported_modules(source, module_name(path))}
    assert "longctx.training.retrieval.scoring" in found and "os" in found


def test_no_tool_imports_the_command_line():
    """The command line sits on top: `longctx/cli.py` and `longctx/commands/` import the tools, never the reverse
    (a tool that needs a command's parsing has it in the tool, as preflight/run.py and evaluation/options.py)."""
    top = {"longctx.cli", "longctx.commands", "longctx.__main__"}
    entry = {REPO / "longctx" / "cli.py", REPO / "longctx" / "__main__.py"}
    files = sorted([*(REPO / "longctx").rglob("*.py"), *(REPO / "data_prep").rglob("*.py")])
    below = [f for f in files if f not in entry and not f.is_relative_to(REPO / "longctx" / "commands")]
    upward = "def options():\n    from longctx.commands.eval import parse_args\n"
    assert tool_imports(REPO / "longctx" / "evaluation" / "worker.py", top, upward)  # what it catches
    problems = [hit for path in below for hit in tool_imports(path, top)]
    assert not problems, "a tool imports the command line above it:\n" + "\n".join(problems)
