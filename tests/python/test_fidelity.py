"""Behaviours that must match PyTorch's CPU device (and so CUDA and torch_npu), each found
differing once (issue 16); the CPU result is the reference."""

import pytest
import torch

import torch_npu  # noqa: F401


@pytest.fixture
def deterministic():
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(before)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32, torch.bool])
def test_deterministic_mode_fills_new_memory(deterministic, dtype):
    for make in (lambda d: torch.empty(5, dtype=dtype, device=d),
                 lambda d: torch.empty_strided((2, 3), (3, 1), dtype=dtype, device=d)):
        cpu, npu = make("cpu"), make("npu")
        torch.testing.assert_close(npu.cpu(), cpu, equal_nan=True)
    # resize_ fills only the bytes it adds, as on the CPU
    cpu = torch.ones(2, dtype=dtype)
    npu = cpu.npu()
    cpu.resize_(6)
    npu.resize_(6)
    torch.testing.assert_close(npu.cpu(), cpu, equal_nan=True)


def test_uninitialized_memory_is_not_filled_by_default():
    assert not torch.are_deterministic_algorithms_enabled()
    a = torch.empty(1 << 16, device="npu")
    a.fill_(3.0)
    del a
    b = torch.empty(1 << 16, device="npu")  # the cached block, unfilled: no NaN written
    assert not torch.isnan(b).all().item()


@pytest.mark.parametrize("k", [0, 1])
def test_topk_of_a_0_dim_tensor(k):
    x = torch.tensor(42.5)
    ref = torch.topk(x, k)
    got = torch.topk(x.npu(), k)
    assert got.values.shape == ref.values.shape
    torch.testing.assert_close(got.values.cpu(), ref.values)
    torch.testing.assert_close(got.indices.cpu(), ref.indices)
