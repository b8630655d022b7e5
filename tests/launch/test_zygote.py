"""The test session's warm zygote (tests/helpers/launching/zygote.py): a rank started through its client must behave as
the same command under the real interpreter: argv, sys.path, environment, working folder, streams, exit status, death
by a signal, a signal relayed, and the real interpreter whenever the import-time environment differs. The zygote
here preloads only `json` (ZYGOTE_PRELOAD): what is tested is the hand-over, not the stack's import."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers import REPO
from tests.helpers.launching.zygote import fingerprint, wait_ready, write_client

SCRIPT = """
import json, os, sys, time
print(json.dumps({"argv": sys.argv, "path0": sys.path[0], "name": __name__, "cwd": os.getcwd(),
                  "x": os.environ.get("ZYGOTE_X"), "pid": os.getpid(), "ppid": os.getppid()}), flush=True)
print("to stderr", file=sys.stderr, flush=True)
what = sys.argv[1] if len(sys.argv) > 1 else ""
if what == "raise":
    raise ValueError("boom")
if what == "exit3":
    sys.exit(3)
if what == "kill":
    os.kill(os.getpid(), 9)
if what == "sleep":
    time.sleep(60)
if what == "fork":  # a process the rank forks (a DataLoader worker) sees the rank as its parent
    import multiprocessing
    fork = multiprocessing.get_context("fork")
    parent = fork.SimpleQueue()
    child = fork.Process(target=lambda: parent.put(os.getppid()))
    child.start()
    child.join()
    print(json.dumps({"child_ppid": parent.get(), "rank": os.getpid()}), flush=True)
