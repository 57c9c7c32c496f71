"""torch.npu.amp.GradScaler: torch.amp.GradScaler on the npu device, with torch_npu's arguments.

The scaling itself is torch.amp.GradScaler's: it calls aten::_amp_foreach_non_finite_check_and_unscale_
and aten::_amp_update_scale_, which SimNPU runs as its own kernels queued on the current stream
(adapter/ops/Amp.cpp), so the scale, the growth tracker and found_inf stay on the device and a
step costs no host round trip beyond the one torch's own step() makes to decide on skipping (a
fused optimizer, e.g. torch_npu.optim.NpuFusedAdamW, skips on the device instead).
"""

from collections import defaultdict

import torch
from torch.amp.grad_scaler import _refresh_per_optimizer_state

__all__ = ["GradScaler"]


class GradScaler(torch.amp.GradScaler):
    """``torch.npu.amp.GradScaler(...)`` is ``torch.amp.GradScaler("npu", ...)``, plus torch_npu's
    ``dynamic`` argument: with ``dynamic=False`` the scale stays at ``init_scale`` (``update()``
    leaves it alone unless given ``new_scale``), while steps whose gradients hold inf or NaN are
    still skipped."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
        dynamic: bool = True,
    ) -> None:
        super().__init__(
            "npu",
            init_scale=init_scale,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
            enabled=enabled,
        )
        self._dynamic = bool(dynamic)

    def is_dynamic(self) -> bool:
        """Whether update() adjusts the scale (``dynamic=True``, the default)."""
        return self._dynamic

    def update(self, new_scale=None) -> None:
        if self._enabled and not self._dynamic and new_scale is None:
            # A static scale: the iteration ends as in torch's update(), minus the scale change.
            self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)
            return
        super().update(new_scale)
