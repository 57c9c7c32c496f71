"""SyncBatchNorm's pieces on npu (adapter/ops/SyncBatchNorm.cpp): the aten ops ATen has only CUDA
kernels for, and torch_npu's batch_norm_reduce / batch_norm_gather_stats_update, each against
the documented formula computed in float64 on the CPU."""

import pytest
import torch

import torch_npu

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
TOL = {torch.float32: 1e-5, torch.float64: 1e-10, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def _close(actual, expected, dtype, scale=1.0):
    tol = TOL[dtype] * scale
    torch.testing.assert_close(actual.cpu().double(), expected.double(), rtol=tol, atol=tol)


def _chan(x):  # [N, C, *] -> [C, N * prod(*)] in float64
    return x.double().transpose(0, 1).reshape(x.shape[1], -1)


def _shape_view(v, x):
    return v.double().view([1, -1] + [1] * (x.dim() - 2))


SHAPES = [(4, 3), (2, 3, 5), (2, 5, 7, 6), (3, 2, 40, 40), (1, 1, 2, 2, 2)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_batch_norm_stats(dtype, shape):
    x = (torch.randn(shape) * 3 + 5).to(dtype)
    mean, invstd = torch.batch_norm_stats(x.npu(), 1e-5)
    # CUDA's dtypes: float32 statistics for a 16-bit input
    assert mean.dtype == invstd.dtype == (torch.float32 if dtype in (torch.float16, torch.bfloat16)
                                          else dtype)
    c = _chan(x)
    ref_mean = c.mean(1)
    ref_invstd = 1 / torch.sqrt(c.var(1, unbiased=False) + 1e-5)
    _close(mean, ref_mean, torch.float64 if dtype == torch.float64 else torch.float32, 10)
    _close(invstd, ref_invstd, torch.float64 if dtype == torch.float64 else torch.float32, 10)


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_norm_elemt_and_out(dtype):
    x = torch.randn(4, 3, 5, 6).to(dtype)
    w, b = torch.randn(3), torch.randn(3)
    mean, invstd = torch.randn(3), torch.rand(3) + 0.5
    y = torch.batch_norm_elemt(x.npu(), w.npu(), b.npu(), mean.npu(), invstd.npu(), 1e-5)
    ref = (x.double() - _shape_view(mean, x)) * _shape_view(invstd, x) * _shape_view(w, x) \
        + _shape_view(b, x)
    assert y.dtype == dtype
    _close(y, ref, dtype, 4)
    out = torch.empty(0, dtype=dtype).npu()
    torch.batch_norm_elemt(x.npu(), None, None, mean.npu(), invstd.npu(), 1e-5, out=out)
    _close(out, (x.double() - _shape_view(mean, x)) * _shape_view(invstd, x), dtype, 4)


def test_batch_norm_elemt_non_contiguous_input():
    x = torch.randn(6, 5, 8, 3).permute(0, 3, 2, 1)  # channels-last-like strides, C = 3
    mean, invstd = torch.randn(3), torch.rand(3) + 0.5
    y = torch.batch_norm_elemt(x.npu(), None, None, mean.npu(), invstd.npu(), 0.0)
    _close(y, (x.double() - _shape_view(mean, x)) * _shape_view(invstd, x), torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_norm_gather_stats_with_counts(dtype):
    W, C = 3, 4
    counts = torch.tensor([10.0, 0.0, 7.0])  # a rank with no data is left out
    mean = torch.randn(W, C).to(dtype)
    invstd = (torch.rand(W, C) + 0.5).to(dtype)
    rm, rv = torch.randn(C).to(dtype), (torch.rand(C) + 1).to(dtype)
    rm_n, rv_n = rm.npu(), rv.npu()
    m, s = torch.batch_norm_gather_stats_with_counts(
        torch.randn(2, C).to(dtype).npu(), mean.npu(), invstd.npu(), rm_n, rv_n, 0.1, 1e-5,
        counts.npu())
    # float64 reference from the definition: pool the ranks' samples
    md, vd, n = mean.double(), 1 / invstd.double() ** 2 - 1e-5, counts.double()[:, None]
    total = n.sum()
    g_mean = (n * md).sum(0) / total
    g_var = (n * (vd + (md - g_mean) ** 2)).sum(0) / total
    assert m.dtype == s.dtype == dtype
    _close(m, g_mean, dtype, 4)
    _close(s, 1 / torch.sqrt(g_var + 1e-5), dtype, 4)
    _close(rm_n, 0.9 * rm.double() + 0.1 * g_mean, dtype, 4)
    _close(rv_n, 0.9 * rv.double() + 0.1 * g_var * total / (total - 1), dtype, 4)


def test_batch_norm_gather_stats_matches_pooled_batch():
    # Two "ranks" of data: gathering their batch_norm_stats gives the statistics of the whole.
    a, b = torch.randn(5, 3, 4), torch.randn(7, 3, 4) * 2 + 1
    stats = [torch.batch_norm_stats(t.npu(), 1e-5) for t in (a, b)]
    mean = torch.stack([s[0] for s in stats])
    invstd = torch.stack([s[1] for s in stats])
    m, s = torch.batch_norm_gather_stats_with_counts(
        a.npu(), mean, invstd, None, None, 0.1, 1e-5, torch.tensor([20.0, 28.0]).npu())
    whole = _chan(torch.cat([a, b]))
    _close(m, whole.mean(1), torch.float32, 10)
    _close(s, 1 / torch.sqrt(whole.var(1, unbiased=False) + 1e-5), torch.float32, 10)
    # the int-count form: every rank counted the same
    m2, s2 = torch.batch_norm_gather_stats(a.npu(), mean[:1], invstd[:1], None, None, 0.1,
                                           1e-5, 20)
    _close(m2, _chan(a).mean(1), torch.float32, 10)


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_norm_backward_reduce(dtype):
    x, dy = torch.randn(3, 4, 5, 5).to(dtype), torch.randn(3, 4, 5, 5).to(dtype)
    mean, invstd, w = torch.randn(4), torch.rand(4) + 0.5, torch.randn(4)
    sdy, sdx, gw, gb = torch.batch_norm_backward_reduce(dy.npu(), x.npu(), mean.npu(),
                                                        invstd.npu(), w.npu(), True, True, True)
    ref_sdy = _chan(dy).sum(1)
    ref_sdx = (_chan(dy) * (_chan(x) - mean.double()[:, None])).sum(1)
    assert sdy.dtype == sdx.dtype == gw.dtype == gb.dtype == torch.float32
    scale = 30 if dtype in (torch.float16, torch.bfloat16) else 1
    _close(sdy, ref_sdy, torch.float32, 10 * scale)
    _close(sdx, ref_sdx, torch.float32, 10 * scale)
    _close(gw, ref_sdx * invstd.double(), torch.float32, 10 * scale)
    _close(gb, ref_sdy, torch.float32, 10 * scale)
    # only what is asked for
    r = torch.batch_norm_backward_reduce(dy.npu(), x.npu(), mean.npu(), invstd.npu(), None,
                                         True, False, False)
    assert r[0].numel() == 4 and r[2] is None and r[3] is None  # undefined, as on CUDA


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("count_dtype", [torch.int32, torch.float32])
def test_batch_norm_backward_elemt(dtype, count_dtype):
    x, dy = torch.randn(3, 4, 5).to(dtype), torch.randn(3, 4, 5).to(dtype)
    mean, invstd, w = torch.randn(4), torch.rand(4) + 0.5, torch.randn(4)
    sdy, sdx = torch.randn(4) * 5, torch.randn(4) * 5
    count = torch.tensor([15, 20, 10]).to(count_dtype)
    gi = torch.batch_norm_backward_elemt(dy.npu(), x.npu(), mean.npu(), invstd.npu(), w.npu(),
                                         sdy.npu(), sdx.npu(), count.npu())
    n = 45.0
    v = lambda t: _shape_view(t, x)  # noqa: E731
    ref = (dy.double() - v(sdy) / n - (x.double() - v(mean)) * v(invstd) ** 2 * v(sdx) / n) \
        * v(invstd) * v(w)
    assert gi.dtype == dtype and gi.shape == x.shape
    _close(gi, ref, dtype, 8)


def test_sync_batch_norm_pieces_compose_to_batch_norm_training():
    # One rank's SyncBatchNorm forward and backward from the pieces equals batch_norm's.
    x = torch.randn(4, 3, 6, 6, requires_grad=True)
    w, b = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    y = torch.nn.functional.batch_norm(x, None, None, w, b, training=True, eps=1e-5)
    dy = torch.randn_like(y)
    y.backward(dy)
    xn = x.detach().npu()
    mean, invstd = torch.batch_norm_stats(xn, 1e-5)
    yn = torch.batch_norm_elemt(xn, w.detach().npu(), b.detach().npu(), mean, invstd, 1e-5)
    torch.testing.assert_close(yn.cpu(), y.detach(), rtol=1e-4, atol=1e-4)
    sdy, sdx, gw, gb = torch.batch_norm_backward_reduce(dy.npu(), xn, mean, invstd,
                                                        w.detach().npu(), True, True, True)
    gi = torch.batch_norm_backward_elemt(dy.npu(), xn, mean, invstd, w.detach().npu(), sdy, sdx,
                                         torch.tensor([144], dtype=torch.int32).npu())
    torch.testing.assert_close(gi.cpu(), x.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(gw.cpu(), w.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(gb.cpu(), b.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_npu_batch_norm_reduce(dtype):
    x = (torch.randn(2, 3, 7, 7) * 2).to(dtype)
    s, q = torch_npu.batch_norm_reduce(x.npu(), 1e-5)
    assert s.dtype == q.dtype == torch.float32 and s.shape == q.shape == (3,)
    _close(s, _chan(x).sum(1), torch.float32, 10)
    _close(q, (_chan(x) ** 2).sum(1), torch.float32, 10)
    s2, _ = torch.ops.npu.batch_norm_reduce(x.npu(), 1.0)  # eps does not matter
    torch.testing.assert_close(s2.cpu(), s.cpu())


def test_torch_npu_batch_norm_gather_stats_update():
    W, C = 3, 4
    x = torch.randn(2, C)
    sums, sq = torch.rand(W, C) * 10, torch.rand(W, C) * 100 + 50
    counts = torch.tensor([10.0, 12.0, 8.0])
    rm, rv = torch.randn(C), torch.rand(C) + 1
    rm_n, rv_n = rm.npu(), rv.npu()
    m, s = torch_npu.batch_norm_gather_stats_update(x.npu(), sums.npu(), sq.npu(), rm_n, rv_n,
                                                    0.1, 1e-5, counts.npu())
    n = counts.double().sum()
    g_mean = sums.double().sum(0) / n
    g_var = sq.double().sum(0) / n - g_mean ** 2
    _close(m, g_mean, torch.float32, 10)
    _close(s, 1 / torch.sqrt(g_var + 1e-5), torch.float32, 10)
    _close(rm_n, 0.9 * rm.double() + 0.1 * g_mean, torch.float32, 10)
    _close(rv_n, 0.9 * rv.double() + 0.1 * g_var, torch.float32, 10)


@pytest.mark.parametrize("call,match", [
    (lambda: torch.batch_norm_stats(torch.randn(3).npu(), 1e-5), "at least 2 dims"),
    (lambda: torch_npu.batch_norm_reduce(torch.randn(3).npu(), 1e-5), "1-dim input tensor"),
    (lambda: torch.batch_norm_stats(torch.ones(2, 3, dtype=torch.int64).npu(), 1e-5),
     "must be float32, float64, float16 or bfloat16"),
    (lambda: torch.batch_norm_elemt(torch.randn(2, 3).npu(), None, None, torch.zeros(4).npu(),
                                    torch.ones(3).npu(), 1e-5), "mean must have one element"),
    (lambda: torch.batch_norm_gather_stats_with_counts(
        torch.randn(2, 3).npu(), torch.zeros(2, 3).npu(), torch.ones(2, 3).npu(), None, None,
        0.1, 1e-5, torch.ones(3).npu()), "counts must hold one element count per rank"),
    (lambda: torch.batch_norm_backward_elemt(
        torch.randn(2, 4).npu(), torch.randn(2, 3).npu(), torch.zeros(3).npu(),
        torch.ones(3).npu(), None, torch.zeros(3).npu(), torch.zeros(3).npu(),
        torch.ones(1).npu()), "grad_out must have the input's shape"),
])
def test_bad_arguments_are_named(call, match):
    with pytest.raises(RuntimeError, match=match):
        call()


def test_sync_batch_norm_on_two_ranks_equals_batch_norm_on_the_global_batch():
    # torchrun, 2 ranks over hccl, unequal slices (dist_workers/sync_batch_norm.py).
    import re

    from dist_launch import torchrun, worker

    r = torchrun(worker("sync_batch_norm.py"), 2)
    assert r.returncode == 0, r.stdout[-6000:]
    verdicts = dict(re.findall(r"rank (\d) syncbn world=2 (?:\S+=\S+ )+(ok|FAILED)", r.stdout))
    assert verdicts == {"0": "ok", "1": "ok"}, r.stdout[-6000:]


def test_out_forms_equal_the_functional_ones():
    x, dy = torch.randn(4, 3, 5).npu(), torch.randn(4, 3, 5).npu()
    ops = torch.ops.aten
    mean, invstd = torch.batch_norm_stats(x, 1e-5)
    o0, o1 = torch.empty(0).npu(), torch.empty(0).npu()
    ops.batch_norm_stats.out(x, 1e-5, out0=o0, out1=o1)
    torch.testing.assert_close(o0.cpu(), mean.cpu())
    torch.testing.assert_close(o1.cpu(), invstd.cpu())

    m2, s2 = torch.stack([mean, mean]), torch.stack([invstd, invstd])
    counts = torch.tensor([20.0, 20.0]).npu()
    ref = torch.batch_norm_gather_stats_with_counts(x, m2, s2, None, None, 0.1, 1e-5, counts)
    g0, g1 = torch.empty(0).npu(), torch.empty(0).npu()
    ops.batch_norm_gather_stats_with_counts.out(x, m2, s2, None, None, 0.1, 1e-5, counts,
                                                out0=g0, out1=g1)
    torch.testing.assert_close((g0.cpu(), g1.cpu()), (ref[0].cpu(), ref[1].cpu()))
    ops.batch_norm_gather_stats.out(x, m2, s2, None, None, 0.1, 1e-5, 20, out0=g0, out1=g1)
    torch.testing.assert_close((g0.cpu(), g1.cpu()), (ref[0].cpu(), ref[1].cpu()))

    w = torch.rand(3).npu() + 0.5
    red = torch.batch_norm_backward_reduce(dy, x, mean, invstd, w, True, True, True)
    outs = [torch.empty(0).npu() for _ in range(4)]
    ops.batch_norm_backward_reduce.out(dy, x, mean, invstd, w, True, True, True, out0=outs[0],
                                       out1=outs[1], out2=outs[2], out3=outs[3])
    for got, want in zip(outs, red):
        torch.testing.assert_close(got.cpu(), want.cpu())
    count = torch.tensor([20], dtype=torch.int32).npu()
    gi = torch.batch_norm_backward_elemt(dy, x, mean, invstd, w, red[0], red[1], count)
    out = torch.empty(0).npu()
    ops.batch_norm_backward_elemt.out(dy, x, mean, invstd, w, red[0], red[1], count, out=out)
    torch.testing.assert_close(out.cpu(), gi.cpu())
