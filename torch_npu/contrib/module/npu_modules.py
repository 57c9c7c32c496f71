"""torch_npu.contrib.module.npu_modules: DropoutWithByteMask (dropout whose mask is a uint8
byte per element, torch_npu.dropout_with_byte_mask)."""

from __future__ import annotations

import torch

__all__ = ["DropoutWithByteMask"]


class DropoutWithByteMask(torch.nn.Module):
    """torch.nn.Dropout with torch_npu's byte mask: in training each element is kept with
    probability 1 - p and scaled by 1 / (1 - p); in eval mode the input passes unchanged.
    max_seed is accepted for torch_npu's signature (the mask draws from the npu generator)."""

    def __init__(self, p: float = 0.5, inplace: bool = False, max_seed: int = 2 ** 10 - 1):
        super().__init__()
        if not 0.0 <= float(p) <= 1.0:
            raise ValueError(f"DropoutWithByteMask: p must be in [0, 1], got {p}")
        self.p = float(p)
        self.inplace = inplace
        self.max_seed = max_seed

    def forward(self, input1: torch.Tensor) -> torch.Tensor:
        from torch_npu.contrib.function.npu_functional import dropout_with_byte_mask

        return dropout_with_byte_mask(input1, self.p, self.training, self.inplace)
