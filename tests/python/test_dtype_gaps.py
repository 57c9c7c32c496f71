"""Dtypes torch_npu takes on a 910B where ATen's CPU kernel (our npu kernel by the host-kernel
path) does not (adapter/ops/HostKernelDtypes.cpp, RecurrentCells.cpp): 16-bit floats computed
in float32 and rounded back once, int32 indices widened to int64, the fused LSTM/GRU cells and
mixed-dtype LSTM/GRU layers. Each result is compared with the CPU device's float32 (or int64)
result, cast to the dtype the card returns."""

import pytest
import torch
import torch.nn.functional as F

import torch_npu  # noqa: F401

HALFS = [torch.float16, torch.bfloat16]


def make(shape, dtype=torch.float32, seed=0, low=-2.0, high=2.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low).to(dtype)


def close(got, want, dtype):
    """got (npu, in dtype) against want (CPU float32 computed from the same rounded inputs)."""
    assert got.device.type == "npu"
    assert got.dtype == dtype, (got.dtype, dtype)
    got = got.cpu()
    assert got.shape == want.shape, (got.shape, want.shape)
    tol = 1e-2 if dtype == torch.float16 else (3e-2 if dtype == torch.bfloat16 else 1e-5)
    torch.testing.assert_close(got.float(), want.to(dtype).float(), rtol=tol, atol=tol)


def widened(fn, *inputs):
    """fn on the CPU in float32 over the inputs' (already rounded) values."""
    return fn(*[t.float() if t.is_floating_point() else t for t in inputs])


def on_npu(fn, *inputs):
    return fn(*[t.npu() for t in inputs])


# ---- 16-bit floats computed in float32 ------------------------------------------------------

CASES = {
    "cdist": (lambda a, b: torch.cdist(a, b), [(2, 5, 3), (2, 4, 3)]),
    "cdist_p1": (lambda a, b: torch.cdist(a, b, p=1.0), [(6, 3), (4, 3)]),
    "pdist": (lambda a: F.pdist(a), [(6, 4)]),
    "add_relu": (lambda a, b: torch._VF._add_relu(a, b, alpha=2), [(5, 7), (5, 7)]),
    "avg_pool3d": (lambda a: F.avg_pool3d(a, 2, stride=1, padding=1, count_include_pad=False),
                   [(1, 2, 4, 5, 3)]),
    "bicubic_aa": (lambda a: F.interpolate(a, size=(3, 5), mode="bicubic", antialias=True),
                   [(1, 2, 7, 9)]),
    "bilinear_aa": (lambda a: F.interpolate(a, scale_factor=0.5, mode="bilinear", antialias=True),
                    [(2, 1, 8, 6)]),
    "inverse": (lambda a: torch.inverse(a + 4 * torch.eye(4, dtype=a.dtype, device=a.device)),
                [(3, 4, 4)]),
}


