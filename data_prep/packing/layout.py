"""How long every prepared sequence is: the padding rule shared by the packer, the writer and the collator.

Under Ulysses SP each sequence is split into sp equal shards, so its length must be a multiple of sp_size
(and of an optional per-rank alignment such as 64 for matmul efficiency). When the accelerate config fixes
the length (`sp_seq_length_is_variable: false`), or the recipe pads every batch to max_length (`pad_to_multiple_of:
max_length`, as the CPU recipes do for one shape every step), every sequence is exactly max_length instead.
"""

import math
from dataclasses import dataclass

import numpy as np

from longctx.config.rules.sequence import uneven_shards


@dataclass(frozen=True)
class Layout:
    max_length: int
    multiple: int  # lcm(sp_size, alignment, ...)
    fixed_length: bool  # pad every sequence to exactly max_length

    @classmethod
    def build(cls, max_length: int, sp_size: int, alignment: int = 1, fixed_length: bool = False, extra: int = 1):
        multiple = math.lcm(sp_size, alignment, extra)
        return cls(max_length=max_length, multiple=multiple, fixed_length=fixed_length)

    def padded(self, lengths: np.ndarray) -> np.ndarray:
        """Row length for rows holding `lengths` real tokens."""
        if self.fixed_length:
            return np.full_like(lengths, self.max_length)
        return -(-lengths // self.multiple) * self.multiple

    def problems(self) -> list[str]:
        """Why this layout cannot hold a sequence of max_length tokens, if it cannot."""
        of_what = f"{self.multiple} (lcm of sp_size and the alignment)"
        uneven = uneven_shards(self.max_length, self.multiple, of_what)
        if uneven:
            what, fix = uneven
            return [f"max_length {what}: every sequence must split evenly across SP ranks; {fix}"]
        return []
