"""The adapter's mapping of aten ops onto the kernel library, compared with PyTorch's CPU device
for every dtype, broadcasting, type promotion, non-contiguous and overlapping (expanded) views,
in-place and out= forms, 0-dim, empty and large tensors. The ops must run as our kernels (no
host kernel, no fallback) where the library covers the dtype."""

import pytest
import torch
import torch.nn.functional as F

import torch_npu

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]
ALL = FLOATS + INTS + [torch.bool]


def make(shape, dtype, seed=0, low=-4, high=4):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low).to(dtype)
    lo = 1 if low > 0 else (0 if dtype == torch.uint8 else low)
    return torch.randint(int(lo), int(high), shape, generator=g, dtype=dtype)


def tol(dtype):
    return {torch.float16: (1e-2, 1e-2), torch.bfloat16: (2e-2, 2e-2)}.get(dtype, (1e-5, 1e-6))


def close(got, want, dtype=None):
    assert got.device.type == "npu"
    got = got.cpu()
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    rtol, atol = tol(dtype or want.dtype)
    if want.dtype.is_floating_point:
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
    else:
        assert torch.equal(got, want)


class NoHost:
    """Asserts that the block ran no host kernel and no fallback."""

    def __enter__(self):
        self.before = torch_npu._C._npu_pathTotals()

    def __exit__(self, *exc):
        if exc[0] is None:
            assert torch_npu._C._npu_pathTotals() == self.before, "an op left the kernel library"


BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "max": torch.maximum, "min": torch.minimum,
    "eq": torch.eq, "lt": torch.lt, "ge": torch.ge,
}


# PyTorch itself rejects bool subtraction (tested below) and bool division.
BINARY_CASES = [(op, dt) for op in BINARY for dt in ALL
                if not (dt == torch.bool and op in ("sub", "div"))]


@pytest.mark.parametrize("op,dtype", BINARY_CASES, ids=str)
def test_binary_broadcast_all_dtypes(op, dtype):
    fn = BINARY[op]
    a, b = make((3, 1, 5), dtype), make((4, 1), dtype, seed=1)
    if op == "div" and not dtype.is_floating_point:
        b = b.masked_fill(b == 0, 1)
    with NoHost():
        got = fn(a.npu(), b.npu())
    close(got, fn(a, b), dtype)


@pytest.mark.parametrize("pair", [(torch.int32, torch.float16), (torch.uint8, torch.int8),
                                  (torch.bool, torch.float32), (torch.float16, torch.bfloat16),
                                  (torch.int64, torch.float64)], ids=str)
def test_type_promotion_and_python_scalars(pair):
    a, b = make((6, 7), pair[0]), make((7,), pair[1], seed=2)
    with NoHost():
        results = [a.npu() + b.npu(), a.npu() * 2.5, a.npu() + 3, b.npu() * a.npu()]
    for got, want in zip(results, [a + b, a * 2.5, a + 3, b * a]):
        close(got, want)


UNARY = ["exp", "log", "sqrt", "tanh", "sigmoid", "abs", "neg", "sin", "floor", "erf", "relu",
         "rsqrt", "reciprocal"]