@pytest.mark.parametrize("dtype", HALFS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_16bit_forward(name, dtype):
    fn, shapes = CASES[name]
    inputs = [make(s, dtype, seed=i) for i, s in enumerate(shapes)]
    close(on_npu(fn, *inputs), widened(fn, *inputs), dtype)


@pytest.mark.parametrize("dtype", HALFS)
@pytest.mark.parametrize("name", ["cdist", "pdist", "avg_pool3d", "bicubic_aa", "bilinear_aa"])
def test_16bit_backward(name, dtype):
    fn, shapes = CASES[name]
    inputs = [make(s, dtype, seed=i) for i, s in enumerate(shapes)]
    npu = [t.npu().requires_grad_() for t in inputs]
    out = fn(*npu)
    grad = make(out.shape, dtype, seed=9)
    out.backward(grad.npu())
    cpu = [t.float().requires_grad_() for t in inputs]
    fn(*cpu).backward(grad.float())
    for n, c in zip(npu, cpu):
        close(n.grad, c.grad, dtype)


@pytest.mark.parametrize("dtype", HALFS)
def test_add_relu_inplace_and_out(dtype):
    a, b = make((4, 6), dtype, seed=1), make((4, 6), dtype, seed=2)
    want = torch._VF._add_relu(a.float(), b.float(), alpha=1)
    x = a.npu()
    ret = torch._VF._add_relu_(x, b.npu(), alpha=1)
    assert ret.data_ptr() == x.data_ptr()
    close(x, want, dtype)
    out = torch.empty(0, dtype=dtype, device="npu")
    torch._VF._add_relu(a.npu(), b.npu(), alpha=1, out=out)
    close(out, want, dtype)


def test_float32_unchanged():
    """A dtype ATen's kernel covers is not widened: float32 and float64 keep their results."""
    for dtype in (torch.float32, torch.float64):
        a, b = make((3, 4), dtype), make((5, 4), dtype, seed=1)
        got = torch.cdist(a.npu(), b.npu())
        assert got.dtype == dtype
        torch.testing.assert_close(got.cpu(), torch.cdist(a, b))


# ---- int32 indices ---------------------------------------------------------------------------


def test_put_int32_index():
    src = make((3, 4))
    index = torch.tensor([0, 5, 11, -1], dtype=torch.int32)
    values = make((4,), seed=3)
    want = src.clone().put_(index.long(), values)
    got = src.npu().put_(index.npu(), values.npu())
    close(got, want, torch.float32)
    want = src.clone().put_(index[:3].long(), values[:3], accumulate=True)
    got = src.npu().put_(index[:3].npu(), values[:3].npu(), accumulate=True)
    close(got, want, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_multilabel_margin_loss_int32_target(dtype):
    x = make((3, 5), dtype)
    target = torch.tensor([[3, 0, -1, 1, 2], [1, 2, 3, -1, 0], [4, -1, 0, 0, 0]])
    want_fn = lambda a: F.multilabel_margin_loss(a, target)  # noqa: E731
    xc = x.float().clone().requires_grad_()
    want = want_fn(xc)
    want.backward()
    xn = x.npu().requires_grad_()
    got = F.multilabel_margin_loss(xn, target.int().npu())
    got.backward()
    close(got, want.detach(), dtype)
    close(xn.grad, xc.grad, dtype)


def test_one_hot_int32():
    index = torch.tensor([[0, 3], [2, 1]], dtype=torch.int32)
    got = F.one_hot(index.npu(), 5)
    assert got.dtype == torch.int32  # torch_npu returns the indices' dtype
    assert torch.equal(got.cpu(), F.one_hot(index.long(), 5).int())
    got = F.one_hot(index.npu())  # num_classes=-1: the largest index + 1
    assert torch.equal(got.cpu(), F.one_hot(index.long()).int())
    got = F.one_hot(index.long().npu(), 4)
    assert got.dtype == torch.int64
    assert torch.equal(got.cpu(), F.one_hot(index.long(), 4))


def test_one_hot_bad_dtype():
    with pytest.raises(RuntimeError, match="one_hot: the indices must be int64 or int32"):
        F.one_hot(torch.tensor([1.0, 2.0], device="npu"), 3)


# ---- recurrent cells and layers --------------------------------------------------------------


def _module_pair(cls, *args, **kwargs):
    torch.manual_seed(0)
    cpu = cls(*args, **kwargs)
    npu = cls(*args, **kwargs)
    npu.load_state_dict(cpu.state_dict())
    return cpu, npu.npu()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("cls", [torch.nn.LSTMCell, torch.nn.GRUCell])
@pytest.mark.parametrize("bias", [True, False])
def test_fused_cells_forward_backward(cls, dtype, bias):
    cpu, npu = _module_pair(cls, 5, 6, bias=bias)
    npu = npu.to(dtype)
    cpu = cpu.to(dtype).float()  # the card's weights, rounded to dtype
    x = make((4, 5), dtype)
    h = make((4, 6), dtype, seed=1)
    state = (h, make((4, 6), dtype, seed=2)) if cls is torch.nn.LSTMCell else h
    xc = x.float().clone().requires_grad_()
    sc = tuple(s.float() for s in state) if isinstance(state, tuple) else state.float()
    xn = x.npu().requires_grad_()
    sn = tuple(s.npu() for s in state) if isinstance(state, tuple) else state.npu()
    want, got = cpu(xc, sc), npu(xn, sn)
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, want):
        close(g.detach(), w.detach(), dtype)
    weights = [make(w.shape, dtype, seed=5 + i) for i, w in enumerate(want)]
    sum((w * wt.float()).sum() for w, wt in zip(want, weights)).backward()
    sum((g * wt.npu()).sum() for g, wt in zip(got, weights)).backward()
    close(xn.grad, xc.grad, dtype)
    for (name, pn), pc in zip(npu.named_parameters(), cpu.parameters()):
        tol = 1e-2 if dtype == torch.float16 else 1e-5
        torch.testing.assert_close(pn.grad.cpu().float(), pc.grad, rtol=tol, atol=tol, msg=name)


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU])
def test_mixed_dtype_layer_runs_in_input_dtype(cls):
    """torch_npu computes a float32 layer on float16 data in float16 (its weights cast); the
    module's own Python check refuses the mix, so the op is called as torch._VF does."""
    cpu, npu = _module_pair(cls, 4, 6, num_layers=2)
    x = make((5, 3, 4), torch.float16)
    h = make((2, 3, 6), torch.float16, seed=1)
    c = make((2, 3, 6), torch.float16, seed=2)
    vf = torch._VF.lstm if cls is torch.nn.LSTM else torch._VF.gru
    hx = (h.npu(), c.npu()) if cls is torch.nn.LSTM else h.npu()
    params = [p for p in npu._flat_weights]
    got = vf(x.npu(), hx, params, True, 2, 0.0, False, False, False)
    assert all(g.dtype == torch.float16 for g in got)
    cpu = cpu.half().float()  # the card's weights, rounded to float16
    want = cpu(x.float(), (h.float(), c.float()) if cls is torch.nn.LSTM else h.float())
    want = (want[0],) + (want[1] if isinstance(want[1], tuple) else (want[1],))
    for g, w in zip(got, want):
        close(g.detach(), w.detach(), torch.float16)


