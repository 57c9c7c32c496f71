"""conv2d's backward on npu (grad_input, grad_weight, grad_bias) against the CPU device's, in
float32 with HF32 off, over a table of shapes that reaches both of the kernel's grad_input paths:
the implicit GEMM (stride 1, padding <= dilation * (k - 1), in channels per group >= 16 and >=
out channels: the forward convolution of grad_output with the flipped, transposed weight) and
im2col + col2im (the others: stride 2, a padding larger than the kernel's reach, few or fewer
in than out channels); and both grad_weight paths: the implicit GEMM over all pixels of the
batch (Cg * k * k >= 64, not pointwise) and im2col (3-channel first convs, 1x1 kernels). To add
a shape: one row of SHAPES."""

import pytest
import torch
import torch.nn.functional as F

import torch_npu  # noqa: F401

# (batch, in channels, H, W, out channels, kernel, stride, padding, dilation, groups)
SHAPES = [
    (8, 3, 16, 16, 8, 3, 1, 1, 1, 1),    # a first convolution, 3 input channels
    (1, 3, 15, 17, 8, 3, 1, 1, 1, 1),    # batch 1, odd sizes
    (8, 8, 8, 8, 16, 3, 1, 1, 1, 1),     # the test CNN's second conv
    (8, 8, 9, 7, 16, 3, 2, 1, 1, 1),     # stride 2: im2col
    (2, 4, 11, 13, 6, 3, 1, 0, 1, 1),    # padding 0
    (2, 4, 11, 13, 6, 5, 1, 2, 1, 1),    # 5x5, padding 2
    (2, 4, 11, 13, 6, 5, 1, 0, 1, 1),    # 5x5, padding 0
    (2, 4, 11, 13, 6, 5, 2, 2, 1, 1),    # 5x5, stride 2: im2col
    (2, 4, 12, 12, 6, 3, 1, 2, 2, 1),    # dilation 2, padding 2
    (2, 4, 12, 12, 6, 3, 1, 1, 2, 1),    # dilation 2, padding 1
    (2, 4, 12, 12, 6, 3, 1, 2, 1, 1),    # padding 2 > k - 1: im2col
    (2, 4, 10, 10, 6, 3, 1, 1, 1, 2),    # groups 2
    (8, 8, 9, 9, 8, 3, 1, 1, 1, 2),      # groups 2, batch 8, odd sizes
    (2, 6, 9, 9, 6, 3, 1, 1, 1, 6),      # depthwise
    (2, 4, 10, 10, 6, 3, 2, 1, 2, 2),    # stride 2, dilation 2, groups 2
    (8, 8, 7, 9, 16, 1, 1, 0, 1, 1),     # 1x1
    (2, 8, 7, 9, 16, 1, 1, 1, 1, 1),     # 1x1 with padding 1: im2col
    (2, 8, 7, 9, 16, 1, 2, 0, 1, 2),     # 1x1, stride 2, groups 2
    (1, 16, 40, 40, 32, 3, 1, 1, 1, 1),  # several K blocks and column blocks
    # in channels >= 16 and >= out channels: the implicit GEMM where stride and padding allow
    (8, 16, 8, 8, 16, 3, 1, 1, 1, 1),
    (1, 32, 15, 17, 16, 3, 1, 1, 1, 1),   # batch 1, odd sizes
    (2, 16, 11, 13, 16, 3, 1, 0, 1, 1),   # padding 0
    (2, 32, 11, 13, 16, 5, 1, 2, 1, 1),   # 5x5, padding 2
    (2, 32, 11, 13, 16, 5, 1, 1, 1, 1),   # 5x5, padding 1
    (2, 16, 12, 12, 16, 3, 1, 2, 2, 1),   # dilation 2, padding 2
    (2, 16, 12, 12, 16, 3, 1, 1, 2, 1),   # dilation 2, padding 1
    (2, 16, 12, 12, 16, 3, 1, 2, 1, 1),   # padding 2 > k - 1: im2col
    (2, 16, 12, 12, 16, 3, 2, 1, 1, 1),   # stride 2: im2col
    (8, 32, 9, 9, 32, 3, 1, 1, 1, 2),     # groups 2, batch 8, odd sizes
    (2, 32, 9, 9, 32, 3, 1, 1, 1, 32),    # depthwise, 32 channels (Cg = 1: im2col)
    (4, 32, 7, 9, 16, 1, 1, 0, 1, 1),     # 1x1
    (1, 64, 40, 40, 32, 3, 1, 1, 1, 1),   # several K blocks and column blocks
]