@pytest.mark.parametrize("dtype", FLOATS + [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("op", UNARY)
def test_unary(op, dtype):
    a = make((5, 9), dtype, low=0.1 if op in ("log", "sqrt", "rsqrt") else -3, high=3)
    fn = getattr(torch, op)
    with NoHost():
        got = fn(a.npu())
    close(got, fn(a), dtype)


def test_non_contiguous_overlapping_in_place_and_out():
    a, b = make((8, 6), torch.float32), make((6,), torch.float32, seed=3)
    x = a.npu()
    with NoHost():
        t = x.t() * 2                               # transposed input
        e = b.npu().expand(8, 6) + x                 # an expanded (overlapping) operand
        s = x[:, ::2].exp()                          # strided slice
        y = x.clone()
        y[1:5].mul_(3)                               # in place on a view
        out = torch.empty(0, device="npu")
        torch.add(x, b.npu(), alpha=0.5, out=out)    # out= resized
    close(t, a.t() * 2)
    close(e, b.expand(8, 6) + a)
    close(s, a[:, ::2].exp())
    want = a.clone()
    want[1:5].mul_(3)
    close(y, want)
    close(out, torch.add(a, b, alpha=0.5))


def test_zero_dim_empty_and_large():
    with NoHost():
        z = torch.tensor(2.5, device="npu") * torch.tensor(4.0, device="npu")
        e = torch.empty(0, 3, device="npu") + 1
        big = torch.ones(1 << 24, device="npu")
        s = (big * 2 + 1).sum()
    close(z, torch.tensor(10.0))
    assert e.shape == (0, 3) and e.device.type == "npu"
    assert s.item() == 3 * (1 << 24)


def test_in_place_type_errors_match_cpu():
    x = torch.ones(3, dtype=torch.int64, device="npu")
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        x.add_(1.5)
    with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with two bool tensors"):
        torch.ones(2, dtype=torch.bool, device="npu") - torch.ones(2, dtype=torch.bool, device="npu")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int32,
                                   torch.int64, torch.bool], ids=str)
def test_reductions(dtype):
    a = make((4, 5, 6), dtype)
    x = a.npu()
    if dtype == torch.bool:   # PyTorch has no argmax of bool; max of bool is ATen's kernel
        with NoHost():
            got = [x.sum(), x.sum(1), x.amax(2), x.any(0), x.all()]
        for g, w in zip(got, [a.sum(), a.sum(1), a.amax(2), a.any(0), a.all()]):
            close(g, w)
        return
    with NoHost():
        got = [x.sum(), x.sum(1), x.sum((0, 2), keepdim=True), x.amax(2), x.amin((0, 1)),
               x.max(1).values, x.max(1).indices, x.argmax(), x.argmin(2, keepdim=True)]
    want = [a.sum(), a.sum(1), a.sum((0, 2), keepdim=True), a.amax(2), a.amin((0, 1)),
            a.max(1).values, a.max(1).indices, a.argmax(), a.argmin(2, keepdim=True)]
    if dtype == torch.float16:
        rtol = 1e-2
        for g, w in zip(got, want):
            torch.testing.assert_close(g.cpu(), w, rtol=rtol, atol=1e-1)
        return
    for g, w in zip(got, want):
        close(g, w)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_float_reductions_and_scans(dtype):
    a = make((7, 9), dtype)
    x = a.npu()
    with NoHost():
        got = [x.mean(0), x.var(1), x.std(), torch.var_mean(x, 1)[0], x.norm(), x.prod(1),
               x.cumsum(1), x.cumprod(0), (x > 0).any(1), (x > -5).all()]
    want = [a.mean(0), a.var(1), a.std(), torch.var_mean(a, 1)[0], a.norm(), a.prod(1),
            a.cumsum(1), a.cumprod(0), (a > 0).any(1), (a > -5).all()]
    for g, w in zip(got, want):
        close(g, w)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16],
                         ids=str)
def test_matmul_family(dtype):
    a, b = make((17, 33), dtype), make((33, 9), dtype, seed=1)
    bias = make((9,), dtype, seed=2)
    A, B = make((3, 5, 7), dtype, seed=3), make((3, 7, 4), dtype, seed=4)
    with NoHost():
        got = [a.npu() @ b.npu(), torch.addmm(bias.npu(), a.npu(), b.npu(), beta=0.5, alpha=2),
               b.npu().t() @ a.npu().t(), torch.bmm(A.npu(), B.npu()),
               torch.baddbmm(A.npu()[:, :, :4], A.npu(), B.npu()), F.linear(a.npu(), b.npu().t())]
    want = [a @ b, torch.addmm(bias, a, b, beta=0.5, alpha=2), b.t() @ a.t(), torch.bmm(A, B),
            torch.baddbmm(A[:, :, :4], A, B), F.linear(a, b.t())]
    for g, w in zip(got, want):
        if dtype in (torch.float16, torch.bfloat16):
            torch.testing.assert_close(g.cpu(), w, rtol=3e-2, atol=3e-1)
        else:
            close(g, w)