"""


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    folder = tmp_path_factory.mktemp("zygote")
    sock = str(folder / "z.sock")
    env = {**os.environ, "ZYGOTE_PRELOAD": "json"}
    proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.launching.zygote", "serve", sock], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    assert wait_ready(proc.stdout)
    (folder / "rank.py").write_text(SCRIPT)
    yield folder, write_client(str(folder), sock, env)
    proc.terminate()
    proc.wait(timeout=30)


def run(client, folder, *args, env=None):
    env = {**os.environ, "ZYGOTE_X": "from the client", **(env or {})}
    argv = [client, "-u", *args]
    return subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=60, check=False)


def fallbacks(folder) -> str:
    log = folder / "fallbacks.log"
    return log.read_text() if log.is_file() else ""


@pytest.mark.subprocess
def test_a_forked_rank_gets_the_clients_argv_environment_folder_and_streams(zygote):
    folder, client = zygote
    before = fallbacks(folder)
    proc = run(client, folder, "rank.py", "a", "--b")
    row = json.loads(proc.stdout)
    assert proc.returncode == 0 and proc.stderr == "to stderr\n"
    assert row["argv"] == ["rank.py", "a", "--b"] and row["name"] == "__main__" and row["x"] == "from the client"
    assert row["path0"] == str(folder) and row["cwd"] == str(folder)
    assert row["ppid"] == os.getpid()  # the launcher that started the client, not the zygote
    assert fallbacks(folder) == before  # it was forked, not run by the real interpreter
    module = run(client, folder, "-m", "rank", "exit3")
    assert module.returncode == 3 and json.loads(module.stdout)["argv"] == [str(folder / "rank.py"), "exit3"]


@pytest.mark.subprocess
def test_exit_statuses_are_the_interpreters(zygote):
    folder, client = zygote
    raised = run(client, folder, "rank.py", "raise")
    assert raised.returncode == 1 and "ValueError: boom" in raised.stderr
    assert run(client, folder, "rank.py", "exit3").returncode == 3
    assert run(client, folder, "rank.py", "kill").returncode == -signal.SIGKILL


@pytest.mark.subprocess
def test_a_signal_to_the_client_reaches_the_rank(zygote):
    folder, client = zygote
    env = {**os.environ, "ZYGOTE_X": "x"}
    proc = subprocess.Popen([client, "-u", "rank.py", "sleep"], cwd=folder, env=env, stdout=subprocess.PIPE, text=True)
    rank = json.loads(proc.stdout.readline())["pid"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    time.sleep(0.5)
    with pytest.raises(ProcessLookupError):
        os.kill(rank, 0)


@pytest.mark.subprocess
def test_a_different_import_time_environment_runs_the_real_interpreter(zygote):
    folder, client = zygote
    proc = run(client, folder, "rank.py", env={"HF_HOME": str(folder / "elsewhere")})
    assert proc.returncode == 0 and json.loads(proc.stdout)["argv"] == ["rank.py"]
    assert fallbacks(folder).splitlines()[-1] == "-u rank.py: differs: HF_HOME"


@pytest.mark.subprocess
def test_a_pythonpath_with_startup_code_or_a_shadowing_package_runs_the_real_interpreter(zygote, tmp_path):
    """A fresh interpreter runs sitecustomize.py (tests/user/test_copy_out.py removes the editable hook that way) and
    imports a PYTHONPATH package before the installed one; a fork would do neither."""
    folder, client = zygote
    (tmp_path / "startup").mkdir()
    (tmp_path / "startup" / "sitecustomize.py").write_text("import os\nos.environ['ZYGOTE_X'] = 'site ran'\n")
    proc = run(client, folder, "rank.py", env={"PYTHONPATH": str(tmp_path / "startup")})
    assert json.loads(proc.stdout)["x"] == "site ran"
    assert fallbacks(folder).splitlines()[-1].endswith("startup runs startup code")
    (tmp_path / "shadow" / "transformers").mkdir(parents=True)
    proc = run(client, folder, "rank.py", env={"PYTHONPATH": str(tmp_path / "shadow")})
    assert proc.returncode == 0 and fallbacks(folder).splitlines()[-1].endswith("shadow holds transformers")


def test_waiting_for_a_zygote_that_never_says_ready_gives_up():
    """A zygote stuck importing must not hang the session: the fixture then starts every rank fresh."""
    read, write = os.pipe()
    with os.fdopen(read) as stdout, os.fdopen(write, "w"):
        assert wait_ready(stdout, timeout=0.5) is False
    read, write = os.pipe()
    with os.fdopen(read) as stdout, os.fdopen(write, "w") as pipe:
        pipe.write("DeepSpeed's accelerator line\nready\n")
        pipe.flush()
        assert wait_ready(stdout, timeout=30) is True


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for a parent that will not reap it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.subprocess
def test_the_zygote_ends_when_the_session_that_started_it_is_killed(tmp_path):
    """A killed pytest (or xdist worker) left its zygote running for the rest of the machine's life."""
    sock = tmp_path / "z.sock"
    start = "import subprocess, sys; p = subprocess.Popen([sys.executable, '-m', 'tests.helpers.launching.zygote', "
    start += "'serve', sys.argv[1]], stdout=subprocess.DEVNULL); print(p.pid, flush=True); p.wait()"
    env = {**os.environ, "ZYGOTE_PRELOAD": "json"}
    session = subprocess.Popen([sys.executable, "-c", start, str(sock)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                               text=True)  # fmt: skip
    zygote = int(session.stdout.readline())
    deadline = time.monotonic() + 60
    while not sock.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sock.exists() and alive(zygote)
    session.kill()
    session.wait()
    deadline = time.monotonic() + 15
    while alive(zygote) and time.monotonic() < deadline:
        time.sleep(0.2)
    still = alive(zygote)
    if still:
        os.kill(zygote, signal.SIGKILL)
    assert not still, "the zygote outlived the session that started it"


@pytest.mark.subprocess
def test_a_process_the_rank_forks_sees_the_rank_as_its_parent(zygote):
    """The rank reports the launcher as its parent; a DataLoader worker it forks must see the rank, or its watchdog
    never notices the rank is gone: it outlived it holding the launch's output pipe, and the launch never ended."""
    folder, client = zygote
    proc = run(client, folder, "rank.py", "fork")
    assert proc.returncode == 0, proc.stderr
    first, second = (json.loads(line) for line in proc.stdout.splitlines()[:2])
    assert first["ppid"] == os.getpid()  # this test started the client: the rank's parent as launched
    assert second["child_ppid"] == second["rank"] != first["ppid"]


def test_data_prep_in_the_test_process_keeps_later_launches_warm():
    """Tests prepare data in their own process (`make data` of a recipe) and launch afterwards; whatever that sets in
    the environment must not count as import-time, or every later launch of the session starts fresh interpreters
    (correct, but silent: the tokenizer's TOKENIZERS_PARALLELISM did, and the slow tier ran twice as long)."""
    from unittest import mock

    from data_prep.tokens.encoding import Encoder

    with mock.patch.dict(os.environ):
        for name in ("TOKENIZERS_PARALLELISM", "RAYON_NUM_THREADS"):
            os.environ.pop(name, None)
        before = fingerprint(os.environ)
        for num_proc in (1, 2):
            encoder = Encoder(str(REPO / "recipes/assets/tiny-llama"), num_proc=num_proc)
            try:
                encoded = [enc for _, enc in encoder.map(iter([("text", ["a river", "a road"])]))]
                assert [len(enc.lengths) for enc in encoded] == [2]
            finally:
                encoder.close()
            assert fingerprint(os.environ) == before
