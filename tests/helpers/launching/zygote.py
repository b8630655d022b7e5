"""A warm launch zygote for the test session: ranks forked from a process that has imported the stack once.

Why: every rank of every `accelerate launch` a test makes spends about 12 s of CPU importing torch, transformers,
DeepSpeed, TRL and Liger before it does anything (measured: `tests/helpers/launching/zygote.py` docstring in
docs/tests.md); on 2 cores that import, not the training, is most of a small launch. The launch itself stays the real
one: `accelerate launch` -> torch's elastic agent, which starts each rank as `$PYTHON_EXEC -u SCRIPT ARGS`
(torch/distributed/run.py). With the zygote on, PYTHON_EXEC is a small client (`client` below, a stdlib-only
script) that hands its argv, environment, working folder and standard streams to the zygote, which forks a child
that becomes the rank: the environment replaced by the client's, sys.argv and sys.path as a fresh interpreter would
set them, then the script run as `__main__` (runpy). The client relays signals to that child and exits with its
status, so the agent sees a rank as it would see a process of its own.

What a fork cannot carry, the client refuses, and then it execs the real interpreter instead (exactly what runs
without the zygote): any interpreter flag but -u and -m, a PYTHONPATH folder with startup code (sitecustomize.py:
tests/user/test_copy_out.py removes the editable install's import hook that way) or with a package named like a
preloaded one, and any environment variable a preloaded library reads when it is imported (`IMPORT_TIME`: the
Hub's offline switches and caches, DeepSpeed's accelerator, the CUDA device list, the hash seed...) whose value
differs from the zygote's. The rank does not see the zygote's own `tests` modules.

    python -m tests.helpers.launching.zygote serve SOCKET   # prints "ready" once the stack is imported
"""

import json
import os
import re
import signal
import socket
import struct
import sys

# What a preloaded module may read from the environment at import time: a differing value means the fork would run
# with the zygote's value, so the client execs the real interpreter instead. Per-rank variables (RANK, LOCAL_RANK,
# MASTER_PORT, OMP_NUM_THREADS, TORCHELASTIC_*, ACCELERATE_*, and what the elastic agent sets for each worker:
# PYTORCH_NVML_BASED_CUDA_CHECK, TORCH_NCCL_ASYNC_ERROR_HANDLING), the allocator setting PYTORCH_CUDA_ALLOC_CONF
# (read at the first CUDA allocation), HF_TOKEN (huggingface_hub reads it at each call) and
# TORCH_EXTENSIONS_DIR (read at each JIT load) are read when the rank runs, not at import: the child gets the client's.
# PYTHONPATH becomes the child's sys.path; OMP_NUM_THREADS is applied to torch's pool in the child.
IMPORT_TIME = re.compile(
    r"^(HF_(?!TOKEN$)|HUGGINGFACE_|TRANSFORMERS_|DATASETS_|TOKENIZERS_(?!PARALLELISM$)|DS_|DEEPSPEED_|CUDA_|NCCL_|TRITON_|"
    r"PYTORCH_(?!NVML_BASED_CUDA_CHECK$|CUDA_ALLOC_CONF$)|TORCH_(?!EXTENSIONS_DIR$|NCCL_ASYNC_ERROR_HANDLING$)|LIGER_|TRL_|KMP_|MKL_|"
    r"XDG_CACHE_HOME$|PYTHONHASHSEED$|PYTHONWARNINGS$|LD_PRELOAD$)"
)
PRELOAD = ("torch", "numpy", "transformers", "accelerate", "datasets", "deepspeed", "trl", "peft",
           "liger_kernel.transformers", "torch.distributed.elastic",
           "deepspeed.runtime.zero.muon.muon_optimizer", "deepspeed.runtime.engine", "trl.trainer.sft_trainer",
           "trl.trainer.dpo_trainer", "trl.trainer.grpo_trainer")  # fmt: skip


def fingerprint(env) -> dict:
    """The import-time variables, and the home folder the Hub's cache paths are made from (HOME, or the password
    database where HOME is unset, as `os.path.expanduser` does in the client). `DS_ACCELERATOR=cpu` (what the
    launch home sets for a CPU recipe, longctx/launch quiet_env) counts as unset on a machine without CUDA, where
    DeepSpeed picks the CPU accelerator itself."""
    found = {k: v for k, v in env.items() if IMPORT_TIME.match(k)} | {"~": os.path.expanduser("~")}
    if found.get("DS_ACCELERATOR") == cpu_default():
        del found["DS_ACCELERATOR"]
    return found


