"""float16 and bfloat16 cube operations accumulate as the 910B's cube unit does: products of
16-bit operands are summed in float32 and the result is rounded to float16 / bfloat16 once, at
the end (not after each addition).

The reference is the exact product (float64, whose error over these sums is far below a 16-bit
ulp) rounded once to the 16-bit dtype. The npu result must be bit-equal to it, or 1 ulp away
where float32's summation order puts the sum on the other side of a rounding boundary. That
holds wherever float32's own summation error is below half an ulp of the result (the products
of 16-bit values are exact in float32). That error is at most K * 2^-24 * sum|a_k * b_k| for K
terms, and in practice (rounding errors of random sign) below 8 * sqrt(K) * 2^-24 *
sum|a_k * b_k|, the bound used to pick the elements judged in ulps; in the elements where the
terms cancel so far that even that exceeds half an ulp, the npu result must lie within the
worst-case bound (plus an ulp) of the exact one. With non-negative operands (no cancellation)
the worst-case bound alone gives 1 ulp everywhere, and is tested too. A naive kernel that
accumulates in the 16-bit dtype (rounding after every multiply-add) is many ulps away on sums
this long: the last tests check that the comparison used here catches it."""

import pytest
import torch
import torch.nn.functional as F

import torch_npu  # noqa: F401

DTYPES = [torch.float16, torch.bfloat16]
K = 512  # summation length: long enough for 16-bit accumulation to drift by many ulps


