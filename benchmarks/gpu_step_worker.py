"""The child process of benchmarks/gpu_step.py for the jobs that are not training: `env` and `attn`.

Why a child: the parent imports no torch, and an attention case that runs out of GPU memory costs this process only.
The child exits after any failed job (benchmarks/gpu_step_child.py starts a fresh one). The training rows are the
recipe's own run (benchmarks/gpu_step_recipe.py), not this process.

Protocol: one JSON job per line on stdin (`{"job": "env" | "attn", ...}`); each answer is one line on stdout starting
with `ROW_PREFIX`; everything else the libraries print passes through. Not run by hand.
"""

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

import torch  # noqa: E402

GIB = 2**30
ROW_PREFIX = "@@row "
FAILED = 3  # exit code after a failed job: the parent starts a fresh child for the next one


def host() -> dict:
    """The host's memory as this process sees it (psutil: on the GPU image, not pinned by the repository)."""
    try:
        import psutil
    except ImportError:
        return {}
    vm, rss = psutil.virtual_memory(), psutil.Process().memory_info().rss
    return {"host_total_gib": round(vm.total / GIB, 1), "host_avail_gib": round(vm.available / GIB, 1),
            "rss_gib": round(rss / GIB, 2)}  # fmt: skip


def env_row(_job, _state) -> dict:
    """Versions of the node's own stack and the carried pins, and the memory torch sees."""
    from importlib.metadata import PackageNotFoundError, version

    row = {"status": "ok", "python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda}
    carried = ("transformers", "trl", "deepspeed", "liger_kernel", "accelerate", "datasets", "peft", "triton")
    for name in (*carried, "safetensors", "tokenizers", "regex", "pyarrow", "huggingface_hub"):
        try:
            row[name] = version(name)
        except PackageNotFoundError:
            row[name] = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        row |= {"gpu": props.name, "gpu_total_gib": round(props.total_memory / GIB, 2),
                "sms": props.multi_processor_count, "cudnn": torch.backends.cudnn.version()}  # fmt: skip
    return row | host()


def attn_row(job, _state) -> dict:
    """One attention case alone (benchmarks/gpu_step_attention.py)."""
    from gpu_step_attention import attention_case

    return attention_case(job["case"], job["seq"])


JOBS = {"env": env_row, "attn": attn_row}


def answer(job: dict, row: dict) -> None:
    print(ROW_PREFIX + json.dumps(row), flush=True)


def main() -> int:
    """Run jobs until stdin closes; after a failed job, answer with its error and exit (a fresh child follows)."""
    state: dict = {}
    for line in sys.stdin:
        job = json.loads(line)
        try:
            row = JOBS[job["job"]](job, state)
        except torch.OutOfMemoryError as exc:
            answer(job, {"status": "GPU out of memory", "error": str(exc).splitlines()[0][:300]} | host())
            return FAILED
        except Exception as exc:  # noqa: BLE001 - any failure of a job is a finding: its row names the error
            answer(job, {"status": "failed", "error": f"{type(exc).__name__}: {str(exc)[:300]}"} | host())
            return FAILED
        answer(job, row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
