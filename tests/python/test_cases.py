"""Every case the benchmark times (torch_npu/testing/cases.py) computes on npu what it computes
on the CPU: a benchmark only measures work that is right."""

import pytest
import torch

import torch_npu  # noqa: F401
from torch_npu.testing.cases import CASES


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_case_agrees_with_the_cpu(case):
    results = {}
    for device in ("cpu", "npu"):
        run, _ = case.make(device)
        results[device] = run()
    npu = results["npu"]
    assert npu.device.type == "npu"
    torch.testing.assert_close(npu.cpu(), results["cpu"], rtol=case.rtol, atol=case.atol)