def cpu_default() -> str | None:
    """ "cpu" where DeepSpeed would pick the CPU accelerator unasked (no CUDA), else None."""
    import torch

    return None if torch.cuda.is_available() else "cpu"


CLIENT = r"""#!{python} -S
# The zygote's client (tests/helpers/launching/zygote.py): a rank started by torch's elastic agent as PYTHON_EXEC.
import array, json, os, signal, socket, struct, sys
SOCK, REAL, WANT, SHADOWED = {sock!r}, {python!r}, {want!r}, {shadowed!r}
args = sys.argv[1:]
rest = [a for a in args if a != "-u"]
module = rest[:1] == ["-m"]
rest = rest[1:] if module else rest
env = dict(os.environ)
mine = {{k: v for k, v in env.items() if __import__("re").match({pattern!r}, k)}} | {{"~": os.path.expanduser("~")}}
if mine.get("DS_ACCELERATOR") == {ds_default!r}:
    del mine["DS_ACCELERATOR"]
def fallback(why):  # the real interpreter, as without the zygote; why, in the zygote's folder
    with open(os.path.join(os.path.dirname(SOCK), "fallbacks.log"), "a") as log:
        log.write(f"{{' '.join(args[:4])[:200]}}: {{why}}\n")  # script and command: no argument (a token?)
    os.execv(REAL, [REAL, *args])
if not rest or rest[0].startswith("-"):
    fallback("interpreter flags")
if mine != WANT:
    fallback("differs: " + " ".join(sorted(k for k in mine.keys() | WANT.keys() if mine.get(k) != WANT.get(k))))
for entry in filter(None, env.get("PYTHONPATH", "").split(os.pathsep)):  # what a fresh interpreter would do otherwise
    names = set(os.listdir(entry)) if os.path.isdir(entry) else set()
    if names & {{"sitecustomize.py", "usercustomize.py"}}:
        fallback(entry + " runs startup code")
    if names & SHADOWED:
        fallback(entry + " holds " + " ".join(sorted(names & SHADOWED)))
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(SOCK)
except OSError:
    fallback("no zygote at " + SOCK)
job = {{"argv": rest, "module": module, "env": env, "cwd": os.getcwd(), "client": os.getpid(), "ppid": os.getppid()}}
job = json.dumps(job).encode()
fds = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))]
s.sendmsg([struct.pack("!I", len(job)) + job], fds)
f = s.makefile("rb")
child = int(f.readline())
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT):
    signal.signal(sig, lambda n, _f: os.kill(child, n))
status = int(f.readline() or b"-9")
if status < 0:  # the child died of a signal: so does the client (SIGKILL's disposition cannot be set)
    if -status not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(-status, signal.SIG_DFL)
    os.kill(os.getpid(), -status)
sys.exit(status)
"""


def wait_ready(stdout, timeout: float = 600) -> bool:
    """Whether the zygote's stdout said "ready" (libraries may print before it: DeepSpeed's accelerator line) within
    `timeout` seconds; a zygote stuck importing must not hang the session (its launches then start fresh ranks)."""
    import threading

    said = []
    reader = threading.Thread(
        target=lambda: said.append(any(line.strip() == "ready" for line in iter(stdout.readline, ""))), daemon=True
    )
    reader.start()
    reader.join(timeout)
    return bool(said and said[0])


def write_client(folder: str, sock: str, env: dict) -> str:
    """The client script (PYTHON_EXEC), for this interpreter and the zygote's import-time environment `env`."""
    path = os.path.join(folder, "python-zygote")
    want, pattern = fingerprint(env), IMPORT_TIME.pattern
    shadowed = {name for top in PRELOAD for name in (top.split(".")[0], top.split(".")[0] + ".py")}
    text = CLIENT.format(python=sys.executable, sock=sock, want=want, pattern=pattern, ds_default=cpu_default(),
                         shadowed=shadowed)  # fmt: skip
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)
    return path


def report_fallbacks(log_path) -> None:
    """A warning in the session's summary for each reason ranks started as fresh interpreters instead of forks.

    Why: a fallback is correct but silent, and costs about 10 s of CPU per rank; one environment variable set by
    in-process data prep (TOKENIZERS_PARALLELISM, when it counted as import-time) sent nearly every later launch of
    the session down this path and doubled the slow tier's time without failing anything."""
    import collections
    import warnings

    if not os.path.exists(log_path):
        return
    with open(log_path) as f:
        reasons = collections.Counter(line.split(": ", 1)[-1].strip() for line in f)
    for why, count in reasons.most_common():
        warnings.warn(f"{count} rank(s) started without the zygote: {why}", stacklevel=1)