def test_fused_cell_bad_shapes():
    gates = torch.zeros(2, 8, device="npu")
    with pytest.raises(RuntimeError, match="the state must be"):
        torch.ops.aten._thnn_fused_lstm_cell(gates, gates, torch.zeros(2, 3, device="npu"))
    with pytest.raises(RuntimeError, match="same size"):
        torch.ops.aten._thnn_fused_gru_cell(gates, torch.zeros(2, 9, device="npu"),
                                   torch.zeros(2, 3, device="npu"))


def test_hardsigmoid_int32():
    """The card casts integer input through float32: results truncated back to int32."""
    x = torch.arange(-6, 7, dtype=torch.int32).reshape(1, 13)
    want = F.hardsigmoid(x.float()).int()
    got = F.hardsigmoid(x.npu())
    assert got.dtype == torch.int32 and torch.equal(got.cpu(), want)
    y = x.npu()
    F.hardsigmoid(y, inplace=True)
    assert torch.equal(y.cpu(), want)


def test_inverse_out_float16():
    a = make((2, 5, 5), torch.float16) + 4 * torch.eye(5, dtype=torch.float16)
    out = torch.empty(0, dtype=torch.float16, device="npu")
    torch.inverse(a.npu(), out=out)
    close(out, torch.inverse(a.float()), torch.float16)


# ---- the host-kernel path's sizes (ExecutionPaths.cpp) ---------------------------------------


