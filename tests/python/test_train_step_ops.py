"""The ops of issue 30's eager training steps (benchmarks/train_bench.py) that have fast paths of
their own, against the CPU device: pow with a scalar exponent (1, 2, 3, -1, -2, -0.5, 0.5 and
other integers: unary kernels, not the generic std::pow one), softmax / log_softmax and their
backward (16 lanes on AVX-512 CPUs, 8 on AVX2), silu / sigmoid / exp / gelu and the backwards,
sums over leading dims and over the last dim, layer_norm's backward, row gathers
(index_select / embedding) and embedding's backward, and mm / bmm at the LLaMA-style step's shapes (operands read in
place or packed with vector copies, every storage order).
Every case: float32 / bfloat16 / float16, a non-contiguous view, row lengths on both sides of a
vector (1, 15, 16, 17, 64, 300), NaN / +-inf / -0 where the op cares, and a check that nothing
left the kernel library."""

import math

import pytest
import torch
import torch.nn.functional as F

import torch_npu

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
TOL = {torch.float32: (2e-5, 1e-6), torch.bfloat16: (1.6e-2, 1e-3), torch.float16: (2e-3, 1e-4),
       torch.float64: (1e-12, 1e-14)}


class NoHost:
    """Asserts that the block ran no ATen host kernel and no CPU fallback."""

    def __enter__(self):
        self.before = torch_npu._C._npu_pathTotals()

    def __exit__(self, *exc):
        if exc[0] is None:
            assert torch_npu._C._npu_pathTotals() == self.before, "an op left the kernel library"


def make(shape, dtype, seed, lo=-3.0, hi=3.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g, dtype=torch.float64) * (hi - lo) + lo).to(dtype)


def close(got, want, dtype, scale=1.0):
    assert got.device.type == "npu"
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape)
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(got, want, rtol=rtol * scale, atol=atol * scale, equal_nan=True)


SPECIAL = [float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 1.0, -1.0, 0.5, -2.0]


@pytest.mark.parametrize("dtype", DTYPES + [torch.float64])
@pytest.mark.parametrize("exponent", [1, 1.0, 2, 2.0, 3, 3.0, 4, 5, 7, 12, -1, -1.0, -2, -3,
                                      -0.5, 0.5, 64, -64, 65, 2.5])
def test_pow_scalar_exponents_equal_the_cpu(dtype, exponent):
    x = make((6, 37), dtype, seed=1)
    x[0, :len(SPECIAL)] = torch.tensor(SPECIAL, dtype=dtype)
    x[1] = x[1].abs() + 0.25  # positive bases for the fractional and negative exponents
    if abs(exponent) > 10:
        x = x.clamp(-1.5, 1.5)  # keep the large powers finite in the 16-bit types
    want = torch.pow(x, exponent)
    with NoHost():
        got = torch.pow(x.npu(), exponent)
        got_t = torch.pow(x.npu().t(), exponent)  # non-contiguous
        inplace = x.npu()
        inplace.pow_(exponent)
    close(got, want, dtype)
    close(got_t, want.t(), dtype)
    close(inplace, want, dtype)
    # NaN, inf and signed zeros exactly as the CPU's: -0 ** 3 = -0, -0 ** -1 = -inf, ...
    special = got.cpu()[0, :len(SPECIAL)]
    ref = want[0, :len(SPECIAL)]
    assert torch.equal(torch.isnan(special), torch.isnan(ref))
    finite = ~torch.isnan(ref)
    assert torch.equal(special[finite].isinf(), ref[finite].isinf())
    zeros = finite & (ref == 0)
    assert torch.equal(torch.signbit(special[zeros]), torch.signbit(ref[zeros]))


@pytest.mark.parametrize("exponent", [3, -1, -0.5, 7, -2])
def test_pow_scalar_exponent_out_and_broadcast_forms(exponent):
    x = make((4, 1, 9), torch.float32, seed=2, lo=0.5, hi=2.0)
    out = torch.empty(4, 1, 9, device="npu")
    with NoHost():
        torch.pow(x.npu(), exponent, out=out)
        # an expanded (stride 0) operand
        got_e = torch.pow(x.npu().expand(4, 3, 9), exponent)
    close(out, torch.pow(x, exponent), torch.float32)
    close(got_e, torch.pow(x.expand(4, 3, 9), exponent), torch.float32)


