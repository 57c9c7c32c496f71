"""torch_npu.npu.utils: the module torch_npu keeps its device helpers in (code imports them from
here: ``from torch_npu.npu.utils import synchronize``), and the helpers of torch_npu's public list
that have no better home.

The device and stream helpers are the same objects as torch.npu's. Of torch_npu's hardware
services, the ones that have an honest answer on a simulated device answer it
(can_device_access_peer, ipc_collect, get_allocator_backend); those that need hardware SimNPU
does not simulate (data dump, overflow status registers, BLAS handles) raise
NotImplementedError naming what is missing, and the sync debug mode accepts its default only.
"""

from __future__ import annotations

import torch_npu._C as _C

from ._device import (  # noqa: F401
    _get_device_index,
    current_device,
    device,
    device_count,
    device_of,
    is_bf16_supported,
    set_device,
    synchronize,
)
from .streams import (  # noqa: F401
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
)

__all__ = ["synchronize", "set_device", "current_device", "device", "device_of", "StreamContext",
           "stream", "set_stream", "current_stream", "default_stream", "is_bf16_supported",
           "can_device_access_peer", "get_sync_debug_mode", "set_sync_debug_mode", "ipc_collect",
           "get_allocator_backend", "current_blas_handle", "init_dump", "set_dump",
           "finalize_dump", "get_npu_overflow_flag", "clear_npu_overflow_flag"]


def can_device_access_peer(device_id, peer_device_id) -> bool:
    """Whether `device_id` can read `peer_device_id`'s memory directly. Simulated devices share
    the host's memory and copy between each other, so every pair of visible devices can.
    An index out of range raises AssertionError("Invalid device id"), as torch_npu's does."""
    count = device_count()
    index = _get_device_index(device_id, optional=True)
    peer = _get_device_index(peer_device_id, optional=True)
    if not 0 <= index < count:
        raise AssertionError(f"Invalid device id {index}: this process sees {count} NPU(s)")
    if not 0 <= peer < count:
        raise AssertionError(f"Invalid peer device id {peer}: this process sees {count} NPU(s)")
    return True


_SYNC_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}


def get_sync_debug_mode() -> int:
    """The current mode: 0 default, 1 warn, 2 error (set_sync_debug_mode)."""
    return _C._npu_get_sync_debug_mode()


def set_sync_debug_mode(debug_mode) -> None:
    """torch.cuda.set_sync_debug_mode's twin. 0 / "default": synchronizing operations pass;
    1 / "warn": each warns "called a synchronizing NPU operation"; 2 / "error": each raises
    RuntimeError with that message instead of waiting. A synchronizing operation is one that
    waits for a stream on the caller's behalf: a blocking copy between npu and host, item(),
    an op whose result size depends on the data (nonzero, masked_select, ...),
    Stream.synchronize. torch.npu.synchronize() is not one, as in torch_npu and CUDA."""
    mode = debug_mode
    if isinstance(debug_mode, str):
        mode = _SYNC_DEBUG_MODES.get(debug_mode, debug_mode)
    if mode not in (0, 1, 2) or isinstance(mode, bool):
        raise RuntimeError(f"invalid value of debug_mode {debug_mode!r}, expected one of "
                           "0 / 'default', 1 / 'warn', 2 / 'error'")
    _C._npu_set_sync_debug_mode(mode)


def ipc_collect() -> None:
    """Frees memory of tensors shared with other processes once they are gone. SimNPU does not
    share npu memory between processes, so there is never any to free."""


def get_allocator_backend() -> str:
    """The npu caching allocator is the only one: "native", as torch_npu answers."""
    return "native"


def _cann_version_key(version: str) -> list:
    """A sortable key of a CANN version string ("8.0.RC3", "9.0.0", "8.0.RC3.sim"): numbers
    compare as numbers, a release candidate (RCn, alpha/beta/Tn) sorts before the release of
    the same numbers, and text after that (".sim") is ignored."""
    import re

    key = []
    for part in str(version).split("."):
        if part.isdigit():
            key.append((int(part), 1, 0))
            continue
        m = re.match(r"(?i)(rc|alpha|beta|t)(\d*)", part)
        if not m:
            break
        key.append((-1, 0, int(m.group(2) or 0)))
    return key


def _is_gte_cann_version(version: str, module: str = "CANN") -> bool:
    """Whether the `module` version (torch_npu.utils.get_cann_version) is at least `version`;
    torch_npu gates features on it. SimNPU reports its runtime's version as CANN's."""
    from torch_npu.utils import get_cann_version

    return _cann_version_key(get_cann_version(module=module)) >= _cann_version_key(version)


def _not_simulated(what: str):
    def refuse(*args, **kwargs):
        raise NotImplementedError(f"torch.npu.{what} needs hardware SimNPU does not simulate "
                                  f"({_WHY[what]}); see docs/api.md")

    refuse.__name__ = refuse.__qualname__ = what
    refuse.__doc__ = f"Not available on SimNPU: {_WHY[what]}."
    return refuse


_WHY = {
    "current_blas_handle": "our GEMM kernels have no BLAS library handle",
    "init_dump": "operator data dump",
    "set_dump": "operator data dump",
    "finalize_dump": "operator data dump",
    "get_npu_overflow_flag": "the float overflow status register; use torch.isfinite or "
                             "GradScaler, which check the values themselves",
    "clear_npu_overflow_flag": "the float overflow status register",
}
current_blas_handle = _not_simulated("current_blas_handle")
init_dump = _not_simulated("init_dump")
set_dump = _not_simulated("set_dump")
finalize_dump = _not_simulated("finalize_dump")
get_npu_overflow_flag = _not_simulated("get_npu_overflow_flag")
clear_npu_overflow_flag = _not_simulated("clear_npu_overflow_flag")
