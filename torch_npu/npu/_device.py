"""Device state of torch.npu: lazy initialisation, device indices, the current device.

Every other submodule of torch_npu.npu imports what it needs from here at its top, so the
package has no import cycles; torch_npu/npu/__init__.py only re-exports. Initialisation is lazy,
as in torch.cuda: importing costs nothing, and the first call that needs a device starts the
runtime.
"""

from __future__ import annotations

import threading
import traceback
import warnings
from typing import Any, Union

import torch

import torch_npu._C as _C

_DeviceLike = Union[torch.device, str, int, None]

_initialized = False
_initializing = False
_init_lock = threading.Lock()
_queued_calls: list[tuple[Any, list[str]]] = []  # run at initialisation (e.g. manual_seed)
_tls = threading.local()


def _is_in_bad_fork() -> bool:
    return _C._npu_isInBadFork()


def is_initialized() -> bool:
    """Whether the NPU runtime has been initialised in this process."""
    return _initialized and not _is_in_bad_fork()


def _lazy_call(callable_, **kwargs) -> None:
    if is_initialized():
        callable_()
    else:
        _queued_calls.append((callable_, traceback.format_stack()))


def _lazy_init() -> None:
    """Starts the runtime once per process; raises if no device can be used."""
    global _initialized, _initializing
    if is_initialized() or getattr(_tls, "is_initializing", False):
        return
    with _init_lock:
        if is_initialized():
            return
        if _is_in_bad_fork():
            raise RuntimeError(
                "Cannot re-initialize NPU in forked subprocess. To use NPU with "
                "multiprocessing, you must use the 'spawn' start method"
            )
        _C._npu_init()
        _tls.is_initializing = True
        try:
            for queued, origin in _queued_calls:
                try:
                    queued()
                except Exception as e:  # name where the deferred call came from
                    raise RuntimeError(
                        f"NPU call failed lazily at initialization with error: {e}\n\n"
                        f"NPU call was originally invoked at:\n\n{''.join(origin)}"
                    ) from e
        finally:
            _tls.is_initializing = False
        _queued_calls.clear()
        _initialized = True


def init() -> None:
    """Initialises the NPU runtime explicitly (normally lazy)."""
    _lazy_init()


def is_available() -> bool:
    """True if at least one simulated NPU is visible to this process."""
    return device_count() > 0


_visible_devices_warned = False


def device_count() -> int:
    """Number of NPUs visible (after ASCEND_RT_VISIBLE_DEVICES); 0 if none. Never initialises.

    torch.cuda's and torch_npu's rule: until the device is initialised the answer follows the
    environment as it is at the call (a program may still set ASCEND_RT_VISIBLE_DEVICES after
    `import torch_npu`); from initialisation on it is fixed.
    """
    global _visible_devices_warned
    if is_initialized():
        count, why = _C._npu_getDeviceCount(), None
    else:
        count, why = _C._npu_peekDeviceCount()
    if count == 0 and not _visible_devices_warned:
        if why is None:
            why = _C._npu_visibleDevicesWarning()
        if why:
            # Once per process: Python's filter would repeat it for each calling line.
            _visible_devices_warned = True
            warnings.warn(why, stacklevel=2)
    return count


def _get_device_index(device: _DeviceLike, optional: bool = False) -> int:
    """Index of `device` ('npu', 'npu:1', torch.device, int); the current device for None."""
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "npu":
            raise ValueError(f"Expected a npu device, but got: {device}")  # torch_npu's words
        if device.index is None:
            return current_device()
        return device.index
    if device is None:
        return current_device()
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    raise ValueError(f"Expected a torch.device, a device string or an int, got {device!r}")


def _check_index(index: int) -> int:
    count = device_count()
    if not 0 <= index < count:
        raise RuntimeError(
            f"Invalid device index {index}: this process sees {count} NPU device(s)"
            + (f", valid indices are 0..{count - 1}" if count else "")
            + ". Check ASCEND_RT_VISIBLE_DEVICES."
        )
    return index


def current_device() -> int:
    """Index of the current NPU of the calling thread."""
    _lazy_init()
    return _C._npu_getDevice()


def set_device(device: _DeviceLike) -> None:
    """Makes `device` the current NPU of the calling thread."""
    _lazy_init()
    _C._npu_setDevice(_check_index(_get_device_index(device)))


