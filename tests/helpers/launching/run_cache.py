"""Launch each training run once per test session and hand its result to every test that asks for it.

A parity module compares runs pairwise (sp=2 against sp=1, a negative control against sp=1, ...), so one run
serves several tests. `runs = run_cache("parity", write_rows, one_run)` at module level declares the fixture
`runs`: the rows are written once, and `runs(2)` or `runs(2, extra=...)` launches `one_run(folder, data, 2, ...)`
the first time those arguments (defaults filled in, so `runs(1)` and `runs(1, "recipes/sft.py")` are one run) are
asked for, and hands back the same result after that.
"""

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


class Runs:
    """The runs of one module so far, by their arguments; `folder` holds the data and every run's output."""

    def __init__(self, launch: Callable[..., Any], folder: Path, data: Path):
        self.launch, self.folder, self.data = launch, folder, data
        self.signature = inspect.signature(launch)
        self.results: dict[tuple, Any] = {}

    def __call__(self, *args, **kwargs) -> Any:
        bound = self.signature.bind(self.folder, self.data, *args, **kwargs)
        bound.apply_defaults()
        key = tuple(bound.arguments.values())
        if key not in self.results:
            self.results[key] = self.launch(*bound.args, **bound.kwargs)
        return self.results[key]


def run_cache(name: str, write_data: Callable[[Path], Any], launch: Callable[..., Any]):
    """A session-scoped fixture handing out a `Runs`: write_data(folder / "data") once, in a fresh temporary
    folder named `name`; then launch(folder, data, *args, **kwargs) once per distinct arguments."""

    @pytest.fixture(scope="session")
    def runs(tmp_path_factory) -> Runs:
        folder = tmp_path_factory.mktemp(name)
        write_data(folder / "data")
        return Runs(launch, folder, folder / "data")

    return runs
