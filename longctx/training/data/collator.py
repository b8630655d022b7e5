"""Collate prepared rows (data_prep output) into the [batch, seq] tensors DeepSpeed's SP adapter shards.

Rows are already padded to a multiple of sp (or to max_length); a batch of rows of different lengths is
padded to the longest with the same rule data_prep uses (pad token, label -100, position_ids restarting
at 0). Only `input_ids`, `labels` and `position_ids` are emitted: no `attention_mask`, which would make
FlashAttention ignore the per-document position_ids, and no 1-D `cu_seq_lens_*`, which the SP adapter
cannot shard.
"""

from dataclasses import dataclass

import torch

KEYS = ("input_ids", "labels", "position_ids")


@dataclass
class PreparedCollator:
    pad_token_id: int

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        width = max(len(r["input_ids"]) for r in rows)
        out = {
            "input_ids": torch.full((len(rows), width), self.pad_token_id, dtype=torch.long),
            "labels": torch.full((len(rows), width), -100, dtype=torch.long),
            "position_ids": torch.zeros((len(rows), width), dtype=torch.long),
        }
        for i, row in enumerate(rows):
            n = len(row["input_ids"])
            for key in KEYS:
                out[key][i, :n] = torch.as_tensor(row[key], dtype=torch.long)
            out["position_ids"][i, n:] = torch.arange(width - n)
        return out
