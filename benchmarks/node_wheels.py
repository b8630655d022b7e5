"""The pins a GPU machine's image lacks, carried in under 64 MiB and installed offline over the image's own packages.

Why: the H200 machine (../shared/gpu notes) has no network, its own Python 3.12 and CUDA torch, and older or missing
packages of the stack (transformers 5.17 where the pin is 5.23, no trl, deepspeed, liger-kernel or datasets); what
travels with a device run is the working tree plus 64 MiB of carried paths in all. `make wheels` (every pin, 179 MB)
does not fit.

`fetch` (a machine with network): the stack (`STACK`, pinned in constraints.txt) and everything it requires, read
from each wheel's own metadata (markers for CPython 3.12 on Linux x86_64, extras left out), pinned versions for
CPython 3.12 manylinux x86_64; not `ON_IMAGE` (the image's own torch, triton and CUDA libraries, and the
packages the notes list at versions every requirement accepts). DeepSpeed has only a source release: a
pure-Python wheel is built (DS_BUILD_OPS=0; its ops compile on the GPU machine). The wheels are unpacked and
packed into one xz archive (`ARCHIVE`): a wheel is a deflate zip, and xz over its files takes about 40% less,
which is what lets pyarrow (55 MB as a wheel, required at >= 24 by datasets 5.2) travel at all.
`install` (the GPU machine, offline): the wheels restored (each folder zipped back: the files RECORD hashes are
unchanged), a venv that sees the image's site-packages (`--system-site-packages` and, as the image's python is
itself a venv, a .pth naming its site folder), then `pip install --no-index --find-links` of the stack pins: pip's
resolver keeps every image package that satisfies the requirements and installs from the archive only what is
missing or too old (transformers 5.23 checks regex, safetensors and tokenizers at import). It prints what it
installed and what it kept. `check`: every module the recipe's path imports, imported once, before any GPU work.

    python benchmarks/node_wheels.py fetch [--out benchmarks/wheels-node]
    python3 benchmarks/node_wheels.py install --venv DIR [--carried benchmarks/wheels-node]
    DIR/bin/python benchmarks/node_wheels.py check
"""

import argparse
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CARRIED = REPO / "benchmarks" / "wheels-node"
ARCHIVE = "wheels.tar.xz"
STACK = ("transformers", "trl", "accelerate", "deepspeed", "datasets", "liger_kernel", "peft")
# Never carried: the image's torch and what it brought, and packages the image has at versions every requirement of
# the stack accepts (../shared/gpu/README.md: huggingface_hub 1.33.0 for >=1.31,<3; numpy and pandas, any version).
ON_IMAGE = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*|numpy|pandas|huggingface-hub)$")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
MARKERS = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
           "platform_python_implementation": "CPython", "os_name": "posix", "extra": ""}  # fmt: skip
IMPORTS = ("transformers", "trl", "datasets", "deepspeed", "deepspeed.ops.adam", "liger_kernel.transformers", "peft",
           "accelerate", "safetensors", "tokenizers", "pyarrow", "longctx.training.trainer",
           "longctx.training.process_patches", "trl.trainer.sft_trainer")  # fmt: skip


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins() -> dict[str, str]:
    """constraints.txt as {canonical name: version}."""
    out = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            out[canonical(name)] = version.strip()
    return out


def requirements(wheel: Path) -> list[str]:
    """The canonical names a wheel requires on CPython 3.12 Linux x86_64, extras left out."""
    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        lines = zf.read(meta).decode().splitlines()
    names = []
    for line in lines:
        if line.startswith("Requires-Dist:"):
            req = Requirement(line.split(":", 1)[1].strip())
            if req.marker is None or req.marker.evaluate(MARKERS):
                names.append(canonical(req.name))
    return names


def download(name: str, version: str, into: Path) -> Path:
    """One pinned wheel for CPython 3.12 manylinux x86_64 (DeepSpeed: built from its source release)."""
    before = set(into.glob("*.whl"))
    pip = [sys.executable, "-m", "pip"]
    if name == "deepspeed":
        cmd = [*pip, "wheel", "-q", "--no-deps", "--wheel-dir", str(into), f"deepspeed=={version}"]
        subprocess.run(cmd, check=True, env={**os.environ, "DS_BUILD_OPS": "0"})
    else:
        platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
        cmd = [*pip, "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
               "--implementation", "cp", *platforms, "-d", str(into), f"{name}=={version}"]  # fmt: skip
        subprocess.run(cmd, check=True)
    new = set(into.glob("*.whl")) - before
    return new.pop() if new else next(w for w in into.glob("*.whl") if canonical(w.name.split("-")[0]) == name)