def test_nn_and_indexing_ops():
    a = make((6, 8), torch.float32)
    w, b = make((8,), torch.float32, seed=1), make((8,), torch.float32, seed=2)
    idx = torch.tensor([0, 2, 5, 2])
    x = a.npu()
    with NoHost():
        got = [F.softmax(x, 1), F.log_softmax(x, 0), F.layer_norm(x, (8,), w.npu(), b.npu()),
               F.embedding(idx.npu(), x), x.index_select(1, idx.npu()),
               x.gather(1, idx.npu().expand(6, 4).contiguous()),
               torch.zeros(6, 8, device="npu").index_add(0, idx.npu(), x[:4]),
               torch.cat([x, x.half().float()], 1), torch.stack([x, x]), x.flip(0), x.roll(2, 1),
               x.tril(), x.triu(1), torch.where(x > 0, x, 0.0), x.masked_fill(x < 0, -1.0),
               torch.arange(3, 20, 4, device="npu"), torch.linspace(0, 1, 11, device="npu")]
    want = [F.softmax(a, 1), F.log_softmax(a, 0), F.layer_norm(a, (8,), w, b),
            F.embedding(idx, a), a.index_select(1, idx), a.gather(1, idx.expand(6, 4).contiguous()),
            torch.zeros(6, 8).index_add(0, idx, a[:4]), torch.cat([a, a.half().float()], 1),
            torch.stack([a, a]), a.flip(0), a.roll(2, 1), a.tril(), a.triu(1),
            torch.where(a > 0, a, 0.0), a.masked_fill(a < 0, -1.0), torch.arange(3, 20, 4),
            torch.linspace(0, 1, 11)]
    for g, w_ in zip(got, want):
        close(g, w_)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool])
def test_cat_layouts_match_cpu(dtype):
    """cat's row-by-row kernel (nk::concat: parts whose blocks from dim on are contiguous, any
    outer strides) and the part-by-part copies it leaves to the other layouts, exactly the CPU's."""
    base = make((4, 6, 5, 8), dtype)
    t = base.transpose(1, 2)   # [4, 5, 6, 8], outer dims permuted, last dim contiguous
    cases = [
        lambda x, tx: torch.cat([x, x[:, :, :, :3]], -1),          # a contiguous + a sliced part
        lambda x, tx: torch.cat([x, x], 0),
        lambda x, tx: torch.cat([x[:, :2], x, x[:, :0]], 1),       # a part of size 0 along dim
        lambda x, tx: torch.cat([-tx[..., 4:] if x.dtype != torch.bool else tx[..., 4:],
                                 tx[..., :4]], -1),              # rotate_half of a transposed view
        lambda x, tx: torch.cat([x.transpose(2, 3), x.transpose(2, 3)], 3),  # strided blocks
        lambda x, tx: torch.cat([torch.empty(0, dtype=x.dtype, device=x.device), x], 2),
        lambda x, tx: torch.cat([x[:, :1]] * 70, 1),                # more parts than concat takes
    ]
    with NoHost():
        got = [f(base.npu(), base.npu().transpose(1, 2)) for f in cases]
    for g, f in zip(got, cases):
        want = f(base, t)
        assert g.device.type == "npu" and g.shape == want.shape
        assert torch.equal(g.cpu(), want)
    # out= into a non-contiguous view (the part-by-part copies)
    out = torch.zeros(8, 6, 5, 32, dtype=dtype).npu()[::2, :, :, ::2]
    torch.cat([base.npu(), base.npu()], 3, out=out)
    assert torch.equal(out.cpu(), torch.cat([base, base], 3))


