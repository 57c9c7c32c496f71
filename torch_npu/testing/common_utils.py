"""torch_npu.testing.common_utils: the helpers torch_npu's operator tests import.

Written for SimNPU from the helpers' documented behaviour (torch_npu's test files and their
docstrings); the names and signatures match torch_npu's so its test files run unchanged:

- `create_common_tensor((dtype, acl_format, shape), low, high)` -> (cpu, npu): one uniform
  NumPy sample in [low, high) as a CPU tensor and the same values on the npu, cast to
  `acl_format` unless it is -1.
- `SupportedDevices([...])` skips a test unless the device's short name (first 10 characters
  of `torch.npu.get_device_name()`, 12 for "Ascend910_..." names, 9 for "Ascend950...") is
  listed; SimNPU reports an Ascend910B2, so "Ascend910B" tests run.
- `SkipIfNotGteCANNVersion(v)` skips a test unless the CANN version is at least `v`.
"""
from __future__ import annotations

import functools
import itertools
import os
import unittest
from contextlib import contextmanager
from typing import List

import numpy as np
import torch

import torch_npu

PERF_TEST_ENABLE = False  # timing checks are never run here (benchmarks/ measures speed)


class _NoPerfBaseline:
    """Stand-in for torch_npu's performance baseline store: SimNPU's tests never time."""

    def get_baseline(self, resource_id):
        return None

    def set_baseline(self, resource_id, baseline):
        pass

    def save_baseline(self):
        pass


PerfBaseline = _NoPerfBaseline()


@contextmanager
def freeze_rng_state():
    """Restores the CPU generator's state when the block ends."""
    saved = torch.get_rng_state()
    try:
        yield
    finally:
        torch.set_rng_state(saved)


def iter_indices(tensor):
    """Every index of `tensor`: ints for 1-d, tuples above, nothing for a 0-dim tensor."""
    if tensor.dim() == 0:
        return range(0)
    if tensor.dim() == 1:
        return range(tensor.size(0))
    return itertools.product(*[range(n) for n in tensor.size()])


def is_iterable(obj) -> bool:
    try:
        iter(obj)
    except TypeError:
        return False
    return True


def get_npu_device() -> str:
    """"npu:<SET_NPU_DEVICE>", "npu:0" when the variable is unset."""
    index = os.environ.get("SET_NPU_DEVICE")
    return "npu:0" if index is None else f"npu:{index}"


def set_npu_device() -> str:
    device = get_npu_device()
    torch.npu.set_device(device)
    return device


def create_common_tensor(item, minValue, maxValue, device=None):
    """(cpu_tensor, npu_tensor) holding the same uniform sample; `item` is
    (numpy dtype, acl format or -1, shape)."""
    if not isinstance(item, (list, tuple)) or len(item) < 3:
        raise ValueError("create_common_tensor: item must be (dtype, acl_format, shape), "
                         f"got {item!r}")
    dtype, acl_format, shape = item[:3]  # tests may carry more fields; torch_npu ignores them
    device = get_npu_device() if device is None else device
    values = np.random.uniform(minValue, maxValue, shape).astype(dtype)
    cpu_input = torch.from_numpy(values)
    npu_input = torch.from_numpy(values).to(device)
    if acl_format != -1:
        npu_input = torch_npu.npu_format_cast(npu_input, acl_format)
    return cpu_input, npu_input


def create_dtype_tensor(shape, dtype, npu_format=-1, min_value=-5, max_value=5, no_zero=False,
                        device=None):
    """(cpu, npu) tensors of a torch dtype: bool coin flips, float16/float32 uniform in
    [min_value, max_value), any other dtype int32 integers in [min_value, max_value]."""
    device = get_npu_device() if device is None else device
    if dtype == torch.bool:
        values = np.random.randint(0, 2, size=shape).astype(np.bool_)
    elif dtype in (torch.half, torch.float):
        np_dtype = np.float16 if dtype == torch.half else np.float32
        values = np.random.uniform(min_value, max_value, shape).astype(np_dtype)
    else:
        values = np.random.randint(min_value, max_value + 1, size=shape).astype(np.int32)
    if no_zero:
        values = np.where(values != 0, values, np.ones_like(values))
    cpu_input = torch.from_numpy(values)
    npu_input = torch.from_numpy(values).to(device)
    if npu_format != -1 and dtype in (torch.float, torch.half):
        npu_input = torch_npu.npu_format_cast(npu_input, npu_format)
    return cpu_input, npu_input


def _broadcast_pairs(device):
    # Two broadcasting cases: a (1,1,1) operand and a trailing-dims (4,5) operand.
    for other_shape in ((1, 1, 1), (4, 5)):
        x = np.random.rand(2, 3, 4, 5).astype(np.float32)
        y = np.random.rand(*other_shape).astype(np.float32)
        yield (torch.from_numpy(x), torch.from_numpy(y),
               torch.from_numpy(x).to(device), torch.from_numpy(y).to(device))


def test_2args_broadcast(fn):
    """[[cpu_result, npu_result], ...] of `fn` over two broadcasting cases, as NumPy arrays."""
    results = []
    for cpu_x, cpu_y, npu_x, npu_y in _broadcast_pairs(get_npu_device()):
        results.append([fn(cpu_x, cpu_y).numpy(), fn(npu_x, npu_y).to("cpu").numpy()])
    return results


test_2args_broadcast.__test__ = False  # a helper, not a test, for pytest's collector


def check_operators_in_prof(expected_operators, prof, unexpected_operators=None):
    """True when the profile `prof` ran every op of `expected_operators` and none of
    `unexpected_operators` (a "cached_" prefix on an event's name is ignored).

    Like torch_npu's, it removes the ops it found from `expected_operators`."""
    unexpected = set(unexpected_operators or [])
    averages = prof.key_averages()
    if not averages:
        print("torch profiling is empty, please check it")
        return None
    for event in averages:
        name = event.key.replace("cached_", "")
        if name in unexpected:
            return False
        if name in expected_operators:
            expected_operators.remove(name)
    return not expected_operators


class SkipIfNoLapack:
    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if not torch._C.has_lapack:
                raise unittest.SkipTest("PyTorch compiled without Lapack")
            return fn(*args, **kwargs)
        return wrapper


def _short_device_name() -> str:
    full = torch_npu.npu.get_device_name(0)
    if full.startswith("Ascend910_"):
        return full[:12]
    if full.startswith("Ascend950"):
        return full[:9]
    return full[:10]


class SupportedDevices:
    """Skips the test unless the device's short name is one of `supported_devices`."""

    def __init__(self, supported_devices: List[str]) -> None:
        self.supported_devices = supported_devices

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(slf, *args, **kwargs):
            name = _short_device_name()
            if name not in self.supported_devices:
                raise unittest.SkipTest(f"Only run on {self.supported_devices!r}, current device "
                                        f"is {name}.")
            return fn(slf, *args, **kwargs)
        return wrapper


def is_gte_cann_version(version: str, module: str = "CANN") -> bool:
    return torch_npu.npu.utils._is_gte_cann_version(version, module)


class SkipIfNotGteCANNVersion:
    """Skips the test unless the `module` version is at least `base_version`."""

    def __init__(self, base_version, module="CANN"):
        self.base_version = base_version
        self.module = module

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(slf, *args, **kwargs):
            if not is_gte_cann_version(self.base_version, self.module):
                current = torch_npu.utils.get_cann_version(module=self.module)
                raise unittest.SkipTest(f"Only run on {self.base_version} or greater, current "
                                        f"cann version is {current}.")
            return fn(slf, *args, **kwargs)
        return wrapper