def test_pow_integer_exponent_accuracy_against_float64():
    # x^|e| by squaring in double: within std::pow's float result, i.e. one float rounding of
    # the true power (checked against NumPy-style float64 pow, rounded to float32).
    x = make((4096,), torch.float32, seed=3, lo=0.5, hi=1.6)
    for e in (3, 5, 9, 17, -7, 31):
        want = torch.pow(x.double(), e).float()
        got = torch.pow(x.npu(), e).cpu()
        ulp = (torch.nextafter(want.abs(), torch.tensor(math.inf)) - want.abs())
        assert ((got - want).abs() <= ulp).all(), e


def test_pow_zero_exponent_and_int_tensors_keep_their_semantics():
    x = torch.tensor([float("nan"), 2.0, -0.0, float("inf")])
    close(torch.pow(x.npu(), 0), torch.pow(x, 0), torch.float32)  # ones, NaN included
    i = torch.tensor([-3, -1, 0, 2, 5])
    assert torch.equal(torch.pow(i.npu(), 3).cpu(), torch.pow(i, 3))
    assert torch.equal(torch.pow(i.npu(), 2.0).cpu(), torch.pow(i, 2.0))  # float: promotes


ROWS = [1, 15, 16, 17, 64, 300]


def _rows(n, dtype, seed):
    x = make((5, n), dtype, seed=seed) * 2
    x[0, 0] = float("nan")
    if n > 1:
        x[1, 0] = -float("inf")  # a masked attention score
        x[2, :] = -float("inf")
        x[2, -1] = 0.0  # a causal mask's first row: one live entry
    x[3, 0] = -0.0
    return x


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", ROWS)
@pytest.mark.parametrize("log", [False, True])
def test_softmax_forward_and_backward_equal_the_cpu(dtype, n, log):
    fn = (lambda t: F.log_softmax(t, dim=-1)) if log else (lambda t: F.softmax(t, dim=-1))
    x = _rows(n, dtype, seed=n)
    g = make((5, n), dtype, seed=n + 1)
    ref_x = x.clone().requires_grad_()
    ref_y = fn(ref_x)
    ref_y.backward(g)
    got_x = x.npu().requires_grad_()
    with NoHost():
        got_y = fn(got_x)
        got_y.backward(g.npu())
    close(got_y.detach(), ref_y.detach(), dtype)
    if log and dtype != torch.float32:
        # g - exp(y) * sum(g) cancels: a 16-bit y that differs from the CPU's by one rounding
        # (both are within it of the exact value) moves the result by up to eps * sum|g|. The
        # check is then against float64 on the npu's own y, to that bound.
        y = got_y.detach().cpu().double()
        g64 = g.double()
        want = g64 - y.exp() * g64.sum(-1, keepdim=True)
        scale = g64.abs() + y.exp() * g64.abs().sum(-1, keepdim=True)
        bound = 2 * torch.finfo(dtype).eps * scale
        diff = (got_x.grad.cpu().double() - want).abs()
        ok = (diff <= bound + 1e-6) | (diff.isnan() & want.isnan())
        assert ok.all(), (diff - bound).max()
        return
    close(got_x.grad, ref_x.grad, dtype, scale=2.0)


@pytest.mark.parametrize("log", [False, True])
def test_softmax_over_a_non_last_dim_and_a_transposed_input(log):
    # dim 1 of a (B, T, H) tensor and a transposed (non-contiguous) 4-d attention-like input:
    # the rows are gathered into buffers, the 16-lane path runs on those.
    fn = F.log_softmax if log else F.softmax
    x = make((3, 33, 5), torch.float32, seed=4)
    att = make((2, 4, 19, 19), torch.float32, seed=5).transpose(-1, -2)
    for t, dim in ((x, 1), (att, -1)):
        g = make(t.shape, torch.float32, seed=6)
        ref_x = t.clone().requires_grad_()
        fn(ref_x, dim=dim).backward(g)
        got_x = t.npu().requires_grad_()
        with NoHost():
            got_y = fn(got_x, dim=dim)
            got_y.backward(g.npu())
        close(got_y.detach(), fn(t, dim=dim), torch.float32)
        close(got_x.grad, ref_x.grad, torch.float32, scale=2.0)


def test_masked_attention_softmax_backward_equals_the_cpu():
    # The LLaMA-style step's attention: masked_fill with a causal mask, softmax, backward.
    att = make((2, 4, 64, 64), torch.float32, seed=7)
    mask = torch.ones(64, 64, dtype=torch.bool).triu(1)
    g = make((2, 4, 64, 64), torch.float32, seed=8)
    ref_x = att.clone().requires_grad_()
    F.softmax(ref_x.masked_fill(mask, float("-inf")), dim=-1).backward(g)
    got_x = att.npu().requires_grad_()
    with NoHost():
        F.softmax(got_x.masked_fill(mask.npu(), float("-inf")), dim=-1).backward(g.npu())
    close(got_x.grad, ref_x.grad, torch.float32, scale=2.0)