def test_backward_of_a_small_network_matches_cpu():
    torch.manual_seed(0)
    layers = [torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.GELU(),
              torch.nn.Linear(16, 4)]
    cpu = torch.nn.Sequential(*layers)
    x = make((5, 8), torch.float32)
    y = torch.tensor([0, 1, 2, 3, 0])
    F.cross_entropy(cpu(x), y).backward()
    grads = [p.grad.clone() for p in cpu.parameters()]
    npu = cpu.npu()   # the same parameters, moved
    npu.zero_grad()
    F.cross_entropy(npu(x.npu()), y.npu()).backward()
    for p, g in zip(npu.parameters(), grads):
        close(p.grad, g)


def test_index_out_of_range_is_reported_at_synchronize():
    x = torch.ones(4, 3, device="npu")
    y = x.index_select(0, torch.tensor([9], device="npu"))   # returns at once
    with pytest.raises(RuntimeError, match=r"index_select\(\): index out of range in self"):
        torch.npu.synchronize()
    close(x + 1, torch.full((4, 3), 2.0))                     # the device is still usable
    del y


def test_foreach_ops_match_the_per_tensor_loop():
    shapes = [(3, 4), (5,), (2, 2, 2), (0, 3)]
    a = [make(s, torch.float32, seed=i) for i, s in enumerate(shapes)]
    b = [make(s, torch.float32, seed=10 + i) for i, s in enumerate(shapes)]
    c = [make(s, torch.float32, seed=20 + i, low=0.5, high=2) for i, s in enumerate(shapes)]
    x, y, z = ([t.npu() for t in l] for l in (a, b, c))
    with NoHost():
        torch._foreach_mul_(x, 0.9)
        torch._foreach_add_(x, y, alpha=-0.1)
        torch._foreach_addcmul_(x, y, z, value=0.5)
        torch._foreach_addcdiv_(x, y, z, [0.1, 0.2, 0.3, 0.4])
        torch._foreach_lerp_(x, y, 0.25)
        torch._foreach_div_(x, [2.0, 3.0, 4.0, 5.0])
        r = torch._foreach_sqrt(z)
        torch._foreach_add_(x, 1e-3)
    for t in a:
        t.mul_(0.9)
    for t, u in zip(a, b):
        t.add_(u, alpha=-0.1)
    for t, u, v in zip(a, b, c):
        t.addcmul_(u, v, value=0.5)
    for t, u, v, s in zip(a, b, c, [0.1, 0.2, 0.3, 0.4]):
        t.addcdiv_(u, v, value=s)
    for t, u in zip(a, b):
        t.lerp_(u, 0.25)
    for t, s in zip(a, [2.0, 3.0, 4.0, 5.0]):
        t.div_(s)
    for t in a:
        t.add_(1e-3)
    for got, want in zip(x, a):
        close(got, want)
    for got, want in zip(r, [t.sqrt() for t in c]):
        close(got, want)
    # A list the fast path does not take (mixed dtypes) still works through the per-tensor loop.
    mixed = [torch.ones(2, device="npu"), torch.ones(2, dtype=torch.float64, device="npu")]
    torch._foreach_mul_(mixed, 3.0)
    assert [t.cpu().tolist() for t in mixed] == [[3.0, 3.0], [3.0, 3.0]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.int64,
                                   torch.float16], ids=str)
