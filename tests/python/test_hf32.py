"""HF32, as torch_npu's flags select it: torch.npu.conv.allow_hf32 (default True) and
torch.npu.matmul.allow_hf32 (default False). While a flag is on, float32 operands of that family
are rounded to HF32 (10 mantissa bits, to nearest even) before a float32-accumulating product.

The reference is a NumPy model of the rounding (bit operations on the float32 pattern), then the
product in float64 on the CPU: the npu result must equal it to float32 accumulation error, and
differ from the plain float32 CPU result by HF32's error (far larger)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import torch_npu  # noqa: F401
from torch_npu.npu import npu_config


def hf32(t: torch.Tensor) -> torch.Tensor:
    """The NumPy model: float32 -> HF32, round to nearest, ties to even, on the 13 dropped bits."""
    bits = t.detach().cpu().float().numpy().view(np.uint32).astype(np.uint64)
    lsb = (bits >> 13) & 1
    rounded = ((bits + 0x0FFF + lsb) & 0xFFFFE000).astype(np.uint32)
    return torch.from_numpy(rounded.view(np.float32).copy())


def rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    got, ref = got.detach().cpu().double(), ref.detach().cpu().double()
    return float((got - ref).abs().max() / ref.abs().max())


# float32 accumulation over a few dozen terms stays below this; HF32's input rounding (2^-11
# relative per operand) moves these products by 1e-4 to 1e-3 relative, measured below.
SAME = 2e-6
HF32_APART = 5e-5


@pytest.fixture
def flags():
    """Restores both flags (and the adapter's copy) after the test."""
    saved = npu_config._options["ALLOW_MATMUL_HF32"], npu_config._options["ALLOW_CONV_HF32"]
    yield
    npu_config._options["ALLOW_MATMUL_HF32"], npu_config._options["ALLOW_CONV_HF32"] = saved
    npu_config._sync_hf32()


def randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_the_model_rounds_to_nearest_even():
    one = 1.0
    step = 2.0 ** -10  # HF32's mantissa step at 1
    cases = {
        one + step / 2: one,                 # a tie: down to the even neighbour
        one + 3 * step / 2: one + 2 * step,  # a tie: up to the even neighbour
        one + step / 2 + 2.0 ** -20: one + step,  # past the tie: up
        one + step / 2 - 2.0 ** -20: one,         # short of it: down
        -(one + 3 * step / 2): -(one + 2 * step),  # the sign is kept
    }
    x = torch.tensor(list(cases), dtype=torch.float32)
    np.testing.assert_array_equal(hf32(x).numpy(), np.array(list(cases.values()), np.float32))
    big = torch.tensor([3.4028235e38, float("inf"), 0.0])
    assert hf32(big).tolist() == [float("inf"), float("inf"), 0.0]


# ---- convolution: HF32 by default -------------------------------------------------------------

CONVS = {
    "conv2d": dict(x=(2, 4, 9, 9), w=(5, 4, 3, 3), kw=dict(padding=1)),
    "conv2d_strided_grouped": dict(x=(2, 4, 10, 10), w=(6, 2, 3, 3),
                                   kw=dict(stride=2, groups=2, dilation=1)),
    "conv2d_pointwise": dict(x=(2, 8, 6, 6), w=(4, 8, 1, 1), kw={}),
    "conv1d": dict(x=(3, 4, 17), w=(5, 4, 5), kw=dict(padding=2)),
}


# Transposed and 3-D convolutions run ATen's CPU kernel on the stream, over operands rounded to
# HF32 first: the same model as our conv kernel's.
HOST_CONVS = {
    "conv3d": dict(x=(2, 3, 5, 6, 6), w=(4, 3, 3, 3, 3), kw=dict(padding=1)),
    "conv_transpose1d": dict(x=(2, 4, 11), w=(4, 3, 3), kw=dict(stride=2), transposed=True),
    "conv_transpose2d": dict(x=(2, 4, 7, 7), w=(4, 6, 3, 3),
                             kw=dict(stride=2, padding=1, output_padding=1), transposed=True),
    "conv_transpose2d_grouped": dict(x=(2, 4, 6, 6), w=(4, 3, 3, 3), kw=dict(groups=2),
                                     transposed=True),
    "conv_transpose3d": dict(x=(1, 3, 4, 5, 5), w=(3, 2, 3, 3, 3), kw=dict(stride=2),
                             transposed=True),
}
CONVS.update(HOST_CONVS)


def _bias_size(c):
    return c["w"][1] * c["kw"].get("groups", 1) if c.get("transposed") else c["w"][0]


def _conv(x, w, b, kw, transposed=False):
    fs = ((F.conv1d, F.conv2d, F.conv3d) if not transposed else
          (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d))
    return fs[x.dim() - 3](x, w, b, **kw)


@pytest.mark.parametrize("name", list(CONVS))
def test_float32_conv_defaults_to_hf32_and_equals_the_numpy_model(name):
    c = CONVS[name]
    x, w, b = randn(*c["x"], seed=0), randn(*c["w"], seed=1), randn(_bias_size(c), seed=2)
    t = c.get("transposed", False)
    assert torch.npu.conv.allow_hf32 is True  # torch_npu's default
    got = _conv(x.npu(), w.npu(), b.npu(), c["kw"], t).cpu()
    model = _conv(hf32(x).double(), hf32(w).double(), b.double(), c["kw"], t)  # bias: float32
    fp32 = _conv(x, w, b, c["kw"], t)
    assert rel_err(got, model) < SAME, rel_err(got, model)
    assert rel_err(got, fp32) > HF32_APART, rel_err(got, fp32)


@pytest.mark.parametrize("name", list(CONVS))
def test_conv_without_hf32_equals_float32(name, flags):
    c = CONVS[name]
    x, w, b = randn(*c["x"], seed=0), randn(*c["w"], seed=1), randn(_bias_size(c), seed=2)
    t = c.get("transposed", False)
    torch.npu.conv.allow_hf32 = False
    got = _conv(x.npu(), w.npu(), b.npu(), c["kw"], t).cpu()
    fp32 = _conv(x, w, b, c["kw"], t)
    model = _conv(hf32(x).double(), hf32(w).double(), b.double(), c["kw"], t)
    assert rel_err(got, fp32) < SAME, rel_err(got, fp32)
    assert rel_err(got, model) > HF32_APART


def test_conv_backward_reads_its_operands_as_hf32():
    x, w = randn(2, 3, 8, 8, seed=0), randn(4, 3, 3, 3, seed=1)
    g = randn(2, 4, 8, 8, seed=2)
    xn, wn = x.npu().requires_grad_(), w.npu().requires_grad_()
    F.conv2d(xn, wn, padding=1).backward(g.npu())
    # The model: the backward's products of HF32 operands (grad_output included), in float64.
    xm, wm = hf32(x).double().requires_grad_(), hf32(w).double().requires_grad_()
    F.conv2d(xm, wm, padding=1).backward(hf32(g).double())
    xf, wf = x.clone().requires_grad_(), w.clone().requires_grad_()
    F.conv2d(xf, wf, padding=1).backward(g)
    for got, model, fp32 in ((xn.grad, xm.grad, xf.grad), (wn.grad, wm.grad, wf.grad)):
        assert rel_err(got, model) < SAME, rel_err(got, model)
        assert rel_err(got, fp32) > HF32_APART


@pytest.mark.parametrize("name", ["conv3d", "conv_transpose2d"])
def test_host_conv_backward_reads_its_operands_as_hf32(name, flags):
    # The backward of a convolution that ATen's CPU kernel runs: HF32 operands for the products
    # (grad_input, grad_weight), grad_output as it is for the bias gradient (a sum); with the
    # flag off, float32.
    c = HOST_CONVS[name]
    t = c.get("transposed", False)
    x, w, b = randn(*c["x"], seed=0), randn(*c["w"], seed=1), randn(_bias_size(c), seed=2)
    g = _conv(x, w, b, c["kw"], t)
    g = randn(*g.shape, seed=3)

    def grads(x, w, b, g, device=None):
        x, w, b = (v.detach().clone().to(device).requires_grad_() for v in (x, w, b))
        _conv(x, w, b, c["kw"], t).backward(g.to(device))
        return [v.grad.cpu() for v in (x, w, b)]

    npu = grads(x, w, b, g, "npu")
    model = grads(hf32(x).double(), hf32(w).double(), b.double(), hf32(g).double())
    model[2] = g.double().sum([d for d in range(g.dim()) if d != 1])
    fp32 = grads(x, w, b, g)
    for got, m, f in zip(npu[:2], model[:2], fp32[:2]):
        assert rel_err(got, m) < SAME, rel_err(got, m)
        assert rel_err(got, f) > HF32_APART, rel_err(got, f)
    assert rel_err(npu[2], model[2]) < SAME
    torch.npu.conv.allow_hf32 = False
    off = grads(x, w, b, g, "npu")
    for got, f in zip(off, fp32):
        assert rel_err(got, f) < SAME, rel_err(got, f)


def test_hf32_leaves_16_bit_convs_alone(flags):
    # float16 values are HF32 values already: the flag changes nothing for them.
    x, w = randn(1, 4, 7, 7, seed=0).half(), randn(3, 4, 3, 3, seed=1).half()
    on = F.conv2d(x.npu(), w.npu()).cpu()
    torch.npu.conv.allow_hf32 = False
    off = F.conv2d(x.npu(), w.npu()).cpu()
    assert torch.equal(on, off)
    torch.testing.assert_close(on.float(), F.conv2d(x.float(), w.float()), rtol=2e-3, atol=2e-3)


# ---- matmul: off by default -------------------------------------------------------------------

def _matmuls():
    a, b = randn(6, 40, seed=0), randn(40, 5, seed=1)
    c = randn(6, 5, seed=2)
    a3, b3, c3 = randn(3, 6, 40, seed=3), randn(3, 40, 5, seed=4), randn(3, 6, 5, seed=5)
    x, weight, bias = randn(2, 7, 40, seed=6), randn(5, 40, seed=7), randn(5, seed=8)
    v, u, s = randn(40, seed=9), randn(40, seed=10).abs(), randn(6, seed=11)
    return {
        "mm": (torch.mm, (a, b), lambda r: r(a) @ r(b)),
        "addmm": (lambda i, p, q: torch.addmm(i, p, q, beta=0.5, alpha=2.0), (c, a, b),
                  lambda r: 0.5 * c.double() + 2.0 * (r(a) @ r(b))),
        "bmm": (torch.bmm, (a3, b3), lambda r: r(a3) @ r(b3)),
        "baddbmm": (torch.baddbmm, (c3, a3, b3), lambda r: c3.double() + r(a3) @ r(b3)),
        "matmul_3d_by_2d": (torch.matmul, (a3, b), lambda r: r(a3) @ r(b)),
        "linear": (F.linear, (x, weight, bias),
                   lambda r: r(x) @ r(weight).T + bias.double()),
        # Matrix-vector and vector-vector products: the same GEMM, the same rounding.
        "mv": (torch.mv, (a, v), lambda r: r(a) @ r(v)),
        "mv_out": (lambda p, q: torch.mv(p, q, out=torch.empty(0, device=p.device)), (a, v),
                   lambda r: r(a) @ r(v)),
        "addmv": (lambda i, p, q: torch.addmv(i, p, q, beta=0.5, alpha=2.0), (s, a, v),
                  lambda r: 0.5 * s.double() + 2.0 * (r(a) @ r(v))),
        "addmv_": (lambda i, p, q: i.clone().addmv_(p, q, beta=0.5, alpha=2.0), (s, a, v),
                   lambda r: 0.5 * s.double() + 2.0 * (r(a) @ r(v))),
        "matmul_2d_by_1d": (torch.matmul, (a, v), lambda r: r(a) @ r(v)),
    }


MATMULS = list(_matmuls())


@pytest.mark.parametrize("name", MATMULS)
def test_float32_matmul_is_float32_by_default(name):
    op, args, model_of = _matmuls()[name]
    assert torch.npu.matmul.allow_hf32 is False  # torch_npu's default
    got = op(*(t.npu() for t in args)).cpu()
    fp32 = op(*args)
    model = model_of(lambda t: hf32(t).double())
    assert rel_err(got, fp32) < SAME, rel_err(got, fp32)
    assert rel_err(got, model) > HF32_APART


@pytest.mark.parametrize("name", MATMULS)
def test_matmul_allow_hf32_rounds_the_operands(name, flags):
    op, args, model_of = _matmuls()[name]
    torch.npu.matmul.allow_hf32 = True
    got = op(*(t.npu() for t in args)).cpu()
    model = model_of(lambda t: hf32(t).double())
    fp32 = op(*args)
    assert rel_err(got, model) < SAME, rel_err(got, model)
    assert rel_err(got, fp32) > HF32_APART, rel_err(got, fp32)


def test_dot_stays_float32_under_allow_hf32_as_on_the_card(flags):
    # op-plugin runs dot as the aclop Dot kernel with no cube math type (unlike mv, addmv).
    u, v = randn(40, seed=10).abs(), randn(40, seed=9)
    torch.npu.matmul.allow_hf32 = True
    got = torch.dot(u.npu(), v.npu()).cpu()
    assert rel_err(got, torch.dot(u, v)) < SAME, rel_err(got, torch.dot(u, v))
    assert rel_err(got, hf32(u).double() @ hf32(v).double()) > HF32_APART


def test_set_option_switches_hf32_as_the_flags_do(flags):
    a, b = randn(8, 64, seed=0), randn(64, 8, seed=1)
    torch.npu.set_option({"ALLOW_MATMUL_HF32": "enable"})
    assert torch.npu.matmul.allow_hf32 is True and torch_npu._C._npu_allowHF32("matmul")
    assert rel_err((a.npu() @ b.npu()).cpu(), hf32(a).double() @ hf32(b).double()) < SAME
    torch.npu.set_option({"ALLOW_MATMUL_HF32": "disable", "ALLOW_CONV_HF32": "disable"})
    assert not torch_npu._C._npu_allowHF32("matmul") and not torch_npu._C._npu_allowHF32("conv")
    assert rel_err((a.npu() @ b.npu()).cpu(), a @ b) < SAME


def test_the_flag_applies_to_ops_launched_after_it(flags):
    # Read at launch: queued work keeps the setting it was launched with.
    a, b = randn(64, 64, seed=0), randn(64, 64, seed=1)
    an, bn = a.npu(), b.npu()
    torch.npu.matmul.allow_hf32 = True
    on = an @ bn
    torch.npu.matmul.allow_hf32 = False
    off = an @ bn
    assert rel_err(on.cpu(), hf32(a).double() @ hf32(b).double()) < SAME
    assert rel_err(off.cpu(), a @ b) < SAME


def test_the_readiness_report_sees_the_current_flags(flags):
    from torch_npu.utils.op_report import _current_flag

    torch.npu.conv.allow_hf32 = False
    assert _current_flag("torch.npu.conv.allow_hf32", True) is False


def test_hf32_is_honoured_in_strict_mode_too(flags):
    x, w = randn(2, 4, 9, 9, seed=0), randn(5, 4, 3, 3, seed=1)
    a, b = randn(6, 40, seed=0), randn(40, 5, seed=1)
    before = torch_npu.npu.strict_mode()
    torch_npu.npu.set_strict_mode(True)
    try:
        conv = F.conv2d(x.npu(), w.npu()).cpu()
        torch.npu.matmul.allow_hf32 = True
        mm = (a.npu() @ b.npu()).cpu()
    finally:
        torch_npu.npu.set_strict_mode(before)
    assert rel_err(conv, F.conv2d(hf32(x).double(), hf32(w).double())) < SAME
    assert rel_err(mm, hf32(a).double() @ hf32(b).double()) < SAME