ACTIVATIONS = {"silu": F.silu, "sigmoid": torch.sigmoid, "exp": torch.exp, "gelu": F.gelu}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(ACTIVATIONS))
@pytest.mark.parametrize("n", ROWS)
def test_exp_family_forward_and_backward_equal_the_cpu(dtype, name, n):
    fn = ACTIVATIONS[name]
    x = make((3, n), dtype, seed=n, lo=-12, hi=12)
    x[0, 0] = float("nan")
    if n > 3:
        x[0, 1], x[0, 2], x[0, 3] = float("inf"), -float("inf"), -0.0
        if name == "gelu":  # the CPU's gelu(+-inf) is NaN (its erf formula's inf * 0); ours
            x[0, 1], x[0, 2] = 30.0, -30.0  # +-inf, as before these changes: not compared
    if n > 5:
        x[1, 4], x[1, 5] = 100.0, -100.0  # past exp's overflow / underflow bounds
    g = make((3, n), dtype, seed=n + 2)
    ref_x = x.clone().requires_grad_()
    ref_y = fn(ref_x)
    ref_y.backward(g)
    got_x = x.npu().requires_grad_()
    with NoHost():
        got_y = fn(got_x)
        got_y.backward(g.npu())
        got_t = fn(x.npu().t())  # non-contiguous
    close(got_y.detach(), ref_y.detach(), dtype)
    close(got_t, fn(x.t()), dtype)
    # The backward's inf inputs give NaN on the CPU (inf * 0); compare where the CPU is finite
    # or NaN alike.
    close(got_x.grad, ref_x.grad, dtype, scale=2.0)


def test_silu_backward_broadcast_grad():
    x = make((4, 64, 35), torch.float32, seed=9)
    g = make((1, 64, 35), torch.float32, seed=10)
    want = torch.ops.aten.silu_backward(g.expand(4, 64, 35), x)
    with NoHost():
        got = torch.ops.aten.silu_backward(g.npu().expand(4, 64, 35), x.npu())
    close(got, want, torch.float32)


@pytest.mark.parametrize("shape,dims", [((16, 64, 128), (0, 1)), ((1024, 35), 0),
                                        ((3, 5, 17), (0, 1)), ((7, 16), 0), ((2, 9, 4, 33), (0, 1)),
                                        ((300, 1), 0), ((4, 48), 1), ((50, 200), 0),
                                        ((5, 8, 80), (0, 1))])
@pytest.mark.parametrize("mean", [False, True])
def test_sums_over_leading_dims_equal_float64(shape, dims, mean):
    # A weight's gradient: sum (or mean) over batch and tokens of a contiguous tensor, each
    # column summed in double (kernels column_sums: 64-column units on AVX-512, then 16-column
    # ones: 200 = 3 x 64 + 8, 80 = 64 + 16), against float64; keepdim, a transposed
    # (non-contiguous: the generic path) input and a float64 out= must agree as well.
    x = make(shape, torch.float32, seed=11) * 100
    x.view(-1)[0] = 1e7  # a large value: float partial sums would lose the small ones
    fn = torch.mean if mean else torch.sum
    xt = x.transpose(0, -1)
    out64 = torch.empty(fn(x, dims).shape, dtype=torch.float64, device="npu")
    with NoHost():
        got = fn(x.npu(), dims)
        got_k = fn(x.npu(), dims, keepdim=True)
        got_t = fn(x.npu().transpose(0, -1), dims)
        fn(x.npu(), dims, dtype=torch.float64, out=out64)
    close(got, fn(x.double(), dims).float(), torch.float32)
    close(got_k, fn(x.double(), dims, keepdim=True).float(), torch.float32)
    close(got_t, fn(xt.double(), dims).float(), torch.float32)
    torch.testing.assert_close(out64.cpu(), fn(x, dims, dtype=torch.float64), rtol=1e-6,
                               atol=1e-6)
    nan = x.clone()
    nan.view(-1)[-1] = float("nan")
    assert torch.equal(fn(nan.npu(), dims).cpu().isnan(), fn(nan, dims).isnan())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(64, 16, 32), (3, 5, 13), (7, 3), (2, 4, 300)])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_layer_norm_backward_equals_float64(dtype, shape, layout):
    # grad_input in double lanes per row, grad_weight / grad_bias as column sums; rows found
    # by one stride when the leading dims coalesce (contiguous), by the general walk when they
    # do not (a permuted view). Against float64 on the same (rounded) inputs: the CPU device's
    # own 16-bit results round sums of 1024 rows and differ from it by more than ours.
    n = shape[-1]
    x = make(shape, dtype, seed=12) * 3 + 1
    w = make((n,), dtype, seed=13)
    b = make((n,), dtype, seed=14)
    g = make(shape, dtype, seed=15)
    refs = [t.double().requires_grad_() for t in (x, w, b)]
    want_y = F.layer_norm(refs[0], (n,), refs[1], refs[2])
    want_y.backward(g.double())
    xs = x.npu()
    if layout == "transposed" and len(shape) == 3:
        xs = x.npu().transpose(0, 1).contiguous().transpose(0, 1)
        assert not xs.is_contiguous()
    gots = [xs.detach().requires_grad_(), w.npu().requires_grad_(), b.npu().requires_grad_()]
    with NoHost():
        y = F.layer_norm(gots[0], (n,), gots[1], gots[2])
        y.backward(g.npu())
    eps = torch.finfo(dtype).eps
    for got, want in ((y.detach(), want_y.detach()), *((t.grad, r.grad) for t, r in
                                                       zip(gots, refs))):
        assert got.dtype == dtype and got.shape == want.shape
        err = (got.cpu().double() - want).abs().max().item()
        # one rounding of each result, plus the 16-bit rounding of y / g inside the sums
        assert err <= 8 * eps * max(want.abs().max().item(), 1.0), err


