"""device.json of a GPU session (benchmarks/gpu_step.sh run): what ran the results beside it, in one small file.

Why a file of its own: the rows of gpu_step.jsonl say what each step measured, not on what; a session cut short by
its timeout must still say which GPU, driver, CUDA and stack it had, so this is written first (before any GPU work,
from the image's interpreter) and rewritten after the install (from the venv that runs everything: the versions
that ran). Nothing here needs a GPU: on CPU (`gpu_step.sh run --cpu`) `gpu` is null and the rest is filled.

    python benchmarks/gpu_device.py --out DIR/device.json --stage image|venv
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, version

GIB = 2**30
PACKAGES = ("torch", "transformers", "trl", "deepspeed", "accelerate", "datasets", "liger_kernel", "peft", "triton",
            "tokenizers", "safetensors", "pytest", "flash_attn", "ring_flash_attn",
            "flash-linear-attention")  # fmt: skip
SMI_FIELDS = ("name", "driver_version", "memory.total", "compute_cap")


def versions() -> dict:
    """The installed version of each package of the stack (None where it is not installed)."""
    found = {}
    for name in PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def smi() -> list[dict] | None:
    """nvidia-smi's view of each GPU (None where there is no nvidia-smi): the driver is only known from here."""
    if not shutil.which("nvidia-smi"):
        return None
    argv = ["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        return [{"error": (proc.stderr or proc.stdout).strip()[-300:]}]
    return [
        dict(zip(SMI_FIELDS, (v.strip() for v in line.split(",")), strict=False)) for line in proc.stdout.splitlines()
    ]


def torch_view() -> dict:
    """What torch sees: its CUDA and cuDNN, and each device's name, memory and SMs (empty without torch)."""
    try:
        import torch
    except ImportError as exc:
        return {"torch_error": str(exc)[:300]}
    row = {"cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(), "gpu": None}
    if torch.cuda.is_available():
        props = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
        row |= {"gpu": props[0].name, "gpu_count": len(props), "gpu_total_gib": round(props[0].total_memory / GIB, 2),
                "sms": props[0].multi_processor_count, "cudnn": torch.backends.cudnn.version()}  # fmt: skip
    return row


def host() -> dict:
    """The host's memory (from /proc/meminfo: psutil is not pinned on the image) and its cores."""
    info = {}
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                key, value = line.split(":", 1)
                info[key] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return {"host_total_gib": round(info.get("MemTotal", 0) / GIB, 1),
            "host_available_gib": round(info.get("MemAvailable", 0) / GIB, 1), "cpus": os.cpu_count(),
            "platform": platform.platform()}  # fmt: skip


def describe(stage: str) -> dict:
    return {"stage": stage, "written_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "python": sys.version.split()[0], "executable": sys.executable, "nvidia_smi": smi(), **torch_view(),
            "versions": versions(), **host()}  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="the device.json to write (replaced)")
    parser.add_argument("--stage", default="venv", help="image: before the install; venv: what runs the session")
    args = parser.parse_args(argv)
    row = describe(args.stage)
    with open(args.out, "w") as f:
        json.dump(row, f, indent=1)
    print(f"[gpu-session] device.json ({args.stage}): gpu={row.get('gpu')} cuda={row.get('cuda')} "
          f"torch={row['versions']['torch']} host={row['host_total_gib']} GiB")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