def fetch(out: Path) -> None:
    """The stack's closure (module docstring) as one xz archive of unpacked wheels, and a list of what it holds."""
    pinned, todo, seen, wheels = pins(), [canonical(n) for n in STACK], set(), []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        while todo:
            name = todo.pop()
            if name in seen or ON_IMAGE.match(name):
                continue
            seen.add(name)
            if name not in pinned:
                raise SystemExit(f"{name} is required but not pinned in constraints.txt: pin it (make lock)")
            wheel = download(name, pinned[name], folder)
            wheels.append(wheel)
            todo += requirements(wheel)
        out.mkdir(parents=True, exist_ok=True)
        pack(wheels, out / ARCHIVE)
        listing = {w.name: w.stat().st_size for w in sorted(wheels)}
    (out / "wheels.json").write_text(json.dumps(listing, indent=1))
    size = (out / ARCHIVE).stat().st_size
    print(f"[wheels] {len(listing)} wheels, {sum(listing.values()) / 2**20:.1f} MiB as wheels, "
          f"{size / 2**20:.1f} MiB in {out / ARCHIVE}")  # fmt: skip


def pack(wheels: list[Path], archive: Path, preset: int = 9) -> None:
    """Every wheel's files, unzipped, under `<wheel name>/` in one xz tar (see `restore`)."""
    with tarfile.open(archive, "w:xz", preset=preset) as tar:
        for wheel in sorted(wheels):
            with zipfile.ZipFile(wheel) as zf:
                for info in zf.infolist():
                    if info.is_dir():  # tar would drop its trailing slash: restored, a file where a folder belongs
                        continue
                    data = zf.read(info)
                    entry = tarfile.TarInfo(f"{wheel.name}/{info.filename}")
                    entry.size = len(data)
                    tar.addfile(entry, io.BytesIO(data))


def restore(carried: Path, into: Path) -> list[Path]:
    """The archive's wheels, each folder zipped back into its .whl (stored: the files are what RECORD hashes)."""
    groups: dict[str, list] = {}
    with tarfile.open(carried / ARCHIVE, "r:xz") as tar:
        for member in tar:
            if not member.isfile():
                continue
            wheel, _, inner = member.name.partition("/")
            groups.setdefault(wheel, []).append((inner, tar.extractfile(member).read()))
    into.mkdir(parents=True, exist_ok=True)
    for wheel, files in groups.items():
        with zipfile.ZipFile(into / wheel, "w", zipfile.ZIP_STORED) as zf:
            for inner, data in files:
                zf.writestr(inner, data)
    return sorted(into.glob("*.whl"))


def image_site() -> list[str]:
    """This interpreter's site folders: what the new venv must see besides the base interpreter's."""
    import site

    return [p for p in site.getsitepackages() if Path(p).is_dir()]


def install(venv: Path, carried: Path) -> int:
    """Restore, make the venv over this (the image's) interpreter, install only what is missing or too old."""
    wheels = restore(carried, venv.parent / "carried-wheels")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip
    (Path(purelib) / "image-site.pth").write_text("\n".join(image_site()) + "\n")
    pinned = pins()
    wanted = [f"{name}=={pinned[canonical(name)]}" for name in STACK]
    cmd = [str(python), "-m", "pip", "install", "--no-index", "--find-links", str(wheels[0].parent),
           "--no-compile", "--disable-pip-version-check", *wanted]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    installed = re.findall(r"Successfully installed (.*)", proc.stdout)
    carried = {canonical(w.name.split("-")[0]) for w in wheels}
    satisfied = re.findall(r"Requirement already satisfied: ([\w.-]+).*\(([^()]+)\)$", proc.stdout, re.MULTILINE)
    upgraded = {canonical(entry.rsplit("-", 1)[0]) for entry in " ".join(installed).split()}
    kept = sorted({f"{n}=={v}" for n, v in satisfied if canonical(n) in carried and canonical(n) not in upgraded})
    print(f"[install] carried but kept, the image's satisfies: {' '.join(kept) or 'none'}")
    print(f"[install] installed from the carried wheels: {installed[0] if installed else 'nothing'}")
    if proc.returncode != 0:
        print(proc.stdout[-2000:] + proc.stderr[-3000:], file=sys.stderr)
    return proc.returncode


def check() -> int:
    """Import every module the recipe's path needs; one line per failure, exit 1 if any failed."""
    import importlib
    from importlib.metadata import version

    sys.path.insert(0, str(REPO))
    failed = []
    for module in IMPORTS:
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - every failure is reported, not only the first
            failed.append(f"{module}: {type(exc).__name__}: {str(exc)[:300]}")
    shown = " ".join(f"{n}=={version(n)}" for n in (*STACK, "torch", "safetensors", "tokenizers", "regex", "pyarrow"))
    print(f"[check] {len(IMPORTS) - len(failed)}/{len(IMPORTS)} imports ok; {shown}")
    print("\n".join(f"[check] FAILED {line}" for line in failed), file=sys.stderr)
    return 1 if failed else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["fetch", "install", "check"])
    parser.add_argument("--out", type=Path, default=CARRIED, help="fetch: the carried folder")
    parser.add_argument("--carried", type=Path, default=CARRIED, help="install: the carried folder")
    parser.add_argument("--venv", type=Path, help="install: the venv to make over this interpreter")
    args = parser.parse_args(argv)
    if args.command == "fetch":
        fetch(args.out)
        return 0
    if args.command == "install":
        return install(args.venv, args.carried)
    return check()


if __name__ == "__main__":
    sys.exit(main())