# ---- GEMM at the LLaMA-style step's shapes (kernels/gemm.cpp) --------------------------------
# Row-major A read in place by the 8-row kernels, column-major A and row-major B packed with
# masked vector copies, A packed one K block at a time, row-only splits for tall products. Each
# product against float64 with the error bound of a float32 dot product of length K.

def _operand(rows, cols, layout, seed):
    """A [rows, cols] float32 matrix stored row-major ("n") or column-major ("t")."""
    if layout == "t":
        return make((cols, rows), torch.float32, seed, -1.0, 1.0).t()
    return make((rows, cols), torch.float32, seed, -1.0, 1.0)


def _gemm_close(got, a, b):
    want = (a.double() @ b.double())
    k = a.shape[-1]
    scale = (a.double().abs() @ b.double().abs())
    err = (got.cpu().double() - want).abs()
    bound = scale * (k * 2.0 ** -23) + 1e-30
    assert bool((err <= bound).all()), float((err / bound).max())


@pytest.mark.parametrize("m,k,n", [(4096, 128, 128), (4096, 352, 128), (128, 4096, 128),
                                   (352, 4096, 128), (128, 4096, 256), (4096, 128, 256),
                                   (1000, 700, 100), (37, 1300, 45), (64, 64, 32), (8, 513, 33),
                                   (130, 129, 17), (130, 700, 96), (45, 64, 32), (126, 512, 64),
                                   (1024, 1024, 1024)])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_mm_at_training_shapes_equals_float64(m, k, n, layout):
    a = _operand(m, k, layout[0], seed=m + k)
    b = _operand(k, n, layout[1], seed=n + 7)
    with NoHost():
        got = _npu_layout(a, layout[0]) @ _npu_layout(b, layout[1])
    _gemm_close(got, a, b)
    # alpha / beta: addmm writes beta * C + alpha * A B over the same paths
    c = make((m, n), torch.float32, seed=3, lo=-1.0, hi=1.0)
    with NoHost():
        got = torch.addmm(c.npu(), _npu_layout(a, layout[0]), _npu_layout(b, layout[1]),
                          beta=0.5, alpha=1.5)
    want = torch.addmm(c.double(), a.double(), b.double(), beta=0.5, alpha=1.5)
    torch.testing.assert_close(got.cpu().double(), want, rtol=1e-4, atol=1e-4 * math.sqrt(k))


def _npu_layout(x, layout):
    """x on npu with the same storage order (a transposed view stays a transposed view)."""
    return x.t().contiguous().npu().t() if layout == "t" else x.contiguous().npu()


@pytest.mark.parametrize("b,m,k,n", [(256, 64, 64, 32), (256, 64, 32, 64), (3, 100, 70, 40),
                                     (5, 9, 33, 31), (2, 129, 640, 65)])
