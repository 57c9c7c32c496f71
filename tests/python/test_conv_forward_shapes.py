"""conv2d forward on the npu against the CPU device, over a table of shapes.

The shapes cover the forward's code paths in kernels/conv.cpp: the float32 direct convolution
(stride 1 along W: patches read in place from a zero-padded copy), the implicit GEMM with
patches packed from the input itself (stride 2 along W, or rows that do not merge), straight from the input planes (1x1, stride 1, no padding), and
the im2col + gemm path of the other dtypes (bfloat16); with 3 input channels (K = 27, the first
layer of a CNN), batch 1 to 8, padding, dilation and groups. HF32 is off, so float32 results
must equal a float64 CPU reference to float32 accumulation error.

Adding a shape: one row in SHAPES (batch, C_in, C_out, H, W, kernel, stride, padding, dilation,
groups)."""

import pytest
import torch
import torch.nn.functional as F

import torch_npu  # noqa: F401

SHAPES = [
    # batch, cin, cout, H, W, kernel, stride, padding, dilation, groups
    (1, 3, 32, 64, 64, 3, 1, 1, 1, 1),  # the CNN's first layer, batch 1..8
    (2, 3, 32, 64, 64, 3, 1, 1, 1, 1),
    (4, 3, 32, 32, 32, 3, 1, 1, 1, 1),
    (8, 3, 32, 16, 16, 3, 1, 1, 1, 1),
    (1, 32, 64, 32, 32, 3, 1, 1, 1, 1),  # the CNN's second and third layers
    (2, 64, 128, 16, 16, 3, 1, 1, 1, 1),
    (3, 3, 16, 17, 23, 3, 2, 1, 1, 1),  # stride 2 (packer without the padded copy)
    (2, 3, 8, 15, 15, 7, 2, 3, 1, 1),  # 7x7 stem-like, K = 147
    (1, 3, 5, 9, 11, 3, 1, 0, 1, 1),  # no padding, odd output widths, M not a panel multiple
    (5, 6, 9, 13, 7, 3, (2, 1), (0, 2), 1, 1),  # stride and padding differ along H and W
    (2, 8, 12, 20, 20, 3, 1, 2, 2, 2),  # dilation and groups
    (1, 16, 16, 12, 12, 3, 1, 1, 1, 16),  # depthwise
    (3, 12, 20, 9, 9, 1, 1, 0, 1, 1),  # pointwise: B is the input plane
    (2, 12, 20, 9, 9, 1, 2, 0, 1, 4),  # strided pointwise with groups
    (1, 4, 6, 5, 5, 5, 1, 2, 1, 2),  # kernel as large as the input
    (7, 3, 4, 3, 3, 3, 1, 1, 1, 1),  # tiny planes, odd batch
]

IDS = ["b{}_c{}-{}_{}x{}_k{}_s{}_p{}_d{}_g{}".format(*s) for s in SHAPES]


# Full float32 convolutions, to compare with the CPU's (conftest.py).
pytestmark = pytest.mark.usefixtures("conv_full_float32")


def _operands(shape, dtype, seed):
    b, cin, cout, h, w, k, stride, pad, dil, groups = shape
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, cin, h, w, generator=g).to(dtype)
    wt = torch.randn(cout, cin // groups, k, k, generator=g).to(dtype)
    bias = torch.randn(cout, generator=g).to(dtype)
    return x, wt, bias, dict(stride=stride, padding=pad, dilation=dil, groups=groups)


def _close(got, ref, rtol):
    scale = ref.abs().max().item() or 1.0
    err = (got.double() - ref.double()).abs().max().item() / scale
    assert err <= rtol, f"max error {err:.3g} of the largest |ref| {scale:.3g} > {rtol}"


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_float32_equals_cpu(shape, with_bias):
    x, w, b, kw = _operands(shape, torch.float32, 0)
    b = b if with_bias else None
    ref = F.conv2d(x.double(), w.double(), None if b is None else b.double(), **kw)
    got = F.conv2d(x.npu(), w.npu(), None if b is None else b.npu(), **kw).cpu()
    assert got.dtype == torch.float32 and got.shape == ref.shape
    _close(got, ref, 1e-5)
    # and the CPU device's float32 result agrees to the same accuracy
    _close(F.conv2d(x, w, b, **kw), ref, 1e-5)


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_float32_channels_last_and_strided_input(shape):
    x, w, b, kw = _operands(shape, torch.float32, 1)
    ref = F.conv2d(x.double(), w.double(), b.double(), **kw)
    xn = x.npu().contiguous(memory_format=torch.channels_last)
    _close(F.conv2d(xn, w.npu(), b.npu(), **kw).cpu(), ref, 1e-5)
    # a view whose rows do not merge: every other column of a wider tensor
    wide = torch.zeros(*x.shape[:3], 2 * x.shape[3])
    wide[..., ::2] = x
    _close(F.conv2d(wide.npu()[..., ::2], w.npu(), b.npu(), **kw).cpu(), ref, 1e-5)


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_bfloat16_equals_cpu(shape):
    x, w, b, kw = _operands(shape, torch.bfloat16, 2)
    # bfloat16 operands, products accumulated in float32, one rounding to bfloat16 at the end
    ref = F.conv2d(x.double(), w.double(), b.double(), **kw)
    got = F.conv2d(x.npu(), w.npu(), b.npu(), **kw).cpu()
    assert got.dtype == torch.bfloat16
    _close(got.float(), ref, 2 ** -7)
    _close(F.conv2d(x, w, b, **kw).float(), ref, 2 ** -7)


def test_float32_relu_after_conv_keeps_nan():
    # NaN in the input reaches the output through conv + relu, as on the CPU
    x, w, b, kw = _operands(SHAPES[0], torch.float32, 3)
    x[0, 0, 5, 5] = float("nan")
    ref = F.relu(F.conv2d(x, w, b, **kw))
    got = F.relu(F.conv2d(x.npu(), w.npu(), b.npu(), **kw)).cpu()
    assert torch.equal(got.isnan(), ref.isnan())
    _close(got.nan_to_num(), ref.nan_to_num(), 1e-5)