class device:
    """Context manager that changes the current NPU: ``with torch.npu.device(1): ...``."""

    def __init__(self, device: _DeviceLike):
        self.idx = _get_device_index(device, optional=True) if device is not None else -1
        self.prev_idx = -1

    def __enter__(self):
        if self.idx >= 0:
            self.prev_idx = current_device()
            if self.prev_idx != self.idx:
                set_device(self.idx)
        return self

    def __exit__(self, *exc):
        if self.idx >= 0 and self.prev_idx != self.idx:
            set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the device of tensor `obj` current (no-op for CPU tensors)."""

    def __init__(self, obj):
        idx = obj.get_device() if obj.is_npu else -1
        super().__init__(idx if idx >= 0 else None)


def synchronize(device: _DeviceLike = None) -> None:
    """Waits for all work on every stream of `device` (current by default)."""
    _lazy_init()
    idx = _check_index(_get_device_index(device))
    _C._npu_synchronize(idx)


class _NPUDeviceProperties:
    """What torch.npu.get_device_properties returns (torch_npu's field names)."""

    def __init__(self, props: dict):
        self.name: str = props["name"]
        self.soc_version: str = props["soc_version"]
        self.total_memory: int = props["total_memory"]
        self.cube_core_num: int = props["cube_core_num"]
        self.vector_core_num: int = props["vector_core_num"]
        self.major: int = props["major"]
        self.minor: int = props["minor"]
        # Names torch.cuda users and libraries reach for.
        self.multi_processor_count: int = self.cube_core_num

    def __repr__(self) -> str:
        return (
            f"_NPUDeviceProperties(name='{self.name}', "
            f"total_memory={self.total_memory // (1024 * 1024)}MB, "
            f"cube_core_num={self.cube_core_num}, vector_core_num={self.vector_core_num})"
        )


def get_device_properties(device: _DeviceLike = None) -> _NPUDeviceProperties:
    """Name, HBM capacity and core counts of an NPU."""
    idx = _check_index(_get_device_index(device))
    return _NPUDeviceProperties(_C._npu_getDeviceProperties(idx))


def get_device_name(device: _DeviceLike = None) -> str:
    """The device's name, e.g. 'Ascend910B2'."""
    return get_device_properties(device).name


_CAPABILITY_NOTE = ("The return value of get_device_capability is only for compatibility with "
                    "PyTorch and does not represent the actual capability of the NPU device.")


def get_device_capability(device: _DeviceLike = None):
    """CANN has no CUDA-style compute capability. As torch_npu: None, unless
    TORCH_NPU_DEVICE_CAPABILITY="major.minor" names the pair to answer (for libraries that
    branch on it); each answer comes with torch_npu's warning that it is not a real one."""
    import os
    import re

    _check_index(_get_device_index(device))
    value = os.environ.get("TORCH_NPU_DEVICE_CAPABILITY")
    if not value:
        warnings.warn("You can set the device capability via the environment variable "
                      f"TORCH_NPU_DEVICE_CAPABILITY. {_CAPABILITY_NOTE}", stacklevel=2)
        return None
    match = re.fullmatch(r"(\d+)\.(\d+)", value)
    if not match:
        warnings.warn("torch.npu.get_device_capability can't parse TORCH_NPU_DEVICE_CAPABILITY "
                      f"environment variable: {value}. Expected format is 'major.minor' where "
                      "major and minor are non-negative integers (e.g., '8.0').", stacklevel=2)
        return None
    warnings.warn(_CAPABILITY_NOTE, stacklevel=2)
    return int(match.group(1)), int(match.group(2))


def utilization(device: _DeviceLike = None) -> int:
    """Percent of recent wall time the device's streams were busy (AICore(%) in npu-smi)."""
    idx = _check_index(_get_device_index(device))
    return _C._npu_getUtilization(idx)


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def get_amp_supported_dtype() -> list[torch.dtype]:
    """The dtypes torch.autocast("npu", dtype=...) accepts (torch_npu's list)."""
    return [torch.float16, torch.bfloat16, torch.float32]


def _sleep(ms: int) -> None:
    """Queues a task that keeps the current stream busy for `ms` milliseconds: torch.cuda._sleep's
    twin, for tests and demonstrations of asynchrony."""
    _lazy_init()
    _C._npu_sleep(int(ms))
