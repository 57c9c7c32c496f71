"""The NPU stream sanitizer: torch_npu's switch (TORCH_NPU_SANITIZER=1 at import) and module
(torch_npu.npu._sanitizer.enable_npu_sanitizer()), in the place of PyTorch's CUDA sanitizer.

It finds the bugs a card hides, in the run that has them: an op that reads or writes bytes another
stream wrote (or read) with nothing ordering the two (an event record and wait, a synchronize),
a block reused while another stream still reads it (a missing record_stream), a collective's
output read before its work was waited for, and host code reading a non-blocking device-to-host
copy's destination before the copy's stream or event was synchronized; with
NPU_SIM_SANITIZER_UNINIT=1 also reads of device memory nothing wrote. Each report names both
accesses: the streams, the ops' schemas, which arguments, and the Python stack of each. Reports
go to stderr at once, are kept for `reports()`, and with NPU_SIM_SANITIZER_LOG=FILE are appended
to FILE by every process of a job.

Unlike the CUDA sanitizer, which sees op arguments from Python, it checks the byte ranges of the
work the simulator runs: the runtime's engine (npu/runtime.h, npuSanAccess) orders the streams by
the runtime's own event, wait and synchronize calls, ops are seen in C++ (so autograd's backward
and C++ ops are covered), the runtime's copies and memsets record their own bytes, collectives
record theirs on the communicator's stream, and the caching allocator marks fresh blocks
unwritten. Details and limits: docs/sanitizer.md.
"""

from __future__ import annotations

import os

import torch

import torch_npu._C as _C

__all__ = ["enable_npu_sanitizer", "disable_npu_sanitizer", "is_enabled", "reports",
           "clear_reports"]

_host_readers_installed = False


def _install_host_readers() -> None:
    """Tensor.numpy() and Tensor.tolist() read host memory without an op: tell the engine, so a
    non-blocking copy's destination read before the sync is reported there too."""
    global _host_readers_installed
    if _host_readers_installed:
        return
    _host_readers_installed = True
    for name in ("numpy", "tolist"):
        original = getattr(torch.Tensor, name)

        def reader(self, *args, __original=original, **kwargs):
            if _C._npu_sanitizer_enabled() and self.device.type == "cpu":
                _C._npu_sanitizer_host_access(self, False)
            return __original(self, *args, **kwargs)

        reader.__name__ = name
        reader.__doc__ = original.__doc__
        setattr(torch.Tensor, name, reader)


def enable_npu_sanitizer() -> None:
    """Turns the sanitizer on for the rest of the process (torch_npu's name for it)."""
    _C._npu_sanitizer_enable(uninit=os.environ.get("NPU_SIM_SANITIZER_UNINIT", "") == "1")
    _install_host_readers()


def disable_npu_sanitizer() -> None:
    """Turns it off and forgets what it tracked (the reports are kept)."""
    _C._npu_sanitizer_disable()


def is_enabled() -> bool:
    return bool(_C._npu_sanitizer_enabled())


def reports() -> list[str]:
    """Every report so far, as printed."""
    return list(_C._npu_sanitizer_reports())


def clear_reports() -> None:
    _C._npu_sanitizer_clear_reports()


def _enable_from_environment() -> None:
    value = os.environ.get("TORCH_NPU_SANITIZER", "")
    if value == "1":
        enable_npu_sanitizer()
    elif value not in ("", "0"):
        raise RuntimeError(f"TORCH_NPU_SANITIZER={value!r} is not understood: set it to 1 to turn "
                           "the stream sanitizer on, or 0 (or unset) to leave it off")