def test_nnpack_spatial_convolution_runs_on_host():
    if not torch._nnpack_available():
        pytest.skip("NNPACK unavailable in this torch build")
    x, w, b = make((1, 3, 5, 5)), make((4, 3, 2, 2), seed=1), make((4,), seed=2)
    want = torch._nnpack_spatial_convolution(x, w, b, (1, 1))
    got = torch._nnpack_spatial_convolution(x.npu(), w.npu(), b.npu(), (1, 1))
    close(got, want, torch.float32)
    want64 = F.conv2d(x.double(), w.double(), b.double(), padding=1)
    torch.testing.assert_close(got.cpu().double(), want64, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_bookkeeping_outputs(mode):
    """The CPU kernel fills bookkeeping outputs that the meta kernel sizes empty."""
    w = make((10, 3))
    idx, off = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 4])
    want = F.embedding_bag(idx, w, off, mode=mode)
    got = F.embedding_bag(idx.npu(), w.npu(), off.npu(), mode=mode)
    close(got, want, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_normal_out_reads_out_size(dtype):
    """normal(mean=Tensor, std=float, out=) sizes its std from out: out keeps its size."""
    torch.manual_seed(0)
    mean = torch.full((4000,), 2.0, dtype=dtype, device="npu")
    out = torch.empty(4000, dtype=dtype, device="npu")
    ret = torch.normal(mean=mean, std=3.0, out=out)
    assert ret is out and out.shape == (4000,)
    values = out.cpu().double()
    assert abs(values.mean().item() - 2.0) < 0.3 and abs(values.std().item() - 3.0) < 0.3
    std = torch.full((40, 100), 3.0, dtype=dtype, device="npu")
    out = torch.empty(40, 100, dtype=dtype, device="npu")
    torch.normal(mean=2.0, std=std, out=out)
    values = out.cpu().double()
    assert abs(values.mean().item() - 2.0) < 0.3 and abs(values.std().item() - 3.0) < 0.3


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cdist_backward_inf_norm(dtype):
    """p = inf: the gradient reaches every coordinate where |x1 - x2| >= the (rounded)
    distance, as the card's CdistGrad computes it; a float64 model over the same values."""
    x1, x2 = make((2, 5, 6), dtype), make((2, 4, 6), dtype, seed=1)
    a, b = x1.npu().requires_grad_(), x2.npu().requires_grad_()
    y = torch.cdist(a, b, p=float("inf"))
    g = make(y.shape, dtype, seed=2)
    y.backward(g.npu())
    # the differences in float32, as the kernel takes them (exact for 16-bit inputs)
    diff = (x1.float().unsqueeze(-2) - x2.float().unsqueeze(-3)).double()
    dist = y.detach().cpu().double().unsqueeze(-1)
    reach = (diff.abs() >= dist).double()
    want1 = (g.double().unsqueeze(-1) * diff.sign() * reach).sum(-2)
    want2 = -(g.double().unsqueeze(-1) * diff.sign() * reach).sum(-3)
    close(a.grad, want1.float(), dtype)
    close(b.grad, want2.float(), dtype)
    if dtype == torch.float32:  # ATen's own gradient where the distance is exact
        c1, c2 = x1.clone().requires_grad_(), x2.clone().requires_grad_()
        torch.cdist(c1, c2, p=float("inf")).backward(g)
        close(a.grad, c1.grad, dtype)


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU])
def test_layer_packed_bidirectional_training_matches_cpu(cls):
    """The whole layer through the fused cells: packed, bidirectional, 2 layers, backward."""
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    cpu, npu = _module_pair(cls, 3, 5, num_layers=2, bidirectional=True)
    x = make((6, 3, 3))
    lengths = torch.tensor([6, 4, 2])
    outs = []
    for module, data in ((cpu, x.clone()), (npu, x.npu())):
        data.requires_grad_()
        y, _ = module(pack_padded_sequence(data, lengths))
        y, _ = pad_packed_sequence(y)
        (y * torch.linspace(-1, 1, y.numel(), device=y.device).view_as(y)).sum().backward()
        outs.append((y.detach().cpu(), data.grad.cpu(), [p.grad.cpu() for p in module.parameters()]))
    (yc, gc, pc), (yn, gn, pn) = outs
    torch.testing.assert_close(yn, yc, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gn, gc, rtol=1e-5, atol=1e-5)
    for a, b in zip(pn, pc):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


# ---- searchsorted: ATen's checks at the call (Searchsorted.cpp) --------------------------------


