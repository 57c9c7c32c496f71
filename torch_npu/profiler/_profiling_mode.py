"""TORCH_NPU_PROFILING_MODE=true (or PROFILING_MODE=true): a per-op device time table at exit.

The per-operator timing switch of the article, for programs one does not want to edit: set at
start-up, it records every device task of the process (not the host ops: the table needs only
the device side, and a long program must not keep a record per host op) and prints the table to
stderr when the interpreter exits. While it is on, torch_npu.profiler.profile refuses to start
(one device profiler at a time).
"""

from __future__ import annotations

import atexit
import os
import sys

VARIABLES = ("TORCH_NPU_PROFILING_MODE", "PROFILING_MODE")
_TRUE = ("1", "true", "on", "yes")
_FALSE = ("", "0", "false", "off", "no")

_active_variable: str | None = None


def active() -> str | None:
    """The variable that turned the mode on, or None."""
    return _active_variable


def _requested() -> str | None:
    for name in VARIABLES:
        value = os.environ.get(name)
        if value is None:
            continue
        if value.strip().lower() in _TRUE:
            return name
        if value.strip().lower() not in _FALSE:
            print(f"torch_npu: ignoring {name}={value!r}: use {name}=true to print the per-op "
                  "device time table at exit, or false", file=sys.stderr)
    return None


def _print_table() -> None:
    global _active_variable
    import torch_npu
    from torch_npu.profiler._result import ProfileResult

    raw = torch_npu._C._npu_profiler_stop()
    result = ProfileResult(raw, host=False, device=True, memory=False, steps=[],
                           scheduled=False)
    print(f"\nSimNPU device time per op ({_active_variable}=true)\n"
          + result.device_time_table(), file=sys.stderr, flush=True)
    _active_variable = None


def enable_from_environment() -> None:
    global _active_variable
    name = _requested()
    if name is None or _active_variable is not None:
        return
    import torch_npu

    torch_npu._C._npu_profiler_start(host=False, device=True, record_shapes=False,
                                     profile_memory=False)
    _active_variable = name
    atexit.register(_print_table)
