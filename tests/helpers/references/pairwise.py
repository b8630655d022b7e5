"""The pairwise runs' inputs and their each-sequence-alone references (tests/parity/test_pairwise.py).

Every step of a run trains all its rows (gradient accumulation = rows / dp), so the step's gradient does not depend
on the order the sampler hands them out, and two steps of plain SGD are two full-batch steps of a plain transformers
model over every document (SFT: the token mean over all of them) or every pair (DPO: the mean over pairs of the
loss written out below), each document or sequence run alone. The documents are sized so that best-fit packing puts
exactly two in a 1024-token row in either layout (a DPO pair with its prompt once or twice), so the row count is
known and even.
"""

import itertools
import json
import random
from pathlib import Path

import numpy as np
import torch

from longctx.combinations.axes import BASES, COMMON
from longctx.training.retrieval.haystack import filler_sentence, haystack

REPO = Path(__file__).resolve().parents[3]
TINY = REPO / "recipes/assets/tiny-llama"
LR, BETA = COMMON["learning_rate"], BASES["dpo"]["beta"]
SEED, GAMMA = COMMON["seed"], 0.5  # PreferenceConfig's default simpo_gamma
TRAIN, HOLDOUT = 8, 4  # documents (SFT) or pairs (DPO) trained, and held out with `eval=on`


def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(TINY)


def sentences_of(rng, tok, low: int, high: int, start: str = "") -> str:
    """Filler sentences until the text has between `low` and `high` tokens."""
    text = start
    while len(tok(text)["input_ids"]) < low:
        text += " " + filler_sentence(rng)
    return text if len(tok(text)["input_ids"]) <= high else sentences_of(rng, tok, low, high, start)


