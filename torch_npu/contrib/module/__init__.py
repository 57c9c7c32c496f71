"""torch_npu.contrib.module: torch_npu's ready-made nn.Modules. SimNPU has NpuDropPath and
DropoutWithByteMask (npu_modules); the others (ROIAlign, DCNv2, ...) wrap npu_* operators SimNPU
does not have yet (docs/api.md)."""

from __future__ import annotations

import torch

from torch_npu.contrib.module.npu_modules import DropoutWithByteMask

__all__ = ["NpuDropPath", "DropoutWithByteMask"]


class NpuDropPath(torch.nn.Module):
    """Drop paths (stochastic depth) per sample, for the main path of residual blocks.

    In training, each sample (index of dimension 0) is zeroed with probability `drop_prob` and
    the others are scaled by 1 / (1 - drop_prob), so the expectation is unchanged; in eval mode,
    or with drop_prob 0 / None, the input is returned as is."""

    def __init__(self, drop_prob: float | None = None):
        super().__init__()
        if drop_prob is not None and not 0 <= float(drop_prob) <= 1:
            raise ValueError(f"NpuDropPath: drop_prob must be in [0, 1], got {drop_prob}")
        self.drop_prob = drop_prob

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.drop_prob or not self.training:
            return x
        keep = 1.0 - float(self.drop_prob)
        if keep == 0.0:
            return x * 0
        shape = (x.shape[0],) + (1,) * (x.dim() - 1)
        mask = torch.empty(shape, dtype=x.dtype, device=x.device).bernoulli_(keep)
        return x * mask / keep
