"""torch_npu.contrib.function.npu_functional: dropout_with_byte_mask."""

from __future__ import annotations

import torch

__all__ = ["dropout_with_byte_mask"]


def dropout_with_byte_mask(input1: torch.Tensor, p: float = 0.5, training: bool = True,
                           inplace: bool = False) -> torch.Tensor:
    """torch_npu.dropout_with_byte_mask(input1, p, training); inplace=True writes the result
    back into input1."""
    out = torch.ops.npu.dropout_with_byte_mask(input1, p, training)
    return input1.copy_(out) if inplace else out