def test_sort_argsort_topk(dtype):
    a = make((6, 9), dtype)
    if dtype.is_floating_point:
        a[1, 3] = float("nan")          # NaN sorts as the largest, as on the CPU
    x = a.npu()
    with NoHost():
        got = [torch.sort(x, 1), torch.sort(x, 0, descending=True), torch.argsort(x, 1),
               torch.topk(x, 3, 1), torch.topk(x, 2, 0, largest=False)]
    want = [torch.sort(a, stable=True, dim=1), torch.sort(a, stable=True, dim=0, descending=True),
            torch.argsort(a, dim=1, stable=True), torch.topk(a, 3, 1),
            torch.topk(a, 2, 0, largest=False)]
    for g, w in zip(got[:3], want[:3]):   # sort is stable: indices are exact
        if isinstance(w, torch.Tensor):
            close(g, w)
        else:
            close(g[0], w[0])
            close(g[1], w[1])
    # topk leaves the order of equal values open (integers tie here): the values must match
    # and the indices must point at them.
    for (gv, gi), (wv, _), dim in zip(got[3:], want[3:], (1, 0)):
        close(gv, wv)
        assert torch.equal(a.gather(dim, gi.cpu()), gv.cpu()) or dtype.is_floating_point
        if dtype.is_floating_point:
            torch.testing.assert_close(a.gather(dim, gi.cpu()), gv.cpu(), equal_nan=True)


def test_clamp_with_float_bounds_on_an_integer_tensor_promotes():
    t = torch.arange(-3, 4)
    for lo, hi in [(None, 1.5), (0.5, None), (-1, 2.5), (-1, 2)]:
        close(torch.clamp(t.npu(), lo, hi), torch.clamp(t, lo, hi))
    out = torch.empty(0, device="npu")          # out= of another size is resized on the npu
    torch.clamp(t.npu(), 0.5, None, out=out)
    close(out, torch.clamp(t, 0.5))


@pytest.mark.parametrize("call", [
    lambda a, b, c, d: torch.mm(a, b),
    lambda a, b, c, d: torch.addmm(a, a, b),
    lambda a, b, c, d: torch.addmm(b, a, a),
    lambda a, b, c, d: torch.mm(a, a, out=torch.empty(2, 2, dtype=torch.half, device=a.device)),
    lambda a, b, c, d: torch.bmm(c, d),
    lambda a, b, c, d: torch.baddbmm(c, c, d),
    lambda a, b, c, d: torch.nn.functional.linear(a, b),
    lambda a, b, c, d: torch.matmul(a, b),
], ids=["mm", "addmm-mat2", "addmm-self", "mm-out", "bmm", "baddbmm", "linear", "matmul"])
def test_matmul_with_mixed_dtypes_raises_the_cpu_message_at_the_call(call):
    def args(device):
        a = torch.ones(2, 2, device=device)
        c = torch.ones(2, 2, 2, device=device)
        return a, a.half(), c, c.half()

    with pytest.raises(RuntimeError) as cpu_error:
        call(*args("cpu"))
    with pytest.raises(RuntimeError) as npu_error:
        call(*args("npu"))
    assert str(npu_error.value) == str(cpu_error.value)
    torch.npu.synchronize()  # nothing failed later on the stream


@pytest.mark.parametrize("kernel, stride, padding, dilation",
                         [(2, 2, 0, 1), (3, 1, 1, 1), (3, 2, 1, 2), (5, 3, 2, 1), (1, 1, 0, 1)])
