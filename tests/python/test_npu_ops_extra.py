"""More of torch_npu's npu_* operators (torch_npu/_utility_ops.py, adapter/ops/SignBits.cpp,
the schemas in adapter/ops/NpuLibraryExtra.cpp) against independent references: NumPy models
of the documented definitions, float64 computations, autograd on the CPU device; and their
errors for bad input."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import torch_npu

torch.manual_seed(0)


def npu(t):
    return t.to("npu")


# ---- renorm backward: autograd of torch.renorm in float64 on the CPU --------------------------

@pytest.mark.parametrize("p,dim,maxnorm", [(2.0, 0, 1.0), (1.0, 1, 0.5), (3.0, -1, 0.8),
                                           (0.5, 0, 1.0), (2.0, 0, 100.0)])
def test_renorm_backward_matches_cpu_autograd(p, dim, maxnorm):
    x = torch.randn(4, 6, 3, dtype=torch.float64) + 0.1
    g = torch.randn(4, 6, 3, dtype=torch.float64)
    xr = x.clone().requires_grad_(True)
    torch.renorm(xr, p, dim, maxnorm).backward(g)
    got = torch_npu.npu_renorm_backward(npu(g.float()), npu(x.float()), p, dim, maxnorm)
    assert got.dtype == torch.float32 and got.device.type == "npu"
    torch.testing.assert_close(got.cpu(), xr.grad.float(), rtol=1e-4, atol=1e-5)


def test_renorm_backward_half_keeps_dtype_and_bad_input():
    x, g = torch.randn(4, 8), torch.randn(4, 8)
    xr = x.double().requires_grad_(True)
    torch.renorm(xr, 2.0, 0, 1.0).backward(g.double())
    got = torch_npu.npu_renorm_backward(npu(g.half()), npu(x.half()), 2.0, 0, 1.0)
    assert got.dtype == torch.float16
    torch.testing.assert_close(got.cpu().float(), xr.grad.float(), rtol=1e-2, atol=1e-2)
    with pytest.raises(ValueError, match="grad has shape"):
        torch_npu.npu_renorm_backward(npu(g[:2]), npu(x), 2.0, 0, 1.0)
    with pytest.raises(IndexError, match="dim 5"):
        torch_npu.npu_renorm_backward(npu(g), npu(x), 2.0, 5, 1.0)


# ---- npu_indexing (StridedSlice) vs NumPy slicing -----------------------------------------------

def test_indexing_is_strided_slice():
    a = np.arange(5 * 6 * 7).reshape(5, 6, 7).astype(np.int32)
    t = npu(torch.from_numpy(a))
    got = torch_npu.npu_indexing(t, [1, 0, -5], [4, 6, 7], [2, 3, 1])
    np.testing.assert_array_equal(got.cpu().numpy(), a[1:4:2, 0:6:3, -5:7:1])
    # begin_mask on dim 0, end_mask on dim 1, shrink dim 2 at index 3
    got = torch_npu.npu_indexing(t, [3, 2, 3], [0, 0, 4], [1, 2, 1], begin_mask=1, end_mask=2,
                                 shrink_axis_mask=4)
    np.testing.assert_array_equal(got.cpu().numpy(), a[0:0:1, 2::2, 3])
    got = torch_npu.npu_indexing(t, [0, 0], [2, 2], [1, 1])
    np.testing.assert_array_equal(got.cpu().numpy(), a[:2, :2])
    with pytest.raises(ValueError, match="non-zero"):
        torch_npu.npu_indexing(t, [0], [2], [0])
    with pytest.raises(NotImplementedError, match="negative strides"):
        torch_npu.npu_indexing(t, [0], [2], [-1])
    with pytest.raises(NotImplementedError, match="ellipsis_mask"):
        torch_npu.npu_indexing(t, [0], [2], [1], ellipsis_mask=1)


# ---- pad, stride_add, masked_fill_range ---------------------------------------------------

def test_pad_pairs_from_dimension_zero():
    a = np.random.rand(2, 3).astype(np.float32)
    got = torch_npu.npu_pad(npu(torch.from_numpy(a)), [1, 0, 2, 3])
    np.testing.assert_array_equal(got.cpu().numpy(), np.pad(a, [(1, 0), (2, 3)]))
    with pytest.raises(ValueError, match="before, after"):
        torch_npu.npu_pad(npu(torch.from_numpy(a)), [1, 1])


def test_stride_add_blocks():
    x1 = torch.randn(2, 4, 3, 3, 16)
    x2 = torch.randn(2, 3, 3, 3, 16)
    got = torch_npu.npu_stride_add(npu(x1), npu(x2), 1, 0, 2).cpu()
    assert got.shape == (2, 32, 3, 3, 16)
    torch.testing.assert_close(got[:, :2], x1[:, 1:3] + x2[:, 0:2])
    assert not got[:, 2:].any()
    with pytest.raises(ValueError, match="must lie inside"):
        torch_npu.npu_stride_add(npu(x1), npu(x2), 3, 0, 2)


def _fill_range_model(a, start, end, value, axis):
    out = a.copy()
    for i in range(start.shape[0]):
        for j in range(start.shape[1]):
            for k in range(start[i, j], end[i, j]):
                if a.ndim >= 2 and axis == a.ndim - 1:
                    out[j, ..., k] = value[i]
                else:
                    idx = [slice(None)] * a.ndim
                    idx[axis] = k
                    out[tuple(idx)] = value[i]
    return out


@pytest.mark.parametrize("shape,axis", [((4, 5, 9), 2), ((4, 9), 1), ((6, 4, 3), 0), ((9,), 0)])
def test_masked_fill_range_matches_loop_model(shape, axis):
    a = np.random.rand(*shape).astype(np.float32)
    batch = shape[0] if len(shape) >= 2 and axis == len(shape) - 1 else 3
    start = np.random.randint(0, shape[axis], (2, batch)).astype(np.int32)
    end = np.minimum(start + np.random.randint(0, 4, start.shape), shape[axis]).astype(np.int32)
    value = np.array([-1.0, -2.0], dtype=np.float32)
    got = torch_npu.npu_masked_fill_range(npu(torch.from_numpy(a)), npu(torch.from_numpy(start)),
                                          npu(torch.from_numpy(end)),
                                          npu(torch.from_numpy(value)), axis)
    np.testing.assert_array_equal(got.cpu().numpy(), _fill_range_model(a, start, end, value, axis))


def test_masked_fill_range_bad_input():
    a = npu(torch.zeros(4, 5))
    with pytest.raises(TypeError, match="int32"):
        torch_npu.npu_masked_fill_range(a, npu(torch.zeros(1, 4)), npu(torch.ones(1, 4)),
                                        npu(torch.ones(1)), 1)
    with pytest.raises(ValueError, match="rows"):
        s = npu(torch.zeros(1, 3, dtype=torch.int32))
        torch_npu.npu_masked_fill_range(a, s, s + 1, npu(torch.ones(1)), 1)


# ---- sign bits: NumPy's packbits / unpackbits ----------------------------------------------

@pytest.mark.parametrize("n,size,dtype", [(17, 1, np.float16), (33, 1, np.float32),
                                          (16, 2, np.float32), (8, 1, np.float32)])
def test_sign_bits_pack_is_numpy_packbits(n, size, dtype):
    a = np.random.uniform(-10, 10, n).astype(dtype)
    a[0] = 0.0
    got = torch_npu.npu_sign_bits_pack(npu(torch.from_numpy(a)), size)
    ref = np.packbits(a >= 0, bitorder="little").reshape(size, -1)
    assert got.dtype == torch.uint8
    np.testing.assert_array_equal(got.cpu().numpy(), ref)


def test_sign_bits_unpack_is_numpy_unpackbits():
    a = np.random.randint(0, 256, 12).astype(np.uint8)
    for dtype in (torch.float16, torch.float32):
        got = torch_npu.npu_sign_bits_unpack(npu(torch.from_numpy(a)), 3, dtype)
        ref = (np.unpackbits(a, bitorder="little").astype(np.float32) * 2 - 1).reshape(3, -1)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got.cpu().float().numpy(), ref)


def test_sign_bits_bad_input():
    with pytest.raises(RuntimeError, match="do not split"):
        torch_npu.npu_sign_bits_pack(npu(torch.randn(17)), 2)
    with pytest.raises(RuntimeError, match="float32 or float16"):
        torch_npu.npu_sign_bits_pack(npu(torch.arange(8)), 1)
    with pytest.raises(RuntimeError, match="uint8"):
        torch_npu.npu_sign_bits_unpack(npu(torch.randn(8)), 1, torch.float32)


# ---- optimizer steps: float64 NumPy models ----------------------------------------------------

@pytest.mark.parametrize("nesterov", [False, True])
def test_apply_adam_updates_state_in_place(nesterov):
    var, m, v, g = (np.random.rand(3, 5) + 0.1 for _ in range(4))
    b1p, b2p, lr, b1, b2, eps = 0.9, 0.8, 0.01, 0.9, 0.99, 1e-6
    m_t = b1 * m + (1 - b1) * g
    v_t = b2 * v + (1 - b2) * g * g
    lr_t = lr * math.sqrt(1 - b2p) / (1 - b1p)
    step = b1 * m_t + (1 - b1) * g if nesterov else m_t
    var_t = var - lr_t * step / (eps + np.sqrt(v_t))
    state = [npu(torch.from_numpy(t).float()) for t in (var, m, v)]
    out = torch_npu.npu_apply_adam(b1p, b2p, lr, b1, b2, eps, npu(torch.from_numpy(g).float()),
                                   False, nesterov, out=tuple(state))
    for got, st, ref in zip(out, state, (var_t, m_t, v_t)):
        assert got.data_ptr() == st.data_ptr()
        np.testing.assert_allclose(st.cpu().numpy(), ref, rtol=1e-5)
    with pytest.raises(ValueError, match="out="):
        torch_npu.npu_apply_adam(b1p, b2p, lr, b1, b2, eps, state[0], False, False)


@pytest.mark.parametrize("maximize,amsgrad", [(False, False), (True, False), (False, True)])
def test_apply_adam_w_matches_model(maximize, amsgrad):
    var, m, v, g, mx = (np.random.rand(4, 3) + 0.1 for _ in range(5))
    b1p, b2p, lr, wd, b1, b2, eps = 0.5, 0.7, 0.05, 0.01, 0.9, 0.95, 1e-4
    gt = -g if maximize else g
    m_t = m * b1 + (1 - b1) * gt
    v_t = v * b2 + (1 - b2) * gt * gt
    vh = np.maximum(mx, v_t) if amsgrad else v_t
    var_t = var * (1 - lr * wd) - lr * m_t / (1 - b1p * b1) / (np.sqrt(vh / (1 - b2p * b2)) + eps)
    state = [npu(torch.from_numpy(t).float()) for t in (var, m, v)]
    torch_npu.npu_apply_adam_w(b1p, b2p, lr, wd, b1, b2, eps, npu(torch.from_numpy(g).float()),
                               npu(torch.from_numpy(mx).float()) if amsgrad else None, amsgrad,
                               maximize, out=tuple(state))
    for st, ref in zip(state, (var_t, m_t, v_t)):
        np.testing.assert_allclose(st.cpu().numpy(), ref, rtol=1e-5)


# ---- dropouts --------------------------------------------------------------------------------

def test_dropout_with_add_softmax_and_its_gradient():
    x = torch.randn(2, 3, 8)
    x1 = torch.randn(2, 3, 8)
    xs = npu(x).requires_grad_(True)
    mask, soft, out = torch_npu.npu_dropout_with_add_softmax(xs, npu(x1), 0.5, 0.0, -1)
    ref_x = x.double().requires_grad_(True)
    ref = torch.softmax(x1.double() + 0.5 * ref_x, -1)
    torch.testing.assert_close(soft.cpu().double(), ref, rtol=1e-5, atol=1e-6)
    assert mask.dtype == torch.uint8 and bool((mask == 1).all())
    w = torch.randn(2, 3, 8)
    (out * npu(w)).sum().backward()
    (ref * w.double()).sum().backward()
    torch.testing.assert_close(xs.grad.cpu().double(), ref_x.grad, rtol=1e-4, atol=1e-6)
    # with drops: kept elements are scaled by 1 / (1 - p), the others are zero
    mask, soft, out = torch_npu.npu_dropout_with_add_softmax(npu(x), npu(x1), 0.5, 0.25, -1)
    m = mask.cpu().bool()
    torch.testing.assert_close(out.cpu()[m], soft.cpu()[m] / 0.75)
    assert not out.cpu()[~m].any()
    with pytest.raises(ValueError, match="prob"):
        torch_npu.npu_dropout_with_add_softmax(npu(x), npu(x1), 0.5, 1.5, -1)


def test_byte_mask_dropouts_and_npu_dropout():
    from torch_npu.contrib.function import npu_functional
    from torch_npu.contrib.module.npu_modules import DropoutWithByteMask

    x = npu(torch.rand(64, 32) + 1.0)
    for out in (DropoutWithByteMask(p=0.3)(x), npu_functional.dropout_with_byte_mask(x, 0.3),
                torch_npu.dropout_with_byte_mask(x, p=0.3, train=True)):
        kept = out.cpu() != 0
        torch.testing.assert_close(out.cpu()[kept], x.cpu()[kept] / 0.7)
        assert 0.5 < kept.float().mean() < 0.9
    assert torch.equal(torch_npu.dropout_with_byte_mask(x, 0.3, False).cpu(), x.cpu())
    out, mask = torch_npu._npu_dropout(x, 0.3)
    assert mask.dtype == torch.uint8 and mask.numel() == math.ceil(x.numel() / 128) * 16
    bits = np.unpackbits(mask.cpu().numpy(), bitorder="little")[:x.numel()].astype(bool)
    np.testing.assert_array_equal(bits, (out.cpu() != 0).reshape(-1).numpy())


# ---- IFMR: a NumPy model of CANN's search ------------------------------------------------------

def _ifmr_model(x, with_offset, lo_p=0.999999, hi_p=0.999999, start=0.7, end=1.3, step=0.01):
    x = x.astype(np.float32)
    mn, mx = x.min(), x.max()
    bins, _ = np.histogram(x, 128)
    cdf = np.cumsum(bins).astype(np.float32) / np.float32(x.size)
    max_init = np.float32((cdf < np.float32(hi_p)).sum()) / 128 * (mx - mn) + mn
    min_init = np.float32((cdf < np.float32(1 - lo_p)).sum()) / 128 * (mx - mn) + mn
    steps = np.arange(start, end, step, dtype=np.float32)
    if with_offset:
        max_init, min_init = max(max_init, np.float32(0)), min(min_init, np.float32(0))
        scale = (max_init * steps - min_init) / np.float32(255)
        scale = np.where(scale < 1.192092896e-07, 1, scale).astype(np.float32)
        offset = -(np.round(min_init / scale) + 128)
    else:
        scale = max(abs(max_init), abs(min_init)) * steps / np.float32(127)
        offset = np.zeros_like(scale)
    losses = [np.sum(np.square((np.clip(np.round(x / s) + o, -128, 127) - o) * s - x))
              for s, o in zip(scale, offset)]
    best = int(np.argmin(losses))
    return scale[best], offset[best]


@pytest.mark.parametrize("with_offset", [True, False])
def test_ifmr_matches_numpy_search(with_offset):
    x = np.random.uniform(-1, 1, (6, 7)).astype(np.float32)
    t = npu(torch.from_numpy(x))
    hist = torch.histc(torch.from_numpy(x), 128, float(x.min()), float(x.max()))
    scale, offset = torch_npu.npu_ifmr(t, t.min().reshape(1), t.max().reshape(1),
                                       npu(hist.cumsum(0).int()), 0.999999, 0.999999, 0.7,
                                       1.3, 0.01, with_offset)
    ref_scale, ref_offset = _ifmr_model(x, with_offset)
    assert scale.shape == (1,) and scale.dtype == torch.float32
    assert abs(scale.item() - ref_scale) <= 1e-5 * ref_scale
    assert offset.item() == ref_offset


# ---- quantised RMS norm, float status ------------------------------------------------------------

def test_quant_rms_norm_writes_int8():
    x = torch.randn(3, 2, 16).half()
    gamma, beta = torch.randn(16).half(), torch.randn(16).half()
    y = npu(torch.zeros(3, 2, 16, dtype=torch.int8))
    torch_npu._npu_quant_rms_norm(npu(x), npu(gamma), npu(beta), npu(torch.tensor([0.25])),
                                  npu(torch.tensor([3], dtype=torch.int8)), y, eps=1e-5)
    xd = x.double()
    z = xd / torch.sqrt(xd.square().mean(-1, keepdim=True) + 1e-5) * gamma.double() + beta.double()
    ref = torch.round(z / 0.25 + 3).clamp(-128, 127).to(torch.int8)
    assert (y.cpu().int() - ref.int()).abs().max() <= 1  # float32 vs float64 rounding ties
    with pytest.raises(ValueError, match="int8"):
        torch_npu._npu_quant_rms_norm(npu(x), npu(gamma), npu(beta), npu(torch.tensor([0.25])),
                                      npu(torch.tensor([3], dtype=torch.int8)), npu(x))


def test_alloc_float_status_is_eight_zeros():
    out = torch_npu.npu_alloc_float_status(npu(torch.randn(2, 3)))
    assert out.device.type == "npu" and out.dtype == torch.float32
    assert torch.equal(out.cpu(), torch.zeros(8))


# ---- vocabulary-parallel cross entropy: against F.cross_entropy in float64 -------------------

def test_fused_linear_cross_entropy_forward_and_backward():
    b, h, v, start, end = 10, 6, 12, 0, 12
    x, w = torch.randn(b, h), torch.randn(v, h)
    target = torch.randint(0, v, (b,), dtype=torch.int32)
    target[0] = 20  # outside the slice: masked
    lmax, sexp, pred, tmask, mt, logits = torch_npu.npu_fused_linear_online_max_sum(
        npu(x), npu(w), npu(target), start, end, return_logits=True)
    ref_logits = x.double() @ w.double().t()
    torch.testing.assert_close(logits.cpu().double(), ref_logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lmax.cpu().double(), ref_logits.max(-1).values)
    masked = (target < start) | (target >= end)
    bits = np.unpackbits(tmask.cpu().numpy(), bitorder="little")
    np.testing.assert_array_equal(bits[:b].astype(bool), masked.numpy())
    assert bits[b:].all()  # padding bits are set
    assert mt.dtype == torch.int32 and mt[0].item() == 0
    loss, softmax = torch_npu.npu_fused_cross_entropy_loss_with_max_sum(
        lmax, sexp, pred, vocab_parallel_logits=logits.float())
    # unmasked rows: the loss is the cross entropy of the full vocabulary
    ce = F.cross_entropy(ref_logits[1:], target[1:].long(), reduction="none")
    torch.testing.assert_close(loss.cpu()[1:].double(), ce, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(softmax.cpu().double(), torch.softmax(ref_logits, -1),
                               rtol=1e-4, atol=1e-5)
    # backward: d loss / d input and d weight from autograd of the float64 model
    grad = torch.randn(b)
    xr, wr = x.double().requires_grad_(True), w.double().requires_grad_(True)
    lg = xr @ wr.t()
    keep = (~masked).double()
    model = torch.logsumexp(lg, -1) - lg.gather(1, mt.cpu().long().unsqueeze(1)).squeeze(1) * keep
    (model * grad.double()).sum().backward()
    for kwargs in ({"softmax": softmax}, {"logits_max": lmax, "sum_exp_logits": sexp}):
        dx, dw = torch_npu.npu_fused_linear_cross_entropy_loss_with_max_sum_backward(
            npu(grad), npu(x), npu(w), tmask, mt, **kwargs)
        torch.testing.assert_close(dx.cpu().double(), xr.grad, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(dw.cpu().double(), wr.grad, rtol=1e-4, atol=1e-4)
    out = torch_npu.npu_fused_linear_online_max_sum(npu(x), npu(w), npu(target), 0, 6)
    assert out[5] is None
    with pytest.raises(NotImplementedError, match="label_smoothing"):
        torch_npu.npu_fused_cross_entropy_loss_with_max_sum(lmax, sexp, pred, 0.1)
    with pytest.raises(ValueError, match="share H"):
        torch_npu.npu_fused_linear_online_max_sum(npu(x), npu(w[:, :3]), npu(target), 0, 6)


# ---- attention entry points, formats, options --------------------------------------------------

def test_prompt_and_incre_flash_attention_match_float64_attention():
    q = torch.randn(1, 2, 5, 8)
    k, v = torch.randn(1, 2, 7, 8), torch.randn(1, 2, 7, 8)
    ref = torch.softmax(q.double() @ k.double().transpose(-1, -2) * 0.3, -1) @ v.double()
    got = torch_npu.npu_prompt_flash_attention(npu(q), npu(k), npu(v), num_heads=2,
                                               input_layout="BNSD", scale_value=0.3,
                                               pre_tokens=65535, next_tokens=65535)
    torch.testing.assert_close(got.cpu().double(), ref, rtol=1e-4, atol=1e-5)
    bsh = lambda t: t.transpose(1, 2).reshape(1, t.shape[2], -1)  # noqa: E731
    got = torch_npu.npu_incre_flash_attention(npu(bsh(q[:, :, :1])), npu(bsh(k)), npu(bsh(v)),
                                              num_heads=2, input_layout="BSH", scale_value=0.3)
    torch.testing.assert_close(got.cpu().double(), bsh(ref[:, :, :1]), rtol=1e-4, atol=1e-5)


def test_format_cast_to_a_tensors_format_and_out_of_private_formats():
    a = npu(torch.randn(2, 2, 4, 4))
    nz = torch_npu.npu_format_cast(npu(torch.randn(3, 4)), torch_npu.Format.FRACTAL_NZ)
    assert torch_npu.get_npu_format(torch_npu.npu_format_cast(a, nz)) == 29
    five_hd = torch_npu.npu_format_cast(a, 3)
    back = torch_npu.npu_format_cast(five_hd, torch_npu.Format.ND)
    assert torch_npu.get_npu_format(back) == torch_npu.Format.NCHW  # 4-d ND is stored NCHW
    assert torch.equal(back.cpu(), a.cpu())
    assert torch_npu.get_npu_format(torch_npu.npu_format_cast(a, 2)) == 2  # base to base
    b = torch_npu.npu_format_cast(npu(torch.randn(2, 2, 2, 2, 2)), 33)
    assert torch_npu.get_npu_format(torch_npu.npu_format_cast(b, 2)) == 2


def test_npu_get_option_reads_allow_internal_format():
    old = torch.npu.config.allow_internal_format
    try:
        torch.npu.config.allow_internal_format = True
        assert torch_npu._C._npu_getOption("ALLOW_INTERNAL_FORMAT") == b"enable"
        torch.npu.config.allow_internal_format = False
        assert torch_npu._C._npu_getOption("ALLOW_INTERNAL_FORMAT") == b"disable"
    finally:
        torch.npu.config.allow_internal_format = old
    assert torch_npu._C._npu_getOption("NO_SUCH_OPTION") is None


def test_fast_gelu_and_silu_inplace():
    x = torch.randn(5, 7)
    ref = x / (1 + torch.exp(-1.702 * x.abs())) * torch.exp(0.851 * (x - x.abs()))
    torch.testing.assert_close(torch_npu.npu_fast_gelu(npu(x)).cpu(), ref)
    t = npu(x.clone())
    assert torch_npu.npu_silu_(t) is t
    torch.testing.assert_close(t.cpu(), x * torch.sigmoid(x))


def test_multi_head_attention_matches_float64_model_and_reuses_the_mask():
    b, heads, d, src, tgt = 2, 3, 4, 5, 6
    e = heads * d
    q_in, k_in, v_in = torch.randn(b * tgt, e), torch.randn(b * src, e), torch.randn(b * src, e)
    ws = [torch.randn(e, e) * 0.3 for _ in range(4)]
    bs = [torch.randn(e) * 0.1 for _ in range(4)]
    mask = torch.randn(b, heads, tgt, src)
    out = torch_npu.npu_multi_head_attention(
        npu(q_in), npu(k_in), npu(v_in), *(npu(w) for w in ws[:3]), npu(mask), npu(ws[3]),
        *(npu(x) for x in bs), None, heads, d, src, tgt, 0.0, True)
    y, drop_mask = out[0], out[1]

    def heads_of(t, n):
        return t.reshape(b, n, heads, d).permute(0, 2, 1, 3)

    dd = [w.double() for w in ws]
    bb = [x.double() for x in bs]
    q = heads_of((q_in.double() @ dd[0].t() + bb[0]) / math.sqrt(d), tgt)
    k = heads_of(k_in.double() @ dd[1].t() + bb[1], src)
    v = heads_of(v_in.double() @ dd[2].t() + bb[2], src)
    p = torch.softmax(q @ k.transpose(-1, -2) + mask.double(), -1)
    ctx = (p @ v).permute(0, 2, 1, 3).reshape(b * tgt, e)
    torch.testing.assert_close(y.cpu().double(), ctx @ dd[3].t() + bb[3], rtol=1e-4, atol=1e-4)
    assert drop_mask.dtype == torch.uint8
    # npu_dropout_do_mask applies _npu_dropout's bit mask again: the same elements survive
    x = npu(torch.rand(300) + 1)
    dropped, bits = torch_npu._npu_dropout(x, 0.4)
    again, _ = torch_npu.npu_dropout_do_mask(x, bits, 0.4)
    torch.testing.assert_close(again.cpu(), dropped.cpu())
    with pytest.raises(ValueError, match="bit mask"):
        torch_npu.npu_dropout_do_mask(x, bits[:3], 0.4)


def test_float_status_register_ops_refuse_clearly():
    x = npu(torch.randn(3))
    for op in (torch_npu.npu_get_float_status, torch_npu.npu_clear_float_status):
        with pytest.raises(NotImplementedError, match="overflow status register"):
            op(x)


def test_rtol_compare_in_blocks_sees_every_block():
    from torch_npu.testing.testcase import TestCase

    n = TestCase._RTOL_CHUNK + 1000
    x = np.ones(n, dtype=np.float32)
    y = x.copy()
    y[-600:] = 2.0  # all in the last block; more than n * 1e-4 elements off
    tc = TestCase()
    with pytest.raises(AssertionError, match="max abs diff 1.0"):
        tc.assertRtolEqual(x, y)
    y[-600:] = 1.00001
    tc.assertRtolEqual(x, y)
