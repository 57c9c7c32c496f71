"""Small gaps between SimNPU and torch_npu on a 910B, each against an independent reference:
native_dropout_backward's broadcast shape, renorm with p = 0 (torch_npu's non-zero count),
the aclnnInplaceCopy range a device-to-device copy_ records in the profiler."""

import numpy as np
import pytest
import torch

import torch_npu  # noqa: F401


# ---- native_dropout_backward ----------------------------------------------------------------

@pytest.mark.parametrize("grad_shape,mask_shape", [((), (0,)), ((3, 1), (3, 4)), ((2, 5), (2, 5))])
def test_native_dropout_backward_broadcasts_as_the_cpu(grad_shape, mask_shape):
    grad = torch.randn(grad_shape)
    mask = torch.rand(mask_shape) > 0.5
    expected = torch.ops.aten.native_dropout_backward(grad, mask, 2.0)
    actual = torch.ops.aten.native_dropout_backward(grad.npu(), mask.npu(), 2.0)
    assert actual.shape == expected.shape
    torch.testing.assert_close(actual.cpu(), expected)


# ---- renorm with p = 0 --------------------------------------------------------------------

def _renorm_p0_numpy(x: np.ndarray, dim: int, maxnorm: float) -> np.ndarray:
    others = tuple(i for i in range(x.ndim) if i != dim % x.ndim)
    count = np.sum(x != 0, axis=others, keepdims=True).astype(np.float64)
    factor = np.where(count > maxnorm, maxnorm / (count + 1e-7), 1.0)
    return x.astype(np.float64) * factor


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
@pytest.mark.parametrize("shape,dim,maxnorm", [((3, 3), 0, 1.0), ((4, 5, 6), 1, 7.5),
                                               ((4, 5, 6), -1, 2.0)])
def test_renorm_p0_counts_non_zeros(dtype, shape, dim, maxnorm):
    x = torch.randn(shape)
    x[x.abs() < 0.5] = 0  # some zeros, so the count is not the slice's size
    x = x.to(dtype)
    expected = torch.from_numpy(_renorm_p0_numpy(x.double().numpy(), dim, maxnorm))
    tol = 1e-3 if dtype == torch.float16 else 1e-6
    out = torch.renorm(x.npu(), 0, dim, maxnorm)
    assert out.dtype == dtype
    torch.testing.assert_close(out.cpu().double(), expected, rtol=tol, atol=tol)
    y = x.npu()
    y.renorm_(0, dim, maxnorm)
    torch.testing.assert_close(y.cpu().double(), expected, rtol=tol, atol=tol)
    o = torch.empty(0, dtype=dtype).npu()
    torch.renorm(x.npu(), 0, dim, maxnorm, out=o)
    torch.testing.assert_close(o.cpu().double(), expected, rtol=tol, atol=tol)


def test_renorm_other_p_still_matches_the_cpu_and_negative_p_is_refused():
    x = torch.randn(4, 5)
    torch.testing.assert_close(torch.renorm(x.npu(), 2, 0, 1.0).cpu(), torch.renorm(x, 2, 0, 1.0))
    with pytest.raises(RuntimeError, match="non-positive-norm"):
        torch.renorm(x.npu(), -1, 0, 1.0)


# ---- the profiler's name for a device-to-device copy ------------------------------------------

def _keys(prof):
    return [e.key for e in prof.key_averages()]


@pytest.mark.parametrize("view", ["slice", "transpose"])
def test_device_copy_records_aclnn_inplace_copy(view):
    x = torch.rand(2, 3).npu()
    other = torch.rand(2, 1).npu() if view == "slice" else torch.rand(3, 2).npu()
    with torch.autograd.profiler.profile(use_device="npu") as prof:
        target = x[:, 1:2] if view == "slice" else x.t()
        target.copy_(other)
    assert "aclnnInplaceCopy" in _keys(prof)
    torch.testing.assert_close(target.cpu(), other.cpu())


def test_host_copy_records_no_aclnn_inplace_copy():
    with torch.autograd.profiler.profile(use_device="npu") as prof:
        torch.rand(2, 3).npu().cpu()
    assert "aclnnInplaceCopy" not in _keys(prof)