@pytest.mark.parametrize("transposed", [False, True])
def test_bmm_at_attention_shapes_equals_float64(b, m, k, n, transposed):
    x = make((b, m, k), torch.float32, seed=1, lo=-1.0, hi=1.0)
    y = make((b, n, k), torch.float32, seed=2, lo=-1.0, hi=1.0).transpose(1, 2) if transposed \
        else make((b, k, n), torch.float32, seed=2, lo=-1.0, hi=1.0)
    yn = y.transpose(1, 2).contiguous().npu().transpose(1, 2) if transposed else y.npu()
    with NoHost():
        got = torch.bmm(x.npu(), yn)
    for i in range(b):
        _gemm_close(got[i], x[i], y[i])


# ---- row sums and embedding lookups ----------------------------------------------------------

@pytest.mark.parametrize("shape", [(64, 64, 128), (7, 1), (5, 7), (3, 8), (4, 31), (9, 33),
                                   (2, 300), (3, 4096), (2, 5000)])
@pytest.mark.parametrize("mean", [False, True])
@pytest.mark.parametrize("keepdim", [False, True])
def test_sums_over_the_last_dim_equal_the_cpu(shape, mean, keepdim):
    x = make(shape, torch.float32, seed=5)
    x.view(-1)[3 % x.numel()] = 1e7  # an outlier the float lanes must not lose
    f = (lambda t: t.mean(-1, keepdim=keepdim)) if mean else (lambda t: t.sum(-1, keepdim=keepdim))
    with NoHost():
        got = f(x.npu())
    want = f(x.double()).float()
    close(got, want, torch.float32)
    # rows of a wider tensor (row stride > row length), and float64 / NaN rows
    wide = make((6, shape[-1] + 5), torch.float32, seed=6)
    wide[2, 1] = float("nan")
    with NoHost():
        got = f(wide.npu()[:, 2:2 + shape[-1]])
    close(got, f(wide[:, 2:2 + shape[-1]].double()).float(), torch.float32)


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("shape", [(256, 128), (10, 3), (5, 2, 3)])
def test_index_select_rows_equal_the_cpu(index_dtype, shape):
    w = make(shape, torch.float32, seed=8)
    idx = torch.tensor([0, shape[0] - 1, 2, 2, 1, 0, 3] * 5, dtype=index_dtype)
    with NoHost():
        got = w.npu().index_select(0, idx.npu())
        strided = w.npu().index_select(0, idx.npu()[::2])  # a strided index
        emb = F.embedding(idx.npu().view(5, 7), w.npu().reshape(shape[0], -1))
    assert torch.equal(got.cpu(), w.index_select(0, idx))
    assert torch.equal(strided.cpu(), w.index_select(0, idx[::2]))
    assert torch.equal(emb.cpu(), F.embedding(idx.view(5, 7), w.reshape(shape[0], -1)))
    # a non-contiguous table keeps the general path
    wt = make((shape[0], 6), torch.float32, seed=9)
    with NoHost():
        got = wt.npu()[:, ::2].index_select(0, idx.npu())
    assert torch.equal(got.cpu(), wt[:, ::2].index_select(0, idx))


@pytest.mark.parametrize("rows,dim,padding_idx", [(256, 128, -1), (256, 128, 3), (50, 33, -1),
                                                  (100000, 20, 7)])
@pytest.mark.parametrize("strided", [False, True])
def test_embedding_backward_equals_float64_and_the_cpu(rows, dim, padding_idx, strided):
    # float32 rows summed in place, grouped by a counting sort (tables up to 4x the lookups) or
    # a comparison sort (100000 rows), or through the general path (a strided gradient).
    g = torch.Generator().manual_seed(11)
    idx = torch.randint(0, min(rows, 300), (64, 64), generator=g)
    idx[0, :5] = 3  # duplicates of the padding row
    full = make((64, 64, dim * 2 if strided else dim), torch.float32, seed=12)
    grad = full[..., ::2] if strided else full
    grad_n = full.npu()[..., ::2] if strided else full.npu()
    op = torch.ops.aten.embedding_dense_backward
    with NoHost():
        got = op(grad_n, idx.npu(), rows, padding_idx, False)
    want = op(grad.double(), idx, rows, padding_idx, False)
    torch.testing.assert_close(got.cpu().double(), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got.cpu(), op(grad, idx, rows, padding_idx, False),
                               rtol=1e-5, atol=1e-5)
    if padding_idx >= 0:
        assert not got[padding_idx].cpu().any()
