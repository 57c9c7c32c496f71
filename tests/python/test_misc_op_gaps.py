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


# ---- sparse COO gradients on npu ------------------------------------------------------------

@pytest.mark.parametrize("size_x,size_ind,dim", [((10, 10), (5, 10), 0), ((6, 4, 5), (6, 4, 2), -1),
                                                 ((10,), (), 0), ((), (2,), 0), ((), (), 0),
                                                 ((10, 5), (3, 0), -1)])
def test_gather_sparse_grad_is_a_sparse_npu_tensor(size_x, size_ind, dim):
    x = torch.randn(size_x, dtype=torch.float64)
    index = (torch.randint(x.size(dim), size_ind) if len(size_x) and len(size_ind)
             else torch.zeros(size_ind, dtype=torch.int64))
    grad_out = torch.rand(torch.gather(x, dim, index).shape, dtype=torch.float64)
    xc = x.clone().requires_grad_()
    torch.gather(xc, dim, index).backward(grad_out)  # the dense CPU gradient: the reference
    xn = x.npu().requires_grad_()
    out = torch.gather(xn, dim, index.npu(), sparse_grad=True)
    out.backward(grad_out.npu())
    g = xn.grad
    assert g.is_sparse and g.device.type == "npu"
    torch.testing.assert_close(g.to_dense().cpu(), xc.grad)
    torch.testing.assert_close(g.cpu().to_dense(), xc.grad)


def test_duplicate_sparse_indices_add_up_in_to_dense():
    indices = torch.tensor([[0, 2, 0], [1, 1, 1]])
    values = torch.tensor([1.0, 2.0, 3.0])
    s = torch.sparse_coo_tensor(indices.npu(), values.npu(), (3, 2))
    assert s._nnz() == 3 and s.sparse_dim() == 2 and s.dense_dim() == 0
    expected = torch.tensor([[0.0, 4.0], [0.0, 0.0], [0.0, 2.0]])
    torch.testing.assert_close(s.to_dense().cpu(), expected)


def test_embedding_sparse_grad_on_npu():
    weight = torch.randn(6, 3)
    idx = torch.tensor([1, 1, 3, 5])
    e = torch.nn.Embedding.from_pretrained(weight.npu(), freeze=False, sparse=True)
    e(idx.npu()).sum().backward()
    expected = torch.zeros(6, 3)
    expected.index_add_(0, idx, torch.ones(4, 3))
    torch.testing.assert_close(e.weight.grad.to_dense().cpu(), expected)


def test_sparse_ops_not_built_say_so():
    s = torch.sparse_coo_tensor(torch.tensor([[0]]).npu(), torch.tensor([1.0]).npu(), (2,))
    with pytest.raises(NotImplementedError, match="Sparsenpu"):
        s + s


# ---- quantized tensors on npu -------------------------------------------------------------

QTYPES = [torch.qint8, torch.quint8, torch.qint32]


def _quantize_numpy(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, qtype) -> np.ndarray:
    """ATen's affine rule in NumPy: clamp(zero_point + nearbyint(x * float32(1 / scale)))."""
    lo, hi = {torch.qint8: (-128, 127), torch.quint8: (0, 255),
              torch.qint32: (-2 ** 31, 2 ** 31 - 1)}[qtype]
    inv = (np.float32(1) / scale.astype(np.float32)).astype(np.float32)
    r = np.rint(x.astype(np.float32) * inv).astype(np.float64) + zero_point
    return np.clip(r, lo, hi).astype(np.int64)


@pytest.mark.parametrize("qtype", QTYPES)
def test_quantize_per_tensor_on_npu(qtype):
    x = torch.randn(3, 4, 5) * 3
    scale, zp = 0.05, (10 if qtype != torch.quint8 else 128)
    q = torch.quantize_per_tensor(x.npu(), scale, zp, qtype)
    assert q.is_quantized and q.device.type == "npu" and q.dtype == qtype
    assert q.q_scale() == scale and q.q_zero_point() == zp
    expected = _quantize_numpy(x.numpy(), np.array(scale), np.array(zp), qtype)
    np.testing.assert_array_equal(q.int_repr().cpu().numpy().astype(np.int64), expected)
    deq = (expected - zp).astype(np.float32) * np.float32(scale)
    np.testing.assert_allclose(q.dequantize().cpu().numpy(), deq, rtol=1e-6, atol=0)