@pytest.mark.parametrize("ceil_mode", [False, True])
def test_max_pool2d_values_and_indices_equal_the_cpu(kernel, stride, padding, dilation,
                                                     ceil_mode):
    """Windows wholly inside the row take the kernel's 8-wide vector path, the edges the scalar
    loop: both must pick the CPU's values and indices, NaN included (a NaN wins, the last
    one's index is kept)."""
    g = torch.Generator().manual_seed(kernel * 100 + stride * 10 + padding)
    x = torch.randn(2, 3, 23, 37, generator=g)
    x[0, 0, 1, 1] = float("nan")
    x[1, 2, 3, :5] = float("nan")
    x[1, 1, 4, 7:9] = 7.0  # ties: the first maximum's index
    args = (kernel, stride, padding, dilation)
    yc, ic = F.max_pool2d(x, *args, ceil_mode=ceil_mode, return_indices=True)
    yn, i_n = F.max_pool2d(x.npu(), *args, ceil_mode=ceil_mode, return_indices=True)
    assert torch.equal(yc.isnan(), yn.cpu().isnan())
    assert torch.equal(yc.nan_to_num(), yn.cpu().nan_to_num())
    assert torch.equal(ic, i_n.cpu())


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.int32])
@pytest.mark.parametrize("exponent", [1, 1.0, 2, 0.5])
def test_pow_with_the_exponents_that_have_their_own_kernels(dtype, exponent):
    # pow(x, 2)'s backward asks for pow(x, 1.0): it, x ** 2 and x ** 0.5 take dedicated kernels
    # (Elementwise.cpp, powScalarBody); results, dtypes (promotion) and special values as the CPU.
    x = make((257,), dtype, low=-3 if exponent != 0.5 else 0, high=3)
    if dtype.is_floating_point:
        x[:3] = torch.tensor([float("nan"), -0.0, float("inf")]).to(dtype)
    ref = torch.pow(x, exponent)
    got = torch.pow(x.npu(), exponent).cpu()
    assert got.dtype == ref.dtype
    torch.testing.assert_close(got, ref, rtol=tol(dtype)[0], atol=tol(dtype)[1], equal_nan=True)
    if dtype.is_floating_point and exponent in (1, 1.0):
        assert torch.signbit(got[1])  # -0 ** 1 is -0


@pytest.mark.parametrize("n", [1, 7, 8, 300])
def test_silu_and_log_softmax_backward_equal_the_cpu(n):
    # Both backward kernels run 8 lanes at a time in float32 with scalar tails: every length
    # class (below, at and past a vector) against the CPU's autograd, special values included.
    x = make((5, n), torch.float32, seed=n) * 4
    x[0, 0] = float("nan")
    x[1, 0] = -float("inf") if n > 1 else 30.0
    g = make((5, n), torch.float32, seed=n + 1)
    for fn in (F.silu, lambda t: F.log_softmax(t, dim=-1)):
        ref_x = x.clone().requires_grad_()
        fn(ref_x).backward(g)
        got_x = x.npu().requires_grad_()
        fn(got_x).backward(g.npu())
        torch.testing.assert_close(got_x.grad.cpu(), ref_x.grad, rtol=2e-5, atol=1e-6,
                                   equal_nan=True)


@pytest.mark.parametrize("dtypes", [(torch.int64, torch.int64), (torch.int32, torch.int64),
                                    (torch.float32, torch.float32), (torch.int64, torch.float64),
                                    (torch.uint8, torch.int16)])
@pytest.mark.parametrize("shape,test_shape", [((32000,), (1,)), ((4, 37), ()), ((), (1, 1)),
                                              ((0, 3), (2,)), ((6,), (0,)), ((4, 37), (3,)),
                                              ((), (2, 2))])
@pytest.mark.parametrize("invert", [False, True])
def test_isin_equals_the_cpu_and_runs_on_the_device_against_one_value(dtypes, shape, test_shape,
                                                                      invert):
    # isin(elements, one value) (Hugging Face's min_new_tokens processor asks it of the whole
    # vocabulary at every token) as one eq / ne kernel; empty operands on the device too; more
    # values by ATen's CPU kernel. The CPU's results: dtype promotion (2.5 is in no int64
    # tensor), NaN in nothing, 0-dim operands.
    elements = (make(shape, torch.int64, low=-4, high=12, seed=1) if shape else
                torch.tensor(3)).to(dtypes[0])
    values = torch.tensor([2, 3, 7, 2.5]).to(dtypes[1])
    count = torch.Size(test_shape).numel()
    test = values[torch.arange(count) % 4].reshape(test_shape)
    if count == 1:
        test = torch.full(test_shape, 2.5).to(dtypes[1]) if shape == (32000,) else \
            torch.full(test_shape, 3).to(dtypes[1])
    if dtypes[0].is_floating_point and elements.numel() > 2:
        elements.view(-1)[:2] = torch.tensor([float("nan"), 2.5])
    if shape == (32000,) and not dtypes[1].is_floating_point:
        test = torch.full(test_shape, 7, dtype=dtypes[1])
    ref = torch.isin(elements, test, invert=invert)
    before = torch_npu._C._npu_pathTotals()
    got = torch.isin(elements.npu(), test.npu(), invert=invert)
    on_device = torch_npu._C._npu_pathTotals() == before
    assert on_device == (count <= 1 or elements.numel() == 0)
    assert got.dtype == torch.bool and got.shape == ref.shape
    assert torch.equal(got.cpu(), ref)
    if count and ref.numel() and (dtypes[0].is_floating_point or not dtypes[1].is_floating_point):
        assert (ref != invert).any()  # some value is found (2.5 is not, in integers)


