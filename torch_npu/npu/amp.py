"""torch.npu.amp: automatic mixed precision on npu, torch.cuda.amp's twin with torch_npu's names.

`torch.autocast("npu", dtype=...)` is PyTorch's own context manager; the casting policies behind
it (CUDA's lists) are registered by the adapter for the AutocastPrivateUse1 key
(adapter/Autocast.cpp). torch.npu.amp.autocast() defaults to float16, as torch_npu's does.
"""

from __future__ import annotations

import torch
import torch.amp


class autocast(torch.amp.autocast_mode.autocast):
    """``torch.npu.amp.autocast(enabled=True, dtype=torch.float16, cache_enabled=True)``: the same
    as ``torch.autocast("npu", ...)``, usable as a context manager or a decorator."""

    def __init__(self, enabled: bool = True, dtype: torch.dtype = torch.float16,
                 cache_enabled: bool = True):
        super().__init__("npu", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


def custom_fwd(fwd=None, *, cast_inputs: torch.dtype | None = None):
    """Decorator for a custom autograd Function's forward: torch.amp.custom_fwd for npu."""
    return torch.amp.custom_fwd(fwd, device_type="npu", cast_inputs=cast_inputs)


def custom_bwd(bwd=None):
    """Decorator for a custom autograd Function's backward: torch.amp.custom_bwd for npu."""
    return torch.amp.custom_bwd(bwd, device_type="npu")


def get_autocast_dtype() -> torch.dtype:
    """The dtype autocast regions on npu cast to (float16 unless set)."""
    return torch.get_autocast_dtype("npu")


def set_autocast_dtype(dtype: torch.dtype) -> None:
    torch.set_autocast_dtype("npu", dtype)


def is_autocast_enabled() -> bool:
    """Whether the calling thread is inside an enabled npu autocast region."""
    return torch.is_autocast_enabled("npu")


def set_autocast_enabled(enabled: bool) -> None:
    torch.set_autocast_enabled("npu", enabled)


from torch_npu.npu._grad_scaler import GradScaler  # noqa: E402