def randn(*shape, seed, dtype):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def ulps(got: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Distance in units in the last place of got's 16-bit dtype, element by element."""
    assert got.dtype == ref.dtype and got.dtype in DTYPES

    def ordered(t):  # 16-bit patterns mapped to integers that increase with the value
        bits = t.contiguous().view(torch.int16).to(torch.int32)
        return torch.where(bits < 0, -(bits & 0x7FFF), bits)

    return (ordered(got.cpu()) - ordered(ref.cpu())).abs()


def ulp_of(ref: torch.Tensor) -> torch.Tensor:
    """The spacing of ref's 16-bit dtype at each of its values, in float64."""
    mantissa, min_exp = {torch.float16: (10, -14), torch.bfloat16: (7, -126)}[ref.dtype]
    r = ref.double().abs()
    exp = torch.floor(torch.log2(r.clamp_min(2.0 ** min_exp))).clamp_min(min_exp)
    return torch.exp2(exp - mantissa)


def assert_rounded_once(got: torch.Tensor, exact: torch.Tensor, abs_sum: torch.Tensor, terms: int):
    """got is the float64 result rounded once, or 1 ulp away, wherever float32 summation of
    `terms` products (sum of magnitudes `abs_sum`) cannot move it by half an ulp; elsewhere
    within that summation bound. Mostly bit-equal, and mostly such well-conditioned elements."""
    ref = exact.to(got.dtype)
    d = ulps(got, ref)
    worst_case = terms * 2.0 ** -24 * abs_sum.double()
    typical = 8 * terms**0.5 * 2.0 ** -24 * abs_sum.double()
    ulp = ulp_of(ref)
    clean = typical < ulp / 2
    # Measured: about 2/3 of the float16 elements and 95% of the bfloat16 ones are judged in ulps
    # on these unit-scale random operands (float16's finer ulp leaves less room).
    assert float(clean.double().mean()) >= 0.6, "too few well-conditioned elements to judge"
    worst = int(d[clean].max())
    assert worst <= 1, f"{worst} ulps from the once-rounded float64 result"
    err = (got.double() - exact.double()).abs()
    assert bool((err[~clean] <= worst_case[~clean] + ulp[~clean]).all()), "beyond float32's error"
    # float32 summation error is ~2^-24 relative per term: a 16-bit rounding boundary is crossed
    # only for results within that distance of one, a few percent at most.
    assert float((d[clean] == 0).double().mean()) >= 0.9, float((d[clean] == 0).double().mean())


def naive_16bit_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b as a kernel accumulating in a's 16-bit dtype would: round after every step."""
    acc = torch.zeros(*a.shape[:-1], b.shape[-1], dtype=a.dtype)
    for k in range(a.shape[-1]):
        acc = acc + a[..., k : k + 1] * b[..., k : k + 1, :]  # each op rounds to a.dtype
    return acc


# ---- mm, addmm, bmm ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_mm_accumulates_in_float32_and_rounds_once(dtype):
    a, b = randn(37, K, seed=0, dtype=dtype), randn(K, 29, seed=1, dtype=dtype)
    got = torch.mm(a.npu(), b.npu())
    assert got.dtype == dtype
    assert_rounded_once(got.cpu(), a.double() @ b.double(), a.double().abs() @ b.double().abs(), K)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_mm_of_non_negative_operands_is_within_1_ulp_everywhere(dtype):
    # No cancellation: float32's worst-case error, K * 2^-24 relative, is far below half a
    # 16-bit ulp (2^-12 or 2^-9 relative), so every element is judged in ulps.
    a, b = randn(40, K, seed=11, dtype=dtype).abs(), randn(K, 33, seed=12, dtype=dtype).abs()
    exact = a.double() @ b.double()
    got = torch.mm(a.npu(), b.npu()).cpu()
    assert int(ulps(got, exact.to(dtype)).max()) <= 1
    assert_rounded_once(got, exact, exact, K)
    assert bool((K * 2.0**-24 * exact < ulp_of(exact.to(dtype)) / 2).all())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_transposed_operands_accumulate_the_same_way(dtype):
    a, b = randn(K, 21, seed=2, dtype=dtype), randn(19, K, seed=3, dtype=dtype)
    got = a.npu().T @ b.npu().T
    assert_rounded_once(got.cpu(), a.double().T @ b.double().T,
                        a.double().abs().T @ b.double().abs().T, K)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_addmm_rounds_once_after_adding_the_input(dtype):
    a, b = randn(16, K, seed=4, dtype=dtype), randn(K, 24, seed=5, dtype=dtype)
    c = randn(16, 24, seed=6, dtype=dtype)
    got = torch.addmm(c.npu(), a.npu(), b.npu(), beta=0.5, alpha=2.0)
    exact = 0.5 * c.double() + 2.0 * (a.double() @ b.double())
    abs_sum = 0.5 * c.double().abs() + 2.0 * (a.double().abs() @ b.double().abs())
    assert_rounded_once(got.cpu(), exact, abs_sum, K + 1)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_bmm_accumulates_in_float32_and_rounds_once(dtype):
    a, b = randn(3, 13, K, seed=7, dtype=dtype), randn(3, K, 11, seed=8, dtype=dtype)
    got = torch.bmm(a.npu(), b.npu())
    assert got.dtype == dtype
    assert_rounded_once(got.cpu(), a.double() @ b.double(), a.double().abs() @ b.double().abs(), K)


# ---- convolution ------------------------------------------------------------------------------

CONVS = {
    # reduction length C_in * kh * kw = 512
    "conv2d": dict(x=(2, 32, 9, 9), w=(8, 32, 4, 4), kw=dict(padding=1)),
    "conv2d_strided": dict(x=(1, 128, 8, 8), w=(6, 128, 2, 2), kw=dict(stride=2)),
    "conv1d": dict(x=(2, 64, 20), w=(7, 64, 8), kw=dict(padding=3)),
}


def _conv(x, w, kw):
    return (F.conv1d if x.dim() == 3 else F.conv2d)(x, w, **kw)


@pytest.mark.parametrize("name", list(CONVS))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_conv_accumulates_in_float32_and_rounds_once(name, dtype):
    c = CONVS[name]
    x, w = randn(*c["x"], seed=9, dtype=dtype), randn(*c["w"], seed=10, dtype=dtype)
    got = _conv(x.npu(), w.npu(), c["kw"])
    assert got.dtype == dtype
    terms = c["w"][1] * c["w"][2] * (c["w"][3] if len(c["w"]) == 4 else 1)
    assert_rounded_once(got.cpu(), _conv(x.double(), w.double(), c["kw"]),
                        _conv(x.double().abs(), w.double().abs(), c["kw"]), terms)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_conv_backward_and_vector_products_round_once(dtype):
    # Non-negative operands, so every element is judged in ulps (see the mm test above).
    x = randn(2, 32, 9, 9, seed=1, dtype=dtype).abs()
    w = randn(8, 32, 4, 4, seed=2, dtype=dtype).abs()
    g = randn(2, 8, 8, 8, seed=3, dtype=dtype).abs()
    xn, wn = x.npu().requires_grad_(), w.npu().requires_grad_()
    F.conv2d(xn, wn, padding=1).backward(g.npu())
    xd, wd = x.double().requires_grad_(), w.double().requires_grad_()
    F.conv2d(xd, wd, padding=1).backward(g.double())
    assert int(ulps(xn.grad.cpu(), xd.grad.to(dtype)).max()) <= 1
    assert int(ulps(wn.grad.cpu(), wd.grad.to(dtype)).max()) <= 1
    a, v = randn(40, K, seed=4, dtype=dtype).abs(), randn(K, seed=5, dtype=dtype).abs()
    exact_mv, exact_dot = a.double() @ v.double(), v.double() @ v.double()
    assert int(ulps(torch.mv(a.npu(), v.npu()).cpu(), exact_mv.to(dtype)).max()) <= 1
    assert int(ulps(torch.dot(v.npu(), v.npu()).cpu(), exact_dot.to(dtype)).max()) <= 1


# ---- the comparison catches 16-bit accumulation -----------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_check_detects_a_16_bit_accumulating_matmul(dtype):
    a, b = randn(12, K, seed=0, dtype=dtype), randn(K, 10, seed=1, dtype=dtype)
    naive = naive_16bit_matmul(a, b)
    exact, abs_sum = a.double() @ b.double(), a.double().abs() @ b.double().abs()
    with pytest.raises(AssertionError, match="ulps from the once-rounded"):
        assert_rounded_once(naive, exact, abs_sum, K)
    # ...while the npu passes the same check on the same operands.
    got = torch.mm(a.npu(), b.npu()).cpu()
    assert_rounded_once(got, exact, abs_sum, K)
    assert int(ulps(got, naive).max()) > 1


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_check_detects_a_16_bit_accumulating_conv(dtype):
    c = CONVS["conv2d"]
    x, w = randn(*c["x"], seed=9, dtype=dtype), randn(*c["w"], seed=10, dtype=dtype)
    # The convolution as a matmul of the weight by the input's patches (im2col), accumulated
    # in 16 bits.
    cols = F.unfold(x.float(), kernel_size=c["w"][2:], padding=1).to(dtype)  # exact: a gather
    naive = naive_16bit_matmul(w.reshape(c["w"][0], -1), cols)  # [N, C_out, L]
    exact = _conv(x.double(), w.double(), c["kw"])
    abs_sum = _conv(x.double().abs(), w.double().abs(), c["kw"])
    terms = c["w"][1] * c["w"][2] * c["w"][3]
    with pytest.raises(AssertionError, match="ulps from the once-rounded"):
        assert_rounded_once(naive.reshape(exact.shape), exact, abs_sum, terms)
    assert_rounded_once(_conv(x.npu(), w.npu(), c["kw"]).cpu(), exact, abs_sum, terms)
