"""Collate packed preference rows (data_prep/trainers/preference_rows.py) for DeepSpeed's SP loader and the DPO loss.

Tensors, all [rows, length] so the SP loader shards each along the sequence: `input_ids`, `labels` (answer tokens
only), `position_ids` (restarting per document, or at p > 0 for a shared prompt's second branch) and
`sequence_ids`. Everything per row rather than per token goes as plain lists, which the SP loader hands to every
rank of the group whole: `sequence_counts` (sequences in each row), `row_indices` and, once the reference pass has
run, `ref_logps` (each row's reference log-prob per sequence, from reference.py's table).
"""

from dataclasses import dataclass, field

import torch

TOKEN_KEYS = ("input_ids", "labels", "position_ids", "sequence_ids")
PAD = {"labels": -100, "sequence_ids": -1}


@dataclass
class PreferenceCollator:
    pad_token_id: int
    reference: dict = field(default_factory=dict)  # row_index -> reference log-prob per sequence (reference.py)

    def __call__(self, rows: list[dict]) -> dict:
        width = max(len(r["input_ids"]) for r in rows)
        out = {}
        for key in TOKEN_KEYS:
            fill = self.pad_token_id if key == "input_ids" else PAD.get(key, 0)
            out[key] = torch.full((len(rows), width), fill, dtype=torch.long)
        for i, row in enumerate(rows):
            n = len(row["input_ids"])
            for key in TOKEN_KEYS:
                out[key][i, :n] = torch.as_tensor(row[key], dtype=torch.long)
            out["position_ids"][i, n:] = torch.arange(width - n)  # padding restarts at 0, as data_prep pads
        out["sequence_counts"] = [int(max(r["sequence_ids"], default=-1)) + 1 for r in rows]
        out["row_indices"] = [int(r["row_index"]) for r in rows]
        if self.reference:
            out["ref_logps"] = [self.reference[i] for i in out["row_indices"]]
        return out


def preference_datasets(recipe, config, model, topo, tokenizer):
    """(train rows, held-out rows or None, collator) of a preference recipe, as `make data` prepared them (found
    through their manifest, longctx/training/data/load_prepared.py); every column reaches the collator."""
    from datasets import load_from_disk

    from longctx.config.prepared_manifest import DATASET
    from longctx.training.data.load_prepared import load_prepared_eval, prepared_dir

    train = load_from_disk(str(prepared_dir(recipe, config, model, topo) / DATASET))
    config.remove_unused_columns = False
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return train, load_prepared_eval(recipe, config, model, topo), PreferenceCollator(pad_token_id=pad)