def test_searchsorted_results_match_cpu():
    seq = torch.tensor([[0.0, 1.0, 2.0, 3.0], [1.0, 3.0, 5.0, 7.0]])
    vals = torch.tensor([[0.5, 3.0], [3.0, 8.0]])
    for kwargs in ({}, {"right": True}, {"side": "right"}, {"out_int32": True}):
        want = torch.searchsorted(seq, vals, **kwargs)
        got = torch.searchsorted(seq.npu(), vals.npu(), **kwargs)
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want)
    unsorted = torch.tensor([3.0, 0.0, 2.0, 1.0])
    sorter = torch.argsort(unsorted)
    want = torch.searchsorted(unsorted, torch.tensor([1.5, 2.5]), sorter=sorter)
    got = torch.searchsorted(unsorted.npu(), torch.tensor([1.5, 2.5]).npu(), sorter=sorter.npu())
    assert torch.equal(got.cpu(), want)
    want = torch.searchsorted(seq[0], 2.5)
    got = torch.searchsorted(seq[0].npu(), 2.5)
    assert torch.equal(got.cpu(), want)
    out = torch.empty(0, dtype=torch.int32, device="npu")
    torch.searchsorted(seq.npu(), vals.npu(), out_int32=True, out=out)
    assert torch.equal(out.cpu(), torch.searchsorted(seq, vals, out_int32=True))


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"side": "middle"}, "side can only be 'left' or 'right'"),
        ({"side": "left", "right": True}, "side and right can't be set to opposites"),
        ({"sorter": torch.tensor([0.0, 1.0, 2.0, 3.0])}, "sorter must be a tensor of long dtype"),
        ({"sorter": torch.tensor([0, 1, 2, 10])}, "sorter index out of range"),
        ({"sorter": torch.tensor([0, 1, 2])}, "boundary and sorter must have the same size"),
    ],
)
def test_searchsorted_bad_arguments_raise_at_the_call(kwargs, pattern):
    seq, vals = torch.tensor([0.0, 1.0, 2.0, 3.0]), torch.tensor([0.5, 1.5])
    with pytest.raises(RuntimeError, match=pattern):
        torch.searchsorted(seq, vals, **kwargs)  # the CPU's message
    npu_kwargs = {k: (v.npu() if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
    with pytest.raises(RuntimeError, match=pattern):
        torch.searchsorted(seq.npu(), vals.npu(), **npu_kwargs)
    torch.npu.synchronize()  # nothing was queued to fail later


def test_searchsorted_out_dtype_and_leading_dims():
    seq = torch.tensor([[0.0, 1.0, 2.0], [0.0, 1.0, 2.0]], device="npu")
    with pytest.raises(RuntimeError, match="first N-1 dimensions of boundaries"):
        torch.searchsorted(seq, torch.tensor([0.5, 0.5], device="npu"))
    out = torch.empty(1, dtype=torch.int32, device="npu")
    with pytest.raises(RuntimeError, match="output tensor's dtype is wrong"):
        torch.searchsorted(seq[0], torch.tensor([0.5], device="npu"), out_int32=False, out=out)
    torch.npu.synchronize()


# ---- arguments torch_npu takes or checks otherwise (AcceptedArguments.cpp) ---------------------


def _renorm_p0_model(x, dim, maxnorm):
    """float64: a slice's norm is its count of non-zero elements."""
    x = x.double()
    dims = [d for d in range(x.dim()) if d != dim]
    n = (x != 0).double().sum(dims, keepdim=True)
    return x * torch.where(n > maxnorm, maxnorm / (n + 1e-7), torch.ones_like(n))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_renorm_p0(dtype):
    x = make((4, 3, 5), dtype)
    x[0, 0, :3] = 0
    want = _renorm_p0_model(x, 1, 7.0).float()
    close(torch.renorm(x.npu(), 0, 1, 7.0), want, dtype)
    out = torch.empty(0, dtype=dtype, device="npu")
    torch.renorm(x.npu(), 0, 1, 7.0, out=out)
    close(out, want, dtype)
    y = x.npu()
    y.renorm_(0, 1, 7.0)
    close(y, want, dtype)


def test_renorm_other_p_unchanged():
    x = make((3, 4))
    close(torch.renorm(x.npu(), 2, 0, 1.0), torch.renorm(x, 2, 0, 1.0), torch.float32)
    with pytest.raises(RuntimeError, match="non-positive-norm not supported"):
        torch.renorm(x.npu(), -1, 0, 1.0)


def test_histc_range_checked_at_the_call():
    with pytest.raises(RuntimeError, match=r"range of \[inf, inf\] is not finite"):
        torch.histc(torch.tensor([float("inf")], device="npu"))
    torch.npu.synchronize()  # nothing was queued to fail later
    x = torch.tensor([1.0, 2.0, 1.0])
    got = torch.histc(x.npu(), bins=4, min=5, max=5)  # the range from the data
    assert torch.equal(got.cpu(), torch.histc(x, bins=4, min=5, max=5))
    x = make((50,))
    out = torch.zeros(8, device="npu")
    torch.histc(x.npu(), 8, -2, 2, out=out)
    assert torch.equal(out.cpu(), torch.histc(x, 8, -2, 2))


@pytest.mark.parametrize("shapes", [((), (0,)), ((), (3, 2)), ((3, 1), (3, 4)), ((2, 3), (2, 3))])
def test_native_dropout_backward_broadcasts_as_cpu(shapes):
    g = make(shapes[0])
    mask = torch.randint(0, 2, shapes[1], generator=torch.Generator().manual_seed(1)).bool()
    want = torch.ops.aten.native_dropout_backward(g, mask, 2.0)
    got = torch.ops.aten.native_dropout_backward(g.npu(), mask.npu(), 2.0)
    close(got, want, torch.float32)