def _id(s):
    n, c, h, w, o, k, st, p, d, g = s
    return f"n{n}_c{c}_{h}x{w}_o{o}_k{k}_s{st}_p{p}_d{d}_g{g}"


# Full float32 convolutions, to compare with the CPU's (conftest.py).
pytestmark = pytest.mark.usefixtures("conv_full_float32")


def _grads(device, x, w, b, go, stride, padding, dilation, groups, input_grad=True):
    x = x.detach().to(device).requires_grad_(input_grad)  # a fresh leaf on each device
    w = w.detach().to(device).requires_grad_()
    b = b.detach().to(device).requires_grad_()
    y = F.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups)
    y.backward(go.to(device))
    return y.detach().cpu(), (x.grad.cpu() if input_grad else None), w.grad.cpu(), b.grad.cpu()


def _inputs(shape, seed=0):
    n, c, h, w, o, k, st, p, d, g = shape
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, h, w, generator=gen)
    wt = torch.randn(o, c // g, k, k, generator=gen) / (c // g * k * k) ** 0.5
    b = torch.randn(o, generator=gen)
    oh = (h + 2 * p - d * (k - 1) - 1) // st + 1
    ow = (w + 2 * p - d * (k - 1) - 1) // st + 1
    go = torch.randn(n, o, oh, ow, generator=gen)
    return x, wt, b, go


@pytest.mark.parametrize("shape", SHAPES, ids=_id)
def test_conv2d_grads_match_the_cpu(shape):
    *_, st, p, d, g = shape
    x, w, b, go = _inputs(shape)
    cpu = _grads("cpu", x, w, b, go, st, p, d, g)
    npu = _grads("npu", x, w, b, go, st, p, d, g)
    for name, a, e in zip(("output", "grad_input", "grad_weight", "grad_bias"), npu, cpu):
        _close(a, e, name)


def _close(actual, expected, name):
    # grad_weight and grad_bias are sums over N * OH * OW terms (up to 2048 here), added in
    # another order than the CPU's: their float32 rounding grows with the sum's size, so their
    # absolute tolerance is 1e-6 of the largest gradient (a few ulps of it), not a fixed 1e-5.
    atol = 1e-5 if name in ("output", "grad_input") else 1e-6 * float(expected.abs().max())
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=max(atol, 1e-5),
                               msg=lambda m: f"{name}: {m}")


def test_grad_input_of_a_non_contiguous_grad_output():
    """grad_output arrives transposed (the conv output was used through a permute): the
    implicit GEMM reads it through its strides."""
    shape = (4, 16, 10, 10, 16, 3, 1, 1, 1, 1)
    x, w, b, go = _inputs(shape)
    res = {}
    for device in ("cpu", "npu"):
        xd = x.detach().to(device).requires_grad_()
        y = F.conv2d(xd, w.to(device), b.to(device), padding=1)
        (y.permute(0, 2, 3, 1) * go.permute(0, 2, 3, 1).contiguous().to(device)).sum().backward()
        res[device] = xd.grad.cpu()
    torch.testing.assert_close(res["npu"], res["cpu"], rtol=1e-5, atol=1e-5)


def test_grad_weight_only_leaves_input_without_grad():
    """The first layer of a network: the input needs no gradient (no grad_input computed)."""
    shape = (8, 3, 16, 16, 8, 3, 1, 1, 1, 1)
    x, w, b, go = _inputs(shape)
    cpu = _grads("cpu", x, w, b, go, 1, 1, 1, 1, input_grad=False)
    npu = _grads("npu", x, w, b, go, 1, 1, 1, 1, input_grad=False)
    assert npu[1] is None
    for name, a, e in zip(("grad_weight", "grad_bias"), npu[2:], cpu[2:]):
        _close(a, e, name)


def test_hf32_grads_stay_within_hf32_error():
    """Under the HF32 default the implicit GEMMs round their operands (weight and grad_output,
    grad_output and input patches) to HF32, as the im2col GEMMs did: grad_input and grad_weight
    are within HF32's error of the CPU's float32 result."""
    torch.npu.conv.allow_hf32 = True
    shape = (4, 16, 12, 12, 16, 3, 1, 1, 1, 1)
    x, w, b, go = _inputs(shape)
    cpu = _grads("cpu", x, w, b, go, 1, 1, 1, 1)
    npu = _grads("npu", x, w, b, go, 1, 1, 1, 1)
    for name, i in (("grad_input", 1), ("grad_weight", 2)):
        err = float((npu[i] - cpu[i]).abs().max() / cpu[i].abs().max())
        assert 0 < err < 5e-3, (name, err)  # HF32 keeps 10 mantissa bits: not exact, not far
