"""16-bit results where the card computes in float32 and rounds once (issue 25, item 4): each
float16 result is compared with the same computation in float64, rounded once to float16. A
result rounded once from float32 intermediates is within half an ulp of the float64 value (plus
float32's own error, far below it); one that rounded intermediates to float16 on the way (ATen's
CPU kernels for these ops, or a composite of 16-bit ops) is off by an ulp or more for some
elements."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import torch_npu  # noqa: F401


def assert_rounded_once(got, exact, slack=0.0):
    """got (float16) is exact (float64) rounded once: within half an ulp, with float32's slack
    (relative to the result, and `slack` absolute where terms much larger than the result cancel
    in float32)."""
    assert got.dtype == torch.float16 and got.shape == exact.shape
    got64 = got.detach().cpu().double()
    exact = exact.detach().double()
    ulp = torch.from_numpy(np.asarray(np.spacing(np.abs(exact.numpy()).astype(np.float16)),
                                      dtype=np.float64))
    err = (got64 - exact).abs()
    bound = 0.5 * ulp + exact.abs() * 2.0 ** -20 + slack
    worst = (err / ulp).max().item()
    assert (err <= bound).all(), f"{(err > bound).sum().item()} elements off, worst {worst:.2f} ulp"


def half(t):
    return t.to(torch.float16)


def test_prod_out_accumulates_wide_and_rounds_once():
    torch.manual_seed(0)
    x = half(torch.empty(15, 15, 15, 16).uniform_(1.0, 2.0))
    exact = torch.prod(x.double(), dim=0)
    assert_rounded_once(torch.prod(x.npu(), dim=0, dtype=torch.float16), exact)
    out = torch.empty(0, dtype=torch.float16, device="npu")
    torch.prod(x.npu(), dim=0, dtype=torch.float16, out=out)
    assert_rounded_once(out, exact)


def test_layer_norm_mixed_float32_parameters():
    """A float32 LayerNorm fed float16 activations (ATen's mixed mode): the output is float16
    rounded once, the statistics and the parameters' gradients float32."""
    torch.manual_seed(0)
    x = half(torch.rand(2, 24, 11, 112) * 99 + 1)
    w, b = torch.randn(112), torch.randn(112)
    g = half(torch.randn(2, 24, 11, 112))
    xn = x.npu().requires_grad_()
    wn, bn = w.npu().requires_grad_(), b.npu().requires_grad_()
    y = F.layer_norm(xn, (112,), wn, bn)
    y.backward(g.npu())
    xd = x.double().requires_grad_()
    wd, bd = w.double().requires_grad_(), b.double().requires_grad_()
    yd = F.layer_norm(xd, (112,), wd, bd)
    yd.backward(g.double())
    # y = xhat * w + b: terms of a few units cancel in float32 (about 1e-7 each).
    assert_rounded_once(y, yd, slack=1e-6)
    assert wn.grad.dtype == torch.float32 and bn.grad.dtype == torch.float32
    torch.testing.assert_close(wn.grad.cpu().double(), wd.grad, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(bn.grad.cpu().double(), bd.grad, rtol=1e-5, atol=1e-4)
    assert xn.grad.dtype == torch.float16


@pytest.mark.parametrize("size,mode", [((37,), "linear"), ((7, 8, 9), "trilinear")])
def test_upsample_rounds_once(size, mode):
    torch.manual_seed(0)
    shape = (2, 3, 20) if mode == "linear" else (1, 2, 4, 5, 6)
    x = half(torch.rand(shape) * 100)
    xn = x.npu().requires_grad_()
    y = F.interpolate(xn, size=size, mode=mode, align_corners=False)
    xd = x.double().requires_grad_()
    yd = F.interpolate(xd, size=size, mode=mode, align_corners=False)
    assert_rounded_once(y, yd)
    g = half(torch.rand(yd.shape) * 10)
    y.backward(g.npu())
    yd.backward(g.double())
    assert_rounded_once(xn.grad, xd.grad)


def test_grid_sampler_2d_rounds_once():
    torch.manual_seed(0)
    x = half(torch.rand(2, 3, 16, 16) * 10)
    grid = half(torch.rand(2, 9, 9, 2) * 2 - 1)
    xn, gn = x.npu().requires_grad_(), grid.npu().requires_grad_()
    y = F.grid_sample(xn, gn, align_corners=False)
    xd, gd = x.double().requires_grad_(), grid.double().requires_grad_()
    yd = F.grid_sample(xd, gd, align_corners=False)
    assert_rounded_once(y, yd)
    g = half(torch.rand(yd.shape))
    y.backward(g.npu())
    yd.backward(g.double())
    assert_rounded_once(xn.grad, xd.grad)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_binary_cross_entropy_with_logits_rounds_once(reduction):
    torch.manual_seed(0)
    x = half(torch.rand(10, 64) * 10)
    target = half(torch.empty(10, 64).random_(2))
    weight = half(torch.rand(10, 1))
    pos_weight = half(torch.rand(64) + 0.5)
    for kwargs in ({}, {"weight": weight}, {"pos_weight": pos_weight}):
        got = F.binary_cross_entropy_with_logits(
            x.npu(), target.npu(), reduction=reduction,
            **{k: v.npu() for k, v in kwargs.items()})
        exact = F.binary_cross_entropy_with_logits(
            x.double(), target.double(), reduction=reduction,
            **{k: v.double() for k, v in kwargs.items()})
        assert_rounded_once(got, exact)
    # Mixed dtypes keep PyTorch's promotion: a float32 target gives a float32 loss.
    mixed = F.binary_cross_entropy_with_logits(x.npu(), target.float().npu())
    assert mixed.dtype == torch.float32


def test_slow_conv_transpose2d_accumulates_in_float32():
    """The cube unit sums a 16-bit convolution in float32 and rounds once (forward and both
    gradients; ATen's float16 CPU kernel rounds its partial products)."""
    torch.manual_seed(0)
    x = half(torch.rand(2, 12, 20, 20) * 10)
    w = half(torch.rand(12, 12, 3, 3) * 10)
    xn, wn = x.npu().requires_grad_(), w.npu().requires_grad_()
    y = torch._C._nn.slow_conv_transpose2d(xn, wn, (3, 3))
    xd, wd = x.double().requires_grad_(), w.double().requires_grad_()
    yd = torch._C._nn.slow_conv_transpose2d(xd, wd, (3, 3))
    assert_rounded_once(y, yd)
    g = half(torch.rand(yd.shape))
    y.backward(g.npu())
    yd.backward(g.double())
    assert_rounded_once(xn.grad, xd.grad)
    assert_rounded_once(wn.grad, wd.grad)


def test_mish_backward_rounds_once_and_double_backward_still_works():
    torch.manual_seed(0)
    x = half(torch.rand(20, 30, 20) * 100 - 50)
    g = half(torch.rand(x.shape))
    xn = x.npu().requires_grad_()
    F.mish(xn).backward(g.npu())
    xd = x.double().requires_grad_()
    F.mish(xd).backward(g.double())
    assert_rounded_once(xn.grad, xd.grad)
    # Our npu kernel for mish_backward keeps the second derivative (float32, against the CPU).
    x32 = torch.rand(7)
    second = []
    for device in ("cpu", "npu"):
        xf = x32.to(device).requires_grad_()
        first = torch.autograd.grad(F.mish(xf).sum(), xf, create_graph=True)[0]
        second.append(torch.autograd.grad(first.sum(), xf)[0].cpu())
    torch.testing.assert_close(second[1], second[0])
