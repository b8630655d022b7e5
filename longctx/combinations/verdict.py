"""The verdict of the real checks on one configuration: accepted, or refused with the rules' messages.

It loads the synthesized files through preflight's own loader and runs what `python -m longctx validate` runs on a
recipe, less what depends on the machine it runs on (GPU count, memory, disk, the toolchain, staged data): the
recipe rules the entrypoint enforces (longctx/config/rules, `recipe_problems`) and preflight's file, head, mesh,
kernel, position, DeepSpeed and TRL checks. Only errors refuse; a warning leaves the configuration accepted.
"""

import tempfile
from dataclasses import dataclass
from pathlib import Path

from longctx.combinations.axes import configuration
from longctx.combinations.synthesize import write_configuration
from longctx.config.rules import recipe_problems
from longctx.preflight.checks import attention, deepspeed, files, heads, positions, trl_limits, world
from longctx.preflight.load import Machine, load_launch

# preflight's checks that read the launch alone (longctx/preflight/checks/__init__.py CHECKS, less the machine's)
LAUNCH_CHECKS = (files, heads, world, attention, positions, deepspeed)


@dataclass(frozen=True)
class Verdict:
    refusals: tuple[str, ...]  # "key: message" of each error, in the checks' order

    @property
    def accepted(self) -> bool:
        return not self.refusals


def launch_problems(recipe_path: Path) -> list:
    """Every problem validate reports on this recipe file, less the machine-dependent checks'."""
    launch = load_launch(str(recipe_path), [], Machine())
    problems = list(launch.problems)
    if launch.sft is not None and launch.topo is not None:
        problems += recipe_problems(launch.recipe, launch.sft, launch.model, launch.topo, launch.source)
        for check in LAUNCH_CHECKS:
            problems += check.check(launch)
        problems += trl_limits.sp_refusals(launch)  # its version floors are the machine's
    return problems


class Judge:
    """Verdicts on configurations, each computed once (many pairs synthesize the same files)."""

    def __init__(self, folder: Path | None = None):
        self._tmp = None if folder else tempfile.TemporaryDirectory(prefix="combinations-")
        self.folder = Path(folder or self._tmp.name)
        self.cache: dict[Path, Verdict] = {}

    def verdict(self, chosen: dict) -> Verdict:
        path = write_configuration(self.folder, *configuration(chosen))
        if path not in self.cache:
            errors = [p for p in launch_problems(path) if p.severity == "error"]
            where = f"{self.folder}/"  # messages name the synthesized files by their content-named files alone
            lines = (f"{p.key}: {p.message}".replace(where, "") for p in errors)
            self.cache[path] = Verdict(tuple(dict.fromkeys(lines)))
        return self.cache[path]
