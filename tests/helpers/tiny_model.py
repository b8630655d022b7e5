"""A model folder of the tiny recipe's architecture and tokenizer with seeded random weights (nothing downloaded)."""

from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "recipes/assets/tiny-llama"


def tiny_checkpoint(folder: Path, seed: int = 3) -> Path:
    """Save the tiny Llama (random, seeded) and its tokenizer into `folder`, as `make sft` saves a model."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(TINY)).save_pretrained(folder)
    AutoTokenizer.from_pretrained(TINY).save_pretrained(folder)
    return folder
