"""TRL and library limits: what TRL refuses under SP, and the version floors of the stack."""

from importlib import metadata

from longctx.config.problems import Problem, error

FLOORS = {"accelerate": "1.13", "transformers": "5.4", "deepspeed": "0.19.1", "trl": "1.11", "torch": "2.3"}


def installed_version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def version_problems(source: str, versions: dict | None = None) -> list[Problem]:
    """Every package below its floor (or missing); `versions` replaces the installed ones in tests."""
    from packaging.version import Version

    problems = []
    for package, floor in FLOORS.items():
        have = versions[package] if versions and package in versions else installed_version(package)
        if have is None or Version(have) < Version(floor):
            msg = f"{package} {have or 'is not installed'}; Ulysses SP needs {package} >= {floor}"
            fix = f"pip install -c constraints.txt '{package}>={floor}' (or `make install`)"
            problems.append(error(source, f"(installed {package})", msg, fix))
    return problems


def sp_refusals(launch) -> list[Problem]:
    sft, source = launch.sft, launch.source
    if launch.topo is None or launch.topo.sp_size == 1:
        return []
    problems = []
    if getattr(sft, "loss_type", None) == "dft":
        problems.append(error(source, "loss_type", "dft is refused by TRL under SP", "use loss_type: nll"))
    if getattr(sft, "label_smoothing_factor", 0):
        msg = f"is {sft.label_smoothing_factor}; label smoothing is refused under SP"
        problems.append(error(source, "label_smoothing_factor", msg, "set it to 0"))
    return problems


def check(launch) -> list[Problem]:
    return sp_refusals(launch) + version_problems(launch.source)