def write_documents(folder: Path, count: int) -> Path:
    """`text` rows of 360-480 tokens (for data_prep) and the same tokens as `input_ids` rows (TRL's own path)."""
    rng, tok = random.Random(SEED), tokenizer()
    folder.mkdir(parents=True, exist_ok=True)
    texts = [
        sentences_of(rng, tok, 360, 480, haystack(rng, 2, str(rng.randrange(10**4, 10**5)))) for _ in range(count)
    ]
    (folder / "text").mkdir()
    (folder / "text/train.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    (folder / "ids").mkdir()
    rows = [{"input_ids": tok(t)["input_ids"]} for t in texts]
    (folder / "ids/train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def write_pairs(folder: Path, count: int) -> Path:
    """Pairs of a ~30-token prompt and two ~170-200-token answers: 400-460 tokens with the prompt twice, 370-430
    with it once."""
    rng, tok = random.Random(SEED), tokenizer()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "train.jsonl", "w") as f:
        for _ in range(count):
            key = str(rng.randrange(10**4, 10**5))
            prompt = sentences_of(rng, tok, 26, 32, f"Remember {key}.") + " What is the pass key?"
            chosen = sentences_of(rng, tok, 170, 200, f" The pass key is {key}.")
            rejected = sentences_of(rng, tok, 170, 200, f" It is {rng.randrange(10**4, 10**5)}.")
            f.write(json.dumps({"prompt": prompt, "chosen": chosen, "rejected": rejected}) + "\n")
    return folder


def model_folder(folder: Path, model_name: str, ulysses: int, sp: int) -> Path:
    """The family's model at tiny size (longctx/miniature.py; the tiny Llama as it ships), seeded random weights,
    with the tiny Llama's tokenizer."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from longctx.config.model.config_json import find_model_config
    from longctx.miniature import miniature_config

    tok = tokenizer()
    config = json.loads(find_model_config(model_name).read_text())
    if Path(model_name) != TINY.relative_to(REPO):
        ids = {"bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id}
        config = miniature_config(config, sp, len(tok), ids, ulysses=ulysses)
    torch.manual_seed(SEED)
    built = AutoConfig.for_model(config["model_type"], **{k: v for k, v in config.items() if k != "model_type"})
    AutoModelForCausalLM.from_config(built).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def split_rows(rows) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Each prepared row's segments (input_ids, labels, sequence_ids) at every restart of position_ids."""
    out = []
    for row in rows:
        ids, labels, positions = (np.array(row[k]) for k in ("input_ids", "labels", "position_ids"))
        seqs = np.array(row["sequence_ids"]) if "sequence_ids" in row else np.zeros_like(ids)
        starts = list(np.flatnonzero(positions == 0)) + [len(ids)]
        out += [(ids[a:b], labels[a:b], seqs[a:b]) for a, b in itertools.pairwise(starts)]
    return [seg for seg in out if (seg[1] != -100).any()]


def token_log_probs(model, ids: np.ndarray, labels: np.ndarray) -> torch.Tensor:
    """log p of every label token of one sequence run alone (positions 1.. predicted from the ones before)."""
    x = torch.tensor(ids[None], dtype=torch.long)
    logits = model(input_ids=x).logits[0, :-1]
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # float64 stays float64
    target = torch.tensor(labels[1:], dtype=torch.long)
    keep = target != -100
    return logits.log_softmax(-1)[keep].gather(-1, target[keep, None])[:, 0]


def sft_loss(model, documents) -> torch.Tensor:
    logps = [token_log_probs(model, ids, labels) for ids, labels, _ in documents]
    return -torch.cat(logps).sum() / sum(len(lp) for lp in logps)


def pairs_of(segments) -> list[tuple]:
    """(chosen, rejected) segments of the unshared layout: sequence 2k chosen, 2k + 1 rejected in each row."""
    return [(segments[i], segments[i + 1]) for i in range(0, len(segments), 2)]


def without_prompt(segment: tuple) -> tuple:
    """A sequence cut off its prompt (issue 39's ring without prefix branches): the answer alone."""
    first = int(np.flatnonzero(segment[1] != -100)[0])
    return tuple(part[first:] for part in segment)


def dpo_loss(model, pairs, reference: list | None, simpo: bool) -> torch.Tensor:
    losses = []
    for k, (chosen, rejected) in enumerate(pairs):
        c, r = (token_log_probs(model, ids, labels) for ids, labels, _ in (chosen, rejected))
        if simpo:
            logits = BETA * (c.mean() - r.mean() - GAMMA / BETA)
        else:
            logits = BETA * ((c.sum() - reference[k][0]) - (r.sum() - reference[k][1]))
        losses.append(-torch.nn.functional.logsigmoid(logits))
    return torch.stack(losses).mean()


def reference_run(model, loss_of, steps: int) -> tuple[list[float], list[float], dict]:
    """(losses, grad norms, trained weights) of `steps` full-batch SGD steps at LR."""
    losses, norms = [], []
    params = [p for p in model.parameters() if p.requires_grad]
    for _ in range(steps):
        model.zero_grad()
        loss = loss_of(model)
        loss.backward()
        losses.append(loss.item())
        norms.append(torch.norm(torch.stack([p.grad.norm() for p in params])).item())
        with torch.no_grad():
            for p in params:
                p -= LR * p.grad
    weights = {k.replace(".default", ""): v.detach().clone() for k, v in model.state_dict().items()}
    return losses, norms, weights


def plain_model(folder: Path, lora: dict | None, dtype=torch.float32):
    """The starting model in plain transformers (eager attention), with TRL's LoRA adapter from the same seed; built
    in float32 (the saved weights, the adapter's draws) and then cast to `dtype`."""
    from transformers import AutoModelForCausalLM, set_seed

    model = AutoModelForCausalLM.from_pretrained(  # MoE experts as a loop: torch's grouped GEMM has no float64
        folder, attn_implementation="eager", dtype=torch.float32, experts_implementation="eager"
    )
    if lora:
        from peft import LoraConfig, get_peft_model

        set_seed(SEED)
        config = LoraConfig(r=lora["lora_r"], lora_alpha=lora["lora_alpha"], lora_dropout=0.0, bias="none")
        config.target_modules, config.task_type = set(lora["lora_target_modules"]), "CAUSAL_LM"
        model = get_peft_model(model, config)
    return model.to(dtype)