@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("axis", [0, 2])
def test_quantize_per_channel_on_npu(qtype, axis):
    x = torch.randn(4, 3, 5) * 3
    n = x.shape[axis]
    scales = torch.rand(n) * 0.1 + 0.01
    zps = torch.randint(0, 5, (n,))
    q = torch.quantize_per_channel(x.npu(), scales.npu(), zps.npu(), axis, qtype)
    assert q.qscheme() == torch.per_channel_affine and q.q_per_channel_axis() == axis
    shape = [1, 1, 1]
    shape[axis] = n
    s, z = scales.numpy().reshape(shape), zps.numpy().reshape(shape)
    expected = _quantize_numpy(x.numpy(), s, z, qtype)
    np.testing.assert_array_equal(q.int_repr().cpu().numpy().astype(np.int64), expected)
    deq = (expected - z).astype(np.float32) * s.astype(np.float32)
    np.testing.assert_allclose(q.dequantize().cpu().numpy(), deq, rtol=1e-6, atol=0)


def test_quantize_refuses_non_quantized_dtypes_and_bad_scales():
    with pytest.raises(RuntimeError, match="dtype must be torch.qint8"):
        torch.quantize_per_tensor(torch.randn(3).npu(), 0.1, 0, torch.int8)
    with pytest.raises(RuntimeError, match="one scale per channel"):
        torch.quantize_per_channel(torch.randn(3, 4).npu(), torch.ones(3).npu(),
                                   torch.zeros(4, dtype=torch.long).npu(), 1, torch.qint8)


def test_quantized_ops_not_built_say_so():
    q = torch.quantize_per_tensor(torch.randn(3).npu(), 0.1, 0, torch.qint8)
    with pytest.raises(NotImplementedError, match="Quantizednpu"):
        torch.ops.aten.relu(q)


# ---- assertRtolEqual compares in bounded chunks ----------------------------------------------

def test_assert_rtol_equal_chunks_give_the_whole_array_rule(monkeypatch):
    from torch_npu.testing.testcase import TestCase

    class Probe(TestCase):
        def runTest(self):
            pass

    case = Probe()
    monkeypatch.setattr(Probe, "_RTOL_CHUNK", 7)  # many chunks for 1000 elements
    x = np.ones(1000, np.float32)
    y = x.copy()
    y[[3, 500]] = 2.0  # 2 bad elements, in different chunks
    case.assertRtolEqual(x, y, prec=2e-3)  # 2 <= 1000 * 2e-3 allowed
    with pytest.raises(AssertionError, match="max abs diff 1.0"):
        case.assertRtolEqual(x, y, prec=1e-3)  # 2 > 1 allowed, found across chunks
    z = x.copy()
    z[999] = np.nan  # only in the last chunk
    with pytest.raises(AssertionError, match="NaNs"):
        case.assertRtolEqual(x, z)
    case.assertRtolEqual(z, z.copy())


# ---- pack_padded_sequence ---------------------------------------------------------------------

def test_pack_padded_sequence_on_npu_matches_the_cpu_and_wants_cpu_lengths():
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    x = torch.randn(6, 3, 2)
    lengths = torch.tensor([6, 5, 3])
    packed = pack_padded_sequence(x.npu(), lengths)
    expected = pack_padded_sequence(x, lengths)
    torch.testing.assert_close(packed.data.cpu(), expected.data)
    assert torch.equal(packed.batch_sizes, expected.batch_sizes)
    padded, out_lengths = pad_packed_sequence(packed)
    torch.testing.assert_close(padded.cpu(), pad_packed_sequence(expected)[0])
    with pytest.raises(RuntimeError, match="'lengths' argument should be a CPU tensor, but got npu"):
        torch._pack_padded_sequence(x.npu(), lengths.npu(), False)


def test_quantize_takes_half_and_non_contiguous_inputs():
    x = (torch.randn(5, 4) * 3).t()  # non-contiguous
    q = torch.quantize_per_channel(x.npu(), torch.full((5,), 0.05).npu(),
                                   torch.zeros(5, dtype=torch.long).npu(), 1, torch.qint8)
    expected = _quantize_numpy(x.numpy(), np.full((1, 5), 0.05), np.zeros((1, 5)), torch.qint8)
    np.testing.assert_array_equal(q.int_repr().cpu().numpy().astype(np.int64), expected)
    h = torch.randn(3, 4).half()
    qh = torch.quantize_per_tensor(h.npu(), 0.02, 7, torch.quint8)
    expected = _quantize_numpy(h.float().numpy(), np.array(0.02), np.array(7), torch.quint8)
    np.testing.assert_array_equal(qh.int_repr().cpu().numpy().astype(np.int64), expected)