@pytest.mark.parametrize("elements,test", [
    (torch.tensor([44, 7], dtype=torch.int8), torch.tensor([300])),  # 300 wraps to 44 in int8
    (torch.tensor([255, 1], dtype=torch.uint8), torch.tensor([-1])),  # -1 wraps to 255
    (torch.tensor([0.1, 0.5]), torch.tensor([0.1], dtype=torch.float64)),  # 0.1 in float32 != in float64
    (torch.tensor([44, 7], dtype=torch.int8), torch.tensor(300)),  # 0-dim: isin's own promotion
])
@pytest.mark.parametrize("invert", [False, True])
def test_isin_compares_in_the_common_dtype_as_the_cpu(elements, test, invert):
    # A one-element test tensor widens the comparison's dtype (it is not a 0-dim operand): the
    # device path must not narrow it to the elements' dtype.
    ref = torch.isin(elements, test, invert=invert)
    got = torch.isin(elements.npu(), test.npu(), invert=invert)
    assert torch.equal(got.cpu(), ref)


def test_isin_refuses_bool_as_the_cpu():
    flags = torch.tensor([True, False])
    for device in ("cpu", "npu"):
        with pytest.raises(RuntimeError, match="Unsupported input type encountered for isin"):
            torch.isin(flags.to(device), flags[:1].to(device))


GELU_SPECIAL = [float("inf"), -float("inf"), float("nan"), 0.0, -0.0, 1e-30, 5.0, -5.0, 10.0,
                -10.0, 1e4, -1e4, 60000.0, -60000.0, 1e38, -1e38, 1.7e38, 1.71e38, 3e38, -3e38,
                3.4028234663852886e38, -3.4028234663852886e38]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("shift", [0, 5, 13])
def test_gelu_of_infinities_nan_and_large_values_equals_the_cpu(dtype, approximate, shift):
    # The CPU's vectorised GELU (every contiguous tensor of two or more elements) gives NaN for
    # gelu(+inf) with approximate='none' and overflows to inf from 2^127 up; ours follows it.
    # The special values land in whole vectors and in tails (shift), among ordinary ones.
    # float16 is the exception on the CPU's side: its gelu(+inf) is NaN on some hosts (a Xeon
    # with AVX512-FP16 took the vectorised loop) and +inf on others (an Ice Lake Xeon, AVX-512
    # without FP16), so there ours is held to the vectorised loop's NaN, float32's and bfloat16's
    # answer on every host.
    x = torch.cat([torch.tensor(GELU_SPECIAL), make((37,), torch.float32, seed=shift) * 3])
    x = torch.roll(x, shift).to(dtype)
    ref = F.gelu(x, approximate=approximate)
    if dtype == torch.float16 and approximate == "none":
        ref = torch.where(x == float("inf"), torch.tensor(float("nan"), dtype=dtype), ref)
    with NoHost():
        got = F.gelu(x.npu(), approximate=approximate).cpu()
    assert torch.equal(got.isnan(), ref.isnan()), (x[got.isnan() != ref.isnan()], got, ref)
    torch.testing.assert_close(got, ref, rtol=tol(dtype)[0], atol=tol(dtype)[1], equal_nan=True)
