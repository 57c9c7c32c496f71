"""torch_npu.testing.common_distributed: the skip helpers torch_npu's tests import.

Written for SimNPU from the documented behaviour: `skipIfUnsupportMultiNPU(n)` skips a test
unless at least n npus are visible; `TEST_SKIPS` maps a reason to (exit code, message) as
PyTorch's multi-process tests use it.
"""
from __future__ import annotations

import functools
import unittest
from collections import namedtuple

import torch

TestSkip = namedtuple("TestSkip", "exit_code, message")
TEST_SKIPS = {f"multi-npu-{n}": TestSkip(75, f"Need at least {n} ASCEND devices")
              for n in range(1, 9)}
TEST_SKIPS.update({
    "multi-npu": TestSkip(75, "Multi-NPU condition not satisfied"),
    "hccl": TestSkip(76, "c10d not compiled with HCCL support"),
    "known_issues": TestSkip(77, "Test skipped due to known issues"),
})


def skipIfUnsupportMultiNPU(npu_number_needed):
    def decorate(func):
        @functools.wraps(func)
        def wrapper(self, *args, **kwargs):
            if not torch.npu.is_available() or torch.npu.device_count() < npu_number_needed:
                raise unittest.SkipTest(f"Multi-NPU {npu_number_needed} condition not satisfied")
            return func(self, *args, **kwargs)
        return wrapper
    return decorate
