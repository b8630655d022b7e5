"""The child process of benchmarks/gpu_step.py: runs the jobs it is sent, one JSON line back per job.

Why a child: a GPU out-of-memory can leave DeepSpeed's partitioned state half-gathered, and a host out-of-memory
ends in the kernel's OOM killer (SIGKILL), which no Python handler sees. Run here, either costs this process only:
the parent writes the row of the job that was running and starts a fresh child for the next one. So the child
exits after any failed job, and builds the model lazily (again after a restart).

Protocol: one JSON job per line on stdin (`{"job": "env" | "attn" | "step", ...}`); each answer is one line on
stdout starting with `ROW_PREFIX`; everything else the libraries print passes through. Not run by hand.
"""

import json
import math
import os
import signal
import sys
import time
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
    for name in ("transformers", "trl", "deepspeed", "liger_kernel", "accelerate", "triton"):
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


def build(tiny: bool, options: dict) -> dict:
    """The recipes' stack on the Llama-3.1-8B architecture, random weights initialised on the GPU."""
    import deepspeed
    from ladder_stack import ARCH, TINY, deepspeed_config, init_distributed
    from transformers import AutoConfig, AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from longctx.training.attention.isolation import install_document_isolation

    install_document_isolation("sdpa")  # as the recipes: packed rows -> torch's varlen kernel on CUDA
    init_distributed()
    config = AutoConfig.from_pretrained(TINY if tiny else ARCH)
    device, dtype = ("cpu", torch.float32) if tiny else ("cuda", torch.bfloat16)
    torch.manual_seed(0)
    with torch.device(device):  # on the GPU: the host init of 8B parameters takes minutes
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    if not tiny:  # Liger's layer kernels (Triton), as `use_liger_kernel: true` in the 8B recipes
        from liger_kernel.transformers import _apply_liger_kernel_to_instance

        _apply_liger_kernel_to_instance(model=model, fused_linear_cross_entropy=False, cross_entropy=False)
    add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))
    model.train()
    ds = deepspeed_config(tiny)
    if not options["offload_params"]:  # the 1-GPU recipe's ZeRO-3: optimizer offload only
        ds["zero_optimization"].pop("offload_param", None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=ds)
    plan = {"num_gpus": 1, "grad_ckpt": True, "head": "trl", "attention": "sdpa" if tiny else "flash",
            "kernels": "hf" if tiny else "liger", "act_offload": False, "tiled_mlp": False,
            "offload_optimizer": not tiny, "offload_params": not tiny and options["offload_params"],
            "reduce_bucket": ds["zero_optimization"]["reduce_bucket_size"],
            "prefetch_bucket": ds["zero_optimization"]["stage3_prefetch_bucket_size"]}  # fmt: skip
    return {"engine": engine, "model": model, "config": config, "device": device, "plan": plan, "selective": False}


def use_selective(state: dict, selective: bool) -> None:
    """Switch the checkpointing of every layer to TRL's selective policy (attention's output kept), in place."""
    if selective == state["selective"]:
        return
    from trl.models.selective_activation_checkpointing import enable_selective_activation_checkpointing

    from longctx.training.attention.varlen import save_in_selective_checkpointing

    if not selective:
        raise ValueError("a built model does not switch back from selective checkpointing")
    save_in_selective_checkpointing()
    enable_selective_activation_checkpointing(state["model"])
    state["model"].gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    state["selective"] = True


def measured(state: dict, seq: int, pos, seconds: float) -> dict:
    """Seconds, rates, FLOP utilisation, peak memory and the plan's prediction of one finished step."""
    from longctx.memory_plan.estimate import estimate
    from longctx.training.metrics.flops import FlopCounts, causal_pairs
    from longctx.training.metrics.throughput import device_peak_flops

    config, plan, selective = state["config"], state["plan"], state["selective"]
    flops, pairs, peak = (
        FlopCounts.from_config(config),
        causal_pairs(pos),
        device_peak_flops(torch.device(state["device"])),
    )
    est = estimate(config.to_dict(), seq_len=seq, sp=1, selective_ckpt=selective, **plan)
    model_flops = flops.model(seq, pairs)
    hardware = flops.hardware(seq, pairs, grad_ckpt=True, tiled_mlp=False, selective=selective)
    row = {"status": "ok", "seconds": round(seconds, 3), "tokens_per_s": round(seq / seconds, 1),
           "model_tflops": round(model_flops / seconds / 1e12, 2), "mfu": None, "hfu": None,
           "plan_gib": round(est.total_gib, 2), "plan_host_gib": round(est.host_per_node, 1),
           "plan_terms": {k: round(v, 2) for k, v in est.rows() if v}}  # fmt: skip
    if peak:
        row |= {"mfu": round(model_flops / seconds / peak, 4), "hfu": round(hardware / seconds / peak, 4)}
    if state["device"] == "cuda":
        row["peak_alloc_gib"] = round(torch.cuda.max_memory_allocated() / GIB, 2)
        row["peak_reserved_gib"] = round(torch.cuda.max_memory_reserved() / GIB, 2)
    return row


def step_row(job, state) -> dict:
    """One forward + backward of one row of `seq` tokens in `docs` documents (no optimizer step: the ladder's)."""
    if "engine" not in state:
        start = time.perf_counter()
        state |= build(job["tiny"], job)
        state["build_s"] = round(time.perf_counter() - start, 1)
    use_selective(state, job.get("selective", False))
    engine, device, seq = state["engine"], state["device"], job["seq"]
    ids = torch.randint(0, state["config"].vocab_size, (1, seq), device=device)
    pos = (torch.arange(seq, device=device) % math.ceil(seq / job["docs"]))[None]
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    loss = engine(input_ids=ids, labels=ids, position_ids=pos, fused_lm_head=True).loss
    engine.backward(loss)
    engine.optimizer.zero_grad()
    if device == "cuda":
        torch.cuda.synchronize()
    row = measured(state, seq, pos, time.perf_counter() - start)
    return row | {"build_s": state.pop("build_s", None)} | host()


JOBS = {"env": env_row, "attn": attn_row, "step": step_row}


def answer(job: dict, row: dict) -> None:
    print(ROW_PREFIX + json.dumps(row), flush=True)


def main() -> int:
    """Run jobs until stdin closes; after a failed job, answer with its error and exit (a fresh child follows)."""
    state: dict = {}
    for line in sys.stdin:
        job = json.loads(line)
        if job.get("kill"):  # the test of the parent: die as the OOM killer would kill this process
            os.kill(os.getpid(), signal.SIGKILL)
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