def receive(conn: socket.socket) -> tuple[dict, list[int]]:
    """One job: its JSON and the client's three standard streams (passed as file descriptors)."""
    fds = []
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack("!I", data[:4])[0]:
        msg, anc, _flags, _addr = conn.recvmsg(1 << 20, socket.CMSG_SPACE(3 * 4))
        if not msg:
            raise ConnectionError("the client went away before its job was read")
        data += msg
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += list(struct.unpack(f"{len(payload) // 4}i", payload))
    return json.loads(data[4:]), fds


def become(job: dict, fds: list[int], base_path: list[str]) -> None:
    """In the forked child: the rank's streams, environment, folder, argv and path, then its script as __main__."""
    import runpy

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.setsid()
    os.environ.clear()
    os.environ.update(job["env"])
    os.chdir(job["cwd"])
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for name in [m for m in sys.modules if m == "tests" or m.startswith("tests.")]:  # the zygote's own, not the rank's
        del sys.modules[name]
    watch_client(job["client"])
    os.getppid = parent_as_launched(job["ppid"])
    extra = [p for p in job["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    if "OMP_NUM_THREADS" in job["env"]:
        import torch

        torch.set_num_threads(int(job["env"]["OMP_NUM_THREADS"]))
    target = job["argv"][0]
    sys.argv = list(job["argv"])
    try:
        if job["module"]:
            sys.path[:] = [job["cwd"], *extra, *base_path]
            sys.argv[0] = target
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.path[:] = [os.path.dirname(os.path.abspath(target)), *extra, *base_path]
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
        finish(code)
    except BaseException:  # noqa: BLE001 - an uncaught error ends a rank as the interpreter would: traceback, 1
        import traceback

        traceback.print_exc()
        finish(1)
    finish(0)


def parent_as_launched(launcher: int):
    """os.getppid for the rank: the launcher that started the client, not the zygote. Only in the rank itself: a
    process it forks (a DataLoader worker) must see its real parent, whose death its watchdog waits for
    (torch/utils/data/_utils/worker.py ManagerWatchdog); with the launcher's pid it outlived the rank, holding the
    launch's output pipe open, and the command that read it never ended."""
    real, rank = os.getppid, os.getpid()
    return lambda: launcher if os.getpid() == rank else real()


def finish(code: int) -> None:
    """Exit as an interpreter would: flush the streams, run atexit handlers, then leave without the zygote's."""
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001, S110 - a closed stream at exit changes nothing
            pass
    os._exit(code)


def watch_client(pid: int) -> None:
    """A rank whose client is gone (killed by the agent with SIGKILL) ends too: nothing else would stop it."""
    import threading
    import time

    def watch():
        while True:
            time.sleep(0.5)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True).start()


def watch_parent(parent: int) -> None:
    """The zygote ends when the test session that started it is gone (a killed pytest or xdist worker): it runs in
    its own session, so no signal of the parent's reaches it, and nothing else would stop it."""
    import threading
    import time

    def watch():
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def serve(sock_path: str) -> None:
    """Import the stack once, then fork one child per job; tell each client its child's pid and exit status."""
    import gc
    import importlib
    import threading

    watch_parent(os.getppid())
    for name in os.environ.get("ZYGOTE_PRELOAD", ",".join(PRELOAD)).split(","):  # tests of the hand-over: `json`
        importlib.import_module(name)
    gc.freeze()
    base_path = [p for p in sys.path if p and p != os.getcwd()]
    server = socket.socket(socket.AF_UNIX)
    server.bind(sock_path)
    server.listen(64)
    print("ready", flush=True)
    while True:
        conn, _ = server.accept()
        try:
            job, fds = receive(conn)
        except (OSError, ValueError, ConnectionError):
            conn.close()
            continue
        pid = os.fork()
        if pid == 0:
            server.close()
            conn.close()
            become(job, fds, base_path)
        for fd in fds:
            os.close(fd)
        conn.sendall(f"{pid}\n".encode())
        threading.Thread(target=reap, args=(pid, conn), daemon=True).start()


def reap(pid: int, conn: socket.socket) -> None:
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    try:
        conn.sendall(f"{code}\n".encode())
    except OSError:
        pass
    conn.close()


if __name__ == "__main__":
    if sys.argv[1:2] != ["serve"] or len(sys.argv) != 3:
        sys.exit("usage: python -m tests.helpers.launching.zygote serve SOCKET")
    serve(sys.argv[2])
