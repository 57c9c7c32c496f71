"""torch_npu's fused LLM ops on npu against the CPU composition of aten ops they replace.

Each op and its gradient: float32 tight, float16 / bfloat16 looser. npu_fusion_attention in
every layout and sparse_mode (0-8), GQA, varlen (TND), dropout replayed from seed / offset (and
keep_prob 0), the position bias pse with its gradient; SDPA on
npu (the fused backend) against the CPU; peak memory of attention at S = 4096 is O(S).
"""

import math

import pytest
import torch
import torch.nn.functional as F

import torch_npu

TOL = {torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def close(actual, expected, dtype, scale=1.0):
    """Max error relative to the largest reference value (sums are reordered)."""
    a, e = actual.detach().cpu().double(), expected.detach().cpu().double()
    err = (a - e).abs().max().item() / max(e.abs().max().item(), 1e-6)
    assert err <= TOL[dtype] * scale, f"max relative error {err:.3g} > {TOL[dtype] * scale:.3g}"


def check_grads(out, eout, npu_leaves, ref_leaves, dtype=torch.float32):
    """An npu result against its float64 reference: the values, then, after one backward of the
    same random output gradient through both, each leaf's gradient (shape and values).
    Returns that output gradient."""
    close(out, eout, dtype)
    g = torch.randn(eout.shape).to(dtype)
    out.backward(g.npu())
    eout.backward(g.double())
    for got, want in zip(npu_leaves, ref_leaves):
        assert got.grad.shape == want.grad.shape
        close(got.grad, want.grad, dtype, 4)
    return g


def leaves(*ts, dtype=torch.float32):
    """The same values as CPU float64 leaves (the reference) and npu leaves of `dtype`."""
    cpu = [t.to(dtype).double().requires_grad_() for t in ts]
    npu = [t.to(dtype).npu().requires_grad_() for t in ts]
    return cpu, npu


# ---- rms norm / add_rms_norm -----------------------------------------------------------------

def rms_ref(x, gamma, eps=1e-6):
    dims = tuple(range(x.dim() - gamma.dim(), x.dim()))
    rstd = torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps)
    return x * rstd * gamma, rstd


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("gamma_shape", [(48,), (6, 48)])
def test_rms_norm_forward_backward(dtype, gamma_shape):
    (x, g), (xn, gn) = leaves(torch.randn(3, 6, 48), torch.rand(gamma_shape) + 0.5, dtype=dtype)
    y, rstd = torch_npu.npu_rms_norm(xn, gn, epsilon=1e-6)
    ey, erstd = rms_ref(x, g)
    assert y.dtype == dtype and rstd.dtype == torch.float32 and rstd.shape == erstd.shape
    close(y, ey, dtype)
    close(rstd, erstd, torch.float32, 10)
    dy = torch.randn(3, 6, 48).to(dtype)
    y.backward(dy.npu())
    ey.backward(dy.double())
    close(xn.grad, x.grad, dtype, 4)
    close(gn.grad, g.grad, dtype, 4)


def test_rms_norm_default_epsilon_and_ops_namespace():
    x = torch.full((2, 4), 1e-4)
    y, _ = torch.ops.npu.npu_rms_norm(x.npu(), torch.ones(4).npu())
    close(y, rms_ref(x.double(), torch.ones(4, dtype=torch.float64), 1e-6)[0], torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_rms_norm(dtype):
    (a, b, g), (an, bn, gn) = leaves(torch.randn(4, 64), torch.randn(4, 64), torch.rand(64) + 0.5,
                                     dtype=dtype)
    y, rstd, x = torch_npu.npu_add_rms_norm(an, bn, gn, 1e-6)
    # x is x1 + x2 in the input dtype, and the norm is of that rounded sum.
    ex = (a.to(dtype) + b.to(dtype)).double()
    ey, erstd = rms_ref(ex, g)
    assert torch.equal(x.cpu(), (a.detach().to(dtype) + b.detach().to(dtype)))
    close(y, ey, dtype)
    close(rstd, erstd, torch.float32, 10)
    dy, dx = torch.randn(4, 64), torch.randn(4, 64)
    torch.autograd.backward([y, x], [dy.to(dtype).npu(), dx.to(dtype).npu()])
    ey_full, _ = rms_ref(a + b, g)
    torch.autograd.backward([ey_full, a + b], [dy.to(dtype).double(), dx.to(dtype).double()])
    close(an.grad, a.grad, dtype, 4)
    close(bn.grad, b.grad, dtype, 4)
    close(gn.grad, g.grad, dtype, 4)


# ---- rotary ------------------------------------------------------------------------------------

def rotate_ref(x, mode):
    if mode == "half":
        x1, x2 = x.chunk(2, -1)
        return torch.cat([-x2, x1], -1)
    return torch.stack([-x[..., 1::2], x[..., 0::2]], -1).flatten(-2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["half", "interleave"])
def test_rotary_mul_forward_backward(dtype, mode):
    (x, r1, r2), (xn, r1n, r2n) = leaves(torch.randn(2, 7, 3, 16), torch.randn(1, 7, 1, 16),
                                         torch.randn(1, 7, 1, 16), dtype=dtype)
    out = torch_npu.npu_rotary_mul(xn, r1n, r2n, rotary_mode=mode)
    eout = x * r1 + rotate_ref(x, mode) * r2
    check_grads(out, eout, (xn, r1n, r2n), (x, r1, r2), dtype)


def test_rotary_mul_default_mode_is_half():
    x, c, s = torch.randn(1, 4, 2, 8), torch.randn(1, 4, 1, 8), torch.randn(1, 4, 1, 8)
    out = torch_npu.npu_rotary_mul(x.npu(), c.npu(), s.npu())
    close(out, x * c + rotate_ref(x, "half") * s, torch.float32)
    with pytest.raises(RuntimeError, match="rotary_mode must be 'half' or 'interleave'"):
        torch_npu.npu_rotary_mul(x.npu(), c.npu(), s.npu(), rotary_mode="spiral")


@pytest.mark.parametrize("three_d", [False, True])
def test_apply_rotary_pos_emb_bsh_layout(three_d):
    # torch_npu maps 'BSH' to the BSND arrangement: [B, S, N, D] tensors, or [B, S, N * D] ones
    # split into heads of cos's last dim.
    q, k = torch.randn(2, 5, 4, 16), torch.randn(2, 5, 2, 16)
    cos, sin = torch.randn(1, 5, 1, 16), torch.randn(1, 5, 1, 16)
    qn, kn = (q.flatten(2), k.flatten(2)) if three_d else (q, k)
    qn, kn = qn.npu(), kn.npu()
    cn, sn = (cos[:, :, 0], sin[:, :, 0]) if three_d else (cos, sin)
    rq, rk = torch_npu.npu_apply_rotary_pos_emb(qn, kn, cn.npu(), sn.npu(), layout="BSH")
    assert rq.data_ptr() == qn.data_ptr() and rq.shape == qn.shape
    close(qn.view(q.shape), q * cos + rotate_ref(q, "half") * sin, torch.float32)
    close(kn.view(k.shape), k * cos + rotate_ref(k, "half") * sin, torch.float32)
    with pytest.raises(RuntimeError, match="not a multiple of cos's last dim"):
        torch_npu.npu_apply_rotary_pos_emb(torch.randn(2, 5, 20).npu(), kn.flatten(2),
                                           cos[:, :, 0].npu(), sin[:, :, 0].npu(), layout="BSH")


def test_apply_rotary_pos_emb_in_place():
    q, k = torch.randn(2, 5, 4, 16), torch.randn(2, 5, 2, 16)
    cos, sin = torch.randn(1, 5, 1, 16), torch.randn(1, 5, 1, 16)
    qn, kn = q.npu(), k.npu()
    rq, rk = torch_npu.npu_apply_rotary_pos_emb(qn, kn, cos.npu(), sin.npu(), layout="BSND")
    assert rq.data_ptr() == qn.data_ptr() and rk.data_ptr() == kn.data_ptr()
    close(qn, q * cos + rotate_ref(q, "half") * sin, torch.float32)
    close(kn, k * cos + rotate_ref(k, "half") * sin, torch.float32)


# ---- swiglu ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_swiglu_forward_backward(dtype, dim):
    (x,), (xn,) = leaves(torch.randn(6, 10, 12) * 3, dtype=dtype)
    out = torch_npu.npu_swiglu(xn, dim=dim)
    a, b = x.chunk(2, dim)
    eout = F.silu(a) * b
    check_grads(out, eout, (xn,), (x,), dtype)


# ---- flash attention -------------------------------------------------------------------------

def to_bnsd(t, layout, heads):
    if layout == "BNSD":
        return t
    if layout == "BSND":
        return t.transpose(1, 2)
    if layout == "BSH":
        return t.unflatten(2, (heads, -1)).transpose(1, 2)
    if layout == "SBH":
        return t.unflatten(2, (heads, -1)).permute(1, 2, 0, 3)
    raise ValueError(layout)


def from_bnsd(t, layout):
    if layout == "BNSD":
        return t
    if layout == "BSND":
        return t.transpose(1, 2)
    if layout == "BSH":
        return t.transpose(1, 2).flatten(2)
    if layout == "SBH":
        return t.permute(2, 0, 1, 3).flatten(2)
    raise ValueError(layout)


def visible(sq, skv, sparse_mode, pre=2147483647, nxt=2147483647, mask=None):
    """The [Sq, Skv] True-where-attended matrix torch_npu's sparse_mode defines."""
    i = torch.arange(sq)[:, None]
    j = torch.arange(skv)[None, :]
    if sparse_mode == 0:
        vis = torch.ones(sq, skv, dtype=torch.bool) if mask is None else \
            (j - i >= -pre) & (j - i <= nxt)
    elif sparse_mode == 1:
        vis = torch.ones(sq, skv, dtype=torch.bool)
    elif sparse_mode == 2:
        vis = j <= i
    elif sparse_mode == 3:
        vis = j - i <= skv - sq
    else:
        d = j - i - (skv - sq)
        vis = (d >= -pre) & (d <= nxt)
    if mask is not None and sparse_mode in (0, 1):
        vis = vis & ~mask
    return vis


def attention_ref(q, k, v, vis, scale, keep=None, pse=None):
    """q [B, N, Sq, D], k / v [B, Nkv, Skv, D]; vis broadcast to [B, N, Sq, Skv]; pse (torch_npu's
    position bias, added before the scale) broadcast likewise."""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, 1)
    v = v.repeat_interleave(group, 1)
    s = q @ k.transpose(-1, -2)
    if pse is not None:
        s = s + pse
    s = s * scale
    p = s.masked_fill(~vis, float("-inf")).softmax(-1)
    if keep is not None:
        p = p * keep
    return p @ v


COMPRESSED = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)


def run_fa(layout, sparse_mode, dtype=torch.float32, B=2, N=4, Nkv=2, Sq=70, Skv=90, D=32,
           pre=2147483647, nxt=2147483647, with_mask=False):
    torch.manual_seed(0)
    q = torch.randn(B, N, Sq, D)
    k = torch.randn(B, Nkv, Skv, D)
    v = torch.randn(B, Nkv, Skv, D)
    mask = None
    if with_mask:
        mask = torch.rand(B, 1, Sq, Skv) < 0.3
        mask[..., 0] = False  # no fully masked row (the CPU reference would give NaN)
    atten_mask = mask if with_mask else (COMPRESSED if sparse_mode in (2, 3, 4) else None)
    scale = 1 / math.sqrt(D)
    (qc, kc, vc), (qn, kn, vn) = leaves(*(from_bnsd(t, layout) for t in (q, k, v)), dtype=dtype)
    out = torch_npu.npu_fusion_attention(
        qn, kn, vn, N, layout, atten_mask=None if atten_mask is None else atten_mask.npu(),
        scale=scale, pre_tockens=pre, next_tockens=nxt, sparse_mode=sparse_mode)
    assert len(out) == 7
    vis = visible(Sq, Skv, sparse_mode, pre, nxt, mask)
    eout = attention_ref(to_bnsd(qc, layout, N), to_bnsd(kc, layout, Nkv),
                         to_bnsd(vc, layout, Nkv), vis, scale)
    close(out[0], from_bnsd(eout, layout), dtype)
    g = torch.randn(eout.shape).to(dtype)
    out[0].backward(from_bnsd(g, layout).npu())
    from_bnsd(eout, layout).backward(from_bnsd(g.double(), layout))
    for got, want in ((qn, qc), (kn, kc), (vn, vc)):
        close(got.grad, want.grad, dtype, 4)
    return out


@pytest.mark.parametrize("layout", ["BSH", "SBH", "BSND", "BNSD"])
@pytest.mark.parametrize("sparse_mode", [0, 2, 3])
def test_fusion_attention_layouts_and_causal_modes(layout, sparse_mode):
    run_fa(layout, sparse_mode)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fusion_attention_half_dtypes(dtype):
    run_fa("BSND", 3, dtype=dtype)


def test_fusion_attention_outputs():
    out = run_fa("BNSD", 0, B=1, N=2, Nkv=2, Sq=40, Skv=40)
    attn, smax, ssum, softmax_out, seed, offset, numels = out
    assert smax.shape == (1, 2, 40, 8) and ssum.shape == (1, 2, 40, 8)
    assert smax.dtype == torch.float32 and softmax_out.numel() == 0
    assert all(isinstance(x, int) for x in (seed, offset, numels))
    # All 8 copies are the same value; sum is >= 1 (the max term contributes exp(0)).
    assert torch.equal(smax[..., :1].expand_as(smax).cpu(), smax.cpu())
    assert (ssum.cpu() >= 1).all()


@pytest.mark.parametrize("sparse_mode", [0, 1])
def test_fusion_attention_explicit_mask(sparse_mode):
    run_fa("BNSD", sparse_mode, with_mask=True)


def test_fusion_attention_mask_with_pre_next_tokens_mode0():
    run_fa("BSND", 0, with_mask=True, pre=20, nxt=5)


@pytest.mark.parametrize("pre,nxt", [(16, 4), (40, -10)])
def test_fusion_attention_band_mode4(pre, nxt):
    run_fa("BSND", 4, Sq=80, Skv=100, pre=pre, nxt=nxt)


def test_fusion_attention_multi_query():
    run_fa("BSND", 3, N=4, Nkv=1)


def test_fusion_attention_compressed_mask_beyond_2048():
    run_fa("BSND", 3, B=1, N=1, Nkv=1, Sq=2200, Skv=2200, D=16)


def test_fusion_attention_varlen_tnd():
    run_varlen([5, 33, 1, 64], [5, 40, 3, 64], D=32)
    run_varlen([5, 70, 1], [70, 90, 3], D=32)  # sequences past 64 rows: the general path


def run_varlen(lens_q, lens_kv, D, N=4, Nkv=2):
    torch.manual_seed(1)
    q = torch.randn(sum(lens_q), N, D)
    k = torch.randn(sum(lens_kv), Nkv, D)
    v = torch.randn(sum(lens_kv), Nkv, D)
    (qc, kc, vc), (qn, kn, vn) = leaves(q, k, v)
    cu_q = torch.tensor(lens_q).cumsum(0).tolist()
    cu_kv = torch.tensor(lens_kv).cumsum(0).tolist()
    out = torch_npu.npu_fusion_attention(
        qn, kn, vn, N, input_layout="TND", atten_mask=COMPRESSED.npu(), scale=0.2,
        actual_seq_qlen=tuple(cu_q), actual_seq_kvlen=tuple(cu_kv), sparse_mode=3)
    assert out[1].shape == (sum(lens_q), N, 8)
    check_varlen(out[0], (qn, kn, vn), (qc, kc, vc), lens_q, lens_kv,
                 lambda s, lq, lk: visible(lq, lk, 3), 0.2)


def check_varlen(out, npu_leaves, ref_leaves, lens_q, lens_kv, visible_of, scale):
    """A TND (packed) attention output and its gradients against the float64 reference run
    sequence by sequence; visible_of(s, lq, lk) gives sequence s's [lq, lk] visibility."""
    qc, kc, vc = ref_leaves
    pieces, q0, k0 = [], 0, 0
    for s, (lq, lk) in enumerate(zip(lens_q, lens_kv)):
        sl = lambda t, a, n: t[a:a + n].transpose(0, 1)[None]  # noqa: E731
        o = attention_ref(sl(qc, q0, lq), sl(kc, k0, lk), sl(vc, k0, lk),
                          visible_of(s, lq, lk), scale)
        pieces.append(o[0].transpose(0, 1))
        q0, k0 = q0 + lq, k0 + lk
    eout = torch.cat(pieces)
    check_grads(out, eout, npu_leaves, ref_leaves)


def test_fusion_attention_dropout_replays_from_seed_and_offset():
    B, N, S, keep = 1, 2, 64, 0.7
    q, k = torch.randn(B, S, N, S), torch.randn(B, S, N, S)
    eye = torch.eye(S).expand(B, N, S, S).transpose(1, 2).contiguous()  # BSND, V = I
    torch.npu.manual_seed(5)
    p_drop = torch_npu.npu_fusion_attention(q.npu(), k.npu(), eye.npu(), N, "BSND", scale=0.1,
                                            keep_prob=keep)[0].cpu()
    # With V = I the output is the dropped probability matrix: kept entries are p / keep > 0.
    keep_mask = (p_drop != 0).transpose(1, 2)  # [B, N, Sq, Skv]
    assert abs(keep_mask.float().mean().item() - keep) < 0.03
    # Same generator state -> same mask; another seed -> another mask.
    torch.npu.manual_seed(5)
    again = torch_npu.npu_fusion_attention(q.npu(), k.npu(), eye.npu(), N, "BSND", scale=0.1,
                                           keep_prob=keep)
    assert torch.equal(again[0].cpu(), p_drop)
    assert again[3].numel() == 0 and again[6] == B * N * S * S
    torch.npu.manual_seed(6)
    other = torch_npu.npu_fusion_attention(q.npu(), k.npu(), eye.npu(), N, "BSND", scale=0.1,
                                           keep_prob=keep)[0].cpu()
    assert not torch.equal(other, p_drop)
    # Forward + backward with a real V and the same seed against the composition with that mask.
    v = torch.randn(B, S, N, S)
    (qc, kc, vc), (qn, kn, vn) = leaves(q, k, v)
    torch.npu.manual_seed(5)
    out = torch_npu.npu_fusion_attention(qn, kn, vn, N, "BSND", scale=0.1, keep_prob=keep)
    eout = attention_ref(qc.transpose(1, 2), kc.transpose(1, 2), vc.transpose(1, 2),
                         torch.ones(S, S, dtype=torch.bool), 0.1,
                         keep=keep_mask.double() / keep).transpose(1, 2)
    g = check_grads(out[0], eout, (qn, kn, vn), (qc, kc, vc))
    # npu_fusion_attention_grad called directly with the forward's seed / offset agrees.
    dq, dk, dv, _ = torch_npu.npu_fusion_attention_grad(
        qn.detach(), kn.detach(), vn.detach(), g.npu(), N, "BSND", softmax_max=out[1],
        softmax_sum=out[2], attention_in=out[0].detach(), scale_value=0.1, keep_prob=keep,
        seed=out[4], offset=out[5], numels=out[6])
    close(dq, qc.grad, torch.float32, 4)
    close(dv, vc.grad, torch.float32, 4)


def test_fusion_attention_errors_name_the_argument():
    q = torch.randn(1, 4, 2, 8).npu()
    with pytest.raises(RuntimeError, match="input_layout must be one of"):
        torch_npu.npu_fusion_attention(q, q, q, 2, "BHSD")
    with pytest.raises(RuntimeError, match=r"range of \[0,6\].*'TND'"):
        torch_npu.npu_fusion_attention(q, q, q, 2, "BSND", sparse_mode=7)
    with pytest.raises(RuntimeError, match=r"range of \[0,5\) or \(5,8\]"):
        torch_npu.npu_fusion_attention(q[0], q[0], q[0], 2, "TND", sparse_mode=5,
                                       actual_seq_qlen=(4,), actual_seq_kvlen=(4,))
    with pytest.raises(RuntimeError, match="needs prefix"):
        torch_npu.npu_fusion_attention(q, q, q, 2, "BSND", sparse_mode=6, atten_mask=PREFIX_MASK)
    with pytest.raises(RuntimeError, match="keep_prob value must be in range of \\[0, 1\\]"):
        torch_npu.npu_fusion_attention(q, q, q, 2, "BSND", keep_prob=1.5)
    with pytest.raises(NotImplementedError, match="pse with input_layout 'TND'"):
        torch_npu.npu_fusion_attention(q[0], q[0], q[0], 2, "TND", pse=q,
                                       actual_seq_qlen=(4,), actual_seq_kvlen=(4,))
    with pytest.raises(RuntimeError, match="pse of shape"):
        torch_npu.npu_fusion_attention(q, q, q, 2, "BSND", pse=torch.zeros(1, 3, 4, 4).npu())
    long_q = torch.randn(1, 1100, 1, 8).npu()
    with pytest.raises(NotImplementedError, match="alibi-compressed"):
        torch_npu.npu_fusion_attention(long_q, long_q, long_q, 1, "BSND",
                                       pse=torch.zeros(1, 1, 1024, 1100).npu())
    with pytest.raises(RuntimeError, match="actual_seq_qlen"):
        torch_npu.npu_fusion_attention(q[0], q[0], q[0], 2, "TND")
    with pytest.raises(RuntimeError, match="2048 x 2048"):
        torch_npu.npu_fusion_attention(q, q, q, 2, "BSND", sparse_mode=2,
                                       atten_mask=torch.ones(4, 4, dtype=torch.bool).npu())


# ---- pse, prefix (sparse_mode 5 / 6), varlen cuts (7 / 8), keep_prob 0 ------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("pse_shape", ["BNSS", "1NSS", "BN1S", "1N1S"])
@pytest.mark.parametrize("sparse_mode", [0, 3])
def test_fusion_attention_pse_and_its_gradient(dtype, pse_shape, sparse_mode):
    torch.manual_seed(2)
    B, N, Nkv, Sq, Skv, D = 2, 4, 2, 40, 70, 16
    q, k, v = torch.randn(B, Sq, N, D), torch.randn(B, Skv, Nkv, D), torch.randn(B, Skv, Nkv, D)
    shape = (1 if pse_shape[0] == "1" else B, N, 1 if pse_shape[2] == "1" else Sq, Skv)
    pse = torch.randn(shape) * 2
    (qc, kc, vc, pc), (qn, kn, vn, pn) = leaves(q, k, v, pse, dtype=dtype)
    mask = COMPRESSED.npu() if sparse_mode == 3 else None
    out = torch_npu.npu_fusion_attention(qn, kn, vn, N, "BSND", pse=pn, atten_mask=mask,
                                         scale=0.3, sparse_mode=sparse_mode)
    eout = attention_ref(qc.transpose(1, 2), kc.transpose(1, 2), vc.transpose(1, 2),
                         visible(Sq, Skv, sparse_mode), 0.3, pse=pc).transpose(1, 2)
    close(out[0], eout, dtype)
    g = torch.randn(eout.shape).to(dtype)
    out[0].backward(g.npu())
    eout.backward(g.double())
    for got, want in ((qn, qc), (kn, kc), (vn, vc), (pn, pc)):
        assert got.grad.shape == want.grad.shape and got.grad.dtype == dtype
        close(got.grad, want.grad, dtype, 4)
    # The grad op returns dpse in pse's shape (torch_npu's fourth output).
    dq, dk, dv, dpse = torch_npu.npu_fusion_attention_grad(
        qn.detach(), kn.detach(), vn.detach(), g.npu(), N, "BSND", pse=pn.detach(),
        atten_mask=mask, softmax_max=out[1], softmax_sum=out[2], attention_in=out[0].detach(),
        scale_value=0.3, sparse_mode=sparse_mode)
    assert dpse.shape == pse.shape
    close(dpse, pc.grad, dtype, 4)


# sparse_mode 6's compressed mask: a 2048 x 2048 causal triangle over a 1024 x 2048 block whose
# left half is 0 and right half 1.
PREFIX_MASK = torch.cat([COMPRESSED, torch.arange(2048).expand(1024, 2048) >= 1024]).npu()


@pytest.mark.parametrize("sparse_mode", [1, 2, 3, 4, 6])
def test_fusion_attention_without_atten_mask_computes_everything(sparse_mode):
    # torch_npu: with atten_mask None, sparse_mode / pre_tockens / next_tockens take no effect.
    q, k, v = torch.randn(2, 20, 2, 16), torch.randn(2, 30, 2, 16), torch.randn(2, 30, 2, 16)
    out = torch_npu.npu_fusion_attention(q.npu(), k.npu(), v.npu(), 2, "BSND", scale=0.25,
                                         pre_tockens=3, next_tockens=0, prefix=[1, 2],
                                         sparse_mode=sparse_mode)[0]
    e = attention_ref(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                      torch.ones(20, 30, dtype=torch.bool), 0.25).transpose(1, 2)
    close(out, e, torch.float32)


def prefix_visible(sq, skv, prefix):
    """sparse_mode 5 / 6: causal from the bottom-right, or one of the first prefix[b] keys;
    [B, 1, Sq, Skv]."""
    i = torch.arange(sq)[:, None]
    j = torch.arange(skv)[None, :]
    return torch.stack([(j - i <= skv - sq) | (j < n) for n in prefix])[:, None]


@pytest.mark.parametrize("sparse_mode", [5, 6])
@pytest.mark.parametrize("sq,skv", [(60, 60), (30, 90)])
def test_fusion_attention_prefix_modes(sparse_mode, sq, skv):
    torch.manual_seed(3)
    B, N, D, prefix = 3, 2, 16, [0, 20, skv]
    q, k, v = torch.randn(B, N, sq, D), torch.randn(B, N, skv, D), torch.randn(B, N, skv, D)
    vis = prefix_visible(sq, skv, prefix)
    if sparse_mode == 5:  # the full [B, 1, Sq, Skv] mask, True = masked
        mask = ~vis
    else:
        mask = PREFIX_MASK
    (qc, kc, vc), (qn, kn, vn) = leaves(q, k, v)
    out = torch_npu.npu_fusion_attention(qn, kn, vn, N, "BNSD", atten_mask=mask.npu(),
                                         scale=0.25, prefix=prefix, sparse_mode=sparse_mode)
    eout = attention_ref(qc, kc, vc, vis, 0.25)
    check_grads(out[0], eout, (qn, kn, vn), (qc, kc, vc))


@pytest.mark.parametrize("sparse_mode", [6, 7, 8])
def test_fusion_attention_varlen_cut_modes(sparse_mode):
    # A batch whose last (7) / first (8) sequence is a piece of a longer one cut across cards:
    # it gets the band of pre / next tokens around its bottom-right diagonal, the others are
    # causal from the bottom-right (7) / top-left (8). torch_npu's own examples: mode 7, card 1
    # (q lens 3, 2; kv lens 3, 6; pre 6, next -2); mode 8, card 2 (q 3, 5, 4; kv 4, 5, 4; pre 4,
    # next 1); and longer ones.
    torch.manual_seed(5)
    N, D = 2, 16
    if sparse_mode == 7:
        lens_q, lens_kv, pre, nxt = [3, 2, 40, 7], [3, 6, 40, 90], 90, -30
    elif sparse_mode == 8:
        lens_q, lens_kv, pre, nxt = [3, 5, 4, 50], [4, 5, 4, 60], 4, 1
    else:
        lens_q, lens_kv, pre, nxt = [30, 8, 50], [30, 20, 50], 0, 0
    prefix = [5, 12, 0]
    q = torch.randn(sum(lens_q), N, D)
    k = torch.randn(sum(lens_kv), N, D)
    v = torch.randn(sum(lens_kv), N, D)
    (qc, kc, vc), (qn, kn, vn) = leaves(q, k, v)
    cu_q = tuple(torch.tensor(lens_q).cumsum(0).tolist())
    cu_kv = tuple(torch.tensor(lens_kv).cumsum(0).tolist())
    mask = PREFIX_MASK if sparse_mode == 6 else COMPRESSED
    out = torch_npu.npu_fusion_attention(
        qn, kn, vn, N, "TND", atten_mask=mask.npu(), scale=0.25, pre_tockens=pre,
        next_tockens=nxt, actual_seq_qlen=cu_q, actual_seq_kvlen=cu_kv,
        prefix=prefix if sparse_mode == 6 else None, sparse_mode=sparse_mode)
    def visible_of(s, lq, lk):
        i = torch.arange(lq)[:, None]
        j = torch.arange(lk)[None, :]
        d = j - i - (lk - lq)  # distance from the bottom-right diagonal
        if sparse_mode == 6:
            return (d <= 0) | (j < prefix[s])
        if (sparse_mode == 7 and s == len(lens_q) - 1) or (sparse_mode == 8 and s == 0):
            return (d >= -pre) & (d <= nxt)
        return d <= 0 if sparse_mode == 7 else j <= i
    check_varlen(out[0], (qn, kn, vn), (qc, kc, vc), lens_q, lens_kv, visible_of, 0.25)


def test_fusion_attention_keep_prob_zero_drops_everything():
    q, k, v = (torch.randn(2, 30, 4, 16).npu().requires_grad_() for _ in range(3))
    out = torch_npu.npu_fusion_attention(q, k, v, 4, "BSND", scale=0.25, keep_prob=0.0)
    assert torch.count_nonzero(out[0].cpu()) == 0
    assert out[6] == 2 * 4 * 30 * 30  # numels: every score, as for 0 < keep_prob < 1
    # The softmax statistics are those of the undropped scores.
    s = (q.detach().cpu().transpose(1, 2) @ k.detach().cpu().transpose(1, 2).transpose(-1, -2))
    close(out[1][..., 0], (s * 0.25).amax(-1), torch.float32, 10)
    out[0].backward(torch.randn(out[0].shape).npu())
    for t in (q, k, v):
        assert torch.count_nonzero(t.grad.cpu()) == 0
    # SDPA with dropout_p = 1 takes the same path.
    o = F.scaled_dot_product_attention(q.detach().transpose(1, 2), k.detach().transpose(1, 2),
                                       v.detach().transpose(1, 2), dropout_p=1.0)
    assert torch.count_nonzero(o.cpu()) == 0


def _peak_attention_mib(S, D=64):
    q = torch.randn(1, S, 1, D).npu().requires_grad_()
    k = torch.randn(1, S, 1, D).npu().requires_grad_()
    v = torch.randn(1, S, 1, D).npu().requires_grad_()
    mask = COMPRESSED.npu()
    torch.npu.synchronize()
    torch.npu.reset_peak_memory_stats()
    base = torch.npu.memory_allocated()
    out = torch_npu.npu_fusion_attention(q, k, v, 1, "BSND", atten_mask=mask, scale=0.125,
                                         sparse_mode=3)[0]
    out.sum().backward()
    torch.npu.synchronize()
    return (torch.npu.max_memory_allocated() - base) / 2**20


def test_fusion_attention_memory_is_linear_in_s():
    p2k, p4k = _peak_attention_mib(2048), _peak_attention_mib(4096)
    # S x S float32 scores at S = 4096 are 64 MiB; the flash kernel needs a few MiB.
    assert p4k < 8, p4k
    assert p4k < 2.5 * p2k, (p2k, p4k)


# ---- SDPA on npu takes the flash kernel --------------------------------------------------------

@pytest.mark.parametrize("case", ["plain", "causal", "bool_mask", "gqa", "float16"])
def test_sdpa_on_npu_matches_cpu(case):
    torch.manual_seed(2)
    dtype = torch.float16 if case == "float16" else torch.float32
    nkv = 2 if case == "gqa" else 4
    q, k, v = torch.randn(2, 4, 50, 32), torch.randn(2, nkv, 60, 32), torch.randn(2, nkv, 60, 32)
    kw = {}
    if case == "causal":
        kw["is_causal"] = True
    if case == "bool_mask":
        m = torch.rand(2, 1, 50, 60) > 0.3
        m[..., 0] = True
        kw["attn_mask"] = m
    if case == "gqa":
        kw["enable_gqa"] = True
    (qc, kc, vc), (qn, kn, vn) = leaves(q, k, v, dtype=dtype)
    kwn = {a: (b.npu() if isinstance(b, torch.Tensor) else b) for a, b in kw.items()}
    out = F.scaled_dot_product_attention(qn, kn, vn, **kwn)
    assert "FusedAttentionOverrideable" in type(out.grad_fn).__name__
    eout = F.scaled_dot_product_attention(qc, kc, vc, **kw)
    check_grads(out, eout, (qn, kn, vn), (qc, kc, vc), dtype)


def test_sdpa_peak_memory_at_4096_is_o_of_s():
    q, k, v = (torch.randn(1, 1, 4096, 64).npu() for _ in range(3))
    torch.npu.synchronize()
    torch.npu.reset_peak_memory_stats()
    base = torch.npu.memory_allocated()
    F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.npu.synchronize()
    assert (torch.npu.max_memory_allocated() - base) / 2**20 < 8


# ---- inference attention -------------------------------------------------------------------

def test_fused_infer_attention_score_kv_cache():
    torch.manual_seed(3)
    B, N, Nkv, D, cache = 2, 4, 2, 16, 40
    q = torch.randn(B, 1, N * D)  # one new token (decode), BSH
    k = torch.randn(B, cache, Nkv * D)
    v = torch.randn(B, cache, Nkv * D)
    lens = [17, 40]
    out, lse = torch_npu.npu_fused_infer_attention_score(
        q.npu(), k.npu(), v.npu(), num_heads=N, num_key_value_heads=Nkv, scale=0.25,
        input_layout="BSH", actual_seq_lengths_kv=lens, softmax_lse_flag=True)
    for b, n in enumerate(lens):
        qb = q[b:b + 1].unflatten(2, (N, D)).transpose(1, 2)
        kb = k[b:b + 1, :n].unflatten(2, (Nkv, D)).transpose(1, 2)
        vb = v[b:b + 1, :n].unflatten(2, (Nkv, D)).transpose(1, 2)
        e = attention_ref(qb, kb, vb, torch.ones(1, n, dtype=torch.bool), 0.25)
        close(out[b:b + 1], e.transpose(1, 2).flatten(2), torch.float32)
        s = (qb @ kb.repeat_interleave(2, 1).transpose(-1, -2)) * 0.25
        close(lse[b:b + 1], s.logsumexp(-1, keepdim=True), torch.float32, 10)


def test_fused_infer_attention_score_block_table():
    torch.manual_seed(4)
    B, N, D, bs = 2, 2, 8, 4
    blocks = torch.randn(6, bs, N * D), torch.randn(6, bs, N * D)
    table = torch.tensor([[3, 0, 5], [1, 2, 4]], dtype=torch.int32)
    q = torch.randn(B, 1, N * D)
    lens = [10, 12]
    out, _ = torch_npu.npu_fused_infer_attention_score(
        q.npu(), blocks[0].npu(), blocks[1].npu(), block_table=table.npu(), block_size=bs,
        num_heads=N, scale=0.3, input_layout="BSH", actual_seq_lengths_kv=lens)
    for b, n in enumerate(lens):
        kb = blocks[0][table[b].long()].reshape(-1, N, D)[:n].transpose(0, 1)[None]
        vb = blocks[1][table[b].long()].reshape(-1, N, D)[:n].transpose(0, 1)[None]
        qb = q[b:b + 1].unflatten(2, (N, D)).transpose(1, 2)
        e = attention_ref(qb, kb, vb, torch.ones(1, n, dtype=torch.bool), 0.3)
        close(out[b:b + 1], e.transpose(1, 2).flatten(2), torch.float32)


def test_fused_infer_attention_score_rejects_quantization_clearly():
    q = torch.randn(1, 1, 16).npu()
    with pytest.raises(NotImplementedError, match="dequant_scale1"):
        torch_npu.npu_fused_infer_attention_score(q, q, q, dequant_scale1=q)
    with pytest.raises(NotImplementedError, match="key_antiquant_scale"):
        torch_npu.npu_fused_infer_attention_score(q, q, q, key_antiquant_scale=q)
    with pytest.raises(RuntimeError, match="dequantise an int8 key / value"):
        torch_npu.npu_fused_infer_attention_score(q, q, q, antiquant_scale=q)
    k8 = torch.randint(-5, 5, (1, 4, 16), dtype=torch.int8).npu()
    with pytest.raises(RuntimeError, match="needs antiquant_scale"):
        torch_npu.npu_fused_infer_attention_score(q, k8, k8)
    with pytest.raises(RuntimeError, match=r"\(2, H\) for BSH"):
        torch_npu.npu_fused_infer_attention_score(q, k8, k8, antiquant_scale=q[0, :, :3])


@pytest.mark.parametrize("layout", ["BSH", "BSND", "BNSD"])
@pytest.mark.parametrize("mode", ["per_tensor", "per_channel", "per_token"])
@pytest.mark.parametrize("offset", [False, True])
def test_fused_infer_attention_score_int8_kv_antiquant(layout, mode, offset):
    # An int8 KV cache dequantised in the kernel as (x + offset) * scale (Ascend's antiquant);
    # index 0 of scale / offset is the key's, 1 the value's.
    torch.manual_seed(6)
    B, N, Nkv, Sq, Skv, D = 3, 4, 2, 3, 37, 16  # B != Nkv: a per-token scale is per batch
    q = torch.randn(B, N, Sq, D).half()
    k8 = torch.randint(-128, 128, (B, Nkv, Skv, D), dtype=torch.int8)
    v8 = torch.randint(-128, 128, (B, Nkv, Skv, D), dtype=torch.int8)
    if mode == "per_tensor":
        scale, off = torch.rand(2) / 50 + 0.005, torch.randn(2) * 3
        bcast = lambda t, i: t[i]  # noqa: E731
    elif mode == "per_channel":
        scale, off = torch.rand(2, Nkv, 1, D) / 50 + 0.005, torch.randn(2, Nkv, 1, D) * 3
        bcast = lambda t, i: t[i][None]  # noqa: E731
    else:
        scale, off = torch.rand(2, B, Skv) / 50 + 0.005, torch.randn(2, B, Skv) * 3
        bcast = lambda t, i: t[i][:, None, :, None]  # noqa: E731
    dtype = torch.float32 if mode == "per_token" else torch.float16
    scale, off = scale.to(dtype), off.to(dtype)
    deq = [(t.double() + (bcast(off.double(), i) if offset else 0)) * bcast(scale.double(), i)
           for i, t in enumerate((k8, v8))]
    e = attention_ref(q.double(), deq[0], deq[1], torch.ones(Sq, Skv, dtype=torch.bool), 0.25)

    def arrange(t, heads):  # [B, N, S, D] -> layout
        if layout == "BNSD":
            return t
        t = t.transpose(1, 2)
        return t.flatten(2) if layout == "BSH" else t

    def params(t):  # per-channel scale / offset in the layout's documented shape
        if mode != "per_channel" or layout == "BNSD":
            return t
        return t[:, :, 0] if layout == "BSND" else t[:, :, 0].flatten(1)

    out, _ = torch_npu.npu_fused_infer_attention_score(
        arrange(q, N).contiguous().npu(), arrange(k8, Nkv).contiguous().npu(),
        arrange(v8, Nkv).contiguous().npu(), antiquant_scale=params(scale).npu(),
        antiquant_offset=params(off).npu() if offset else None,
        antiquant_mode=1 if mode == "per_token" else 0, num_heads=N, num_key_value_heads=Nkv,
        scale=0.25, input_layout=layout)
    assert out.dtype == torch.float16
    close(out, arrange(e, N), torch.float16)


# ---- formats -----------------------------------------------------------------------------------

def test_format_cast_keeps_values_and_reports_the_format():
    x = torch.randn(4, 16, 8, 8).npu()
    assert torch_npu.get_npu_format(x) == 2  # ND
    for fmt in (0, 1, 3, 4, 29):
        y = torch_npu.npu_format_cast(x, fmt)
        assert torch_npu.get_npu_format(y) == fmt
        assert torch.equal(y.cpu(), x.cpu())
        assert torch_npu.get_npu_format(x) == 2
    z = torch_npu.npu_format_cast(x, 29)
    assert torch_npu.npu_format_cast(z, 29) is z
    torch_npu.npu_format_cast_(x, 3)
    assert torch.ops.npu.get_npu_format(x) == 3
    with pytest.raises(RuntimeError, match="unknown acl_format 7"):
        torch_npu.npu_format_cast(x, 7)


def test_format_cast_is_differentiable():
    x = torch.randn(3, 4).npu().requires_grad_()
    torch_npu.npu_format_cast(x, 29).mul(2).sum().backward()
    assert torch.equal(x.grad.cpu(), torch.full((3, 4), 2.0))


# ---- fake kernels: shapes without running (FakeTensor / torch.compile tracing) -----------------

def test_fake_kernels_give_the_real_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    q, k = torch.randn(2, 9, 4, 16).npu(), torch.randn(2, 9, 2, 16).npu()
    x, g = torch.randn(3, 8, 32).npu(), torch.ones(32).npu()
    calls = [
        lambda q, k, x, g: torch_npu.npu_fusion_attention(q, k, k, 4, "BSND")[:3],
        lambda q, k, x, g: torch_npu.npu_fusion_attention(q.flatten(2), k.flatten(2),
                                                          k.flatten(2), 4, "BSH")[:3],
        lambda q, k, x, g: torch_npu.npu_rms_norm(x, g),
        lambda q, k, x, g: torch_npu.npu_add_rms_norm(x, x, g),
        lambda q, k, x, g: (torch_npu.npu_swiglu(x, dim=1),),
        lambda q, k, x, g: (torch_npu.npu_rotary_mul(q, q[:1, :, :1], q[:1, :, :1]),),
    ]
    for call in calls:
        real = call(q, k, x, g)
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            fake = call(*(mode.from_tensor(t) for t in (q, k, x, g)))
        assert [tuple(t.shape) for t in fake] == [tuple(t.shape) for t in real]
        assert [t.dtype for t in fake] == [t.dtype for t in real]


def test_sdpa_dropout_on_npu_replays_in_backward():
    B, N, S, p = 1, 2, 48, 0.25
    q, k = torch.randn(B, N, S, S), torch.randn(B, N, S, S)
    eye = torch.eye(S).expand(B, N, S, S).contiguous()
    torch.npu.manual_seed(9)
    p_drop = F.scaled_dot_product_attention(q.npu(), k.npu(), eye.npu(), dropout_p=p,
                                            scale=0.1).cpu()
    keep_mask = p_drop != 0  # V = I: the output is the dropped probability matrix
    assert abs(keep_mask.float().mean().item() - (1 - p)) < 0.04
    v = torch.randn(B, N, S, S)
    (qc, kc, vc), (qn, kn, vn) = leaves(q, k, v)
    torch.npu.manual_seed(9)
    out = F.scaled_dot_product_attention(qn, kn, vn, dropout_p=p, scale=0.1)
    eout = attention_ref(qc, kc, vc, torch.ones(S, S, dtype=torch.bool), 0.1,
                         keep=keep_mask.double() / (1 - p))
    check_grads(out, eout, (qn, kn, vn), (qc, kc, vc))


def test_fusion_attention_non_contiguous_inputs():
    q = torch.randn(2, 4, 30, 16).transpose(1, 2)  # BSND view of BNSD memory
    k = torch.randn(2, 4, 30, 16).transpose(1, 2)
    out = torch_npu.npu_fusion_attention(q.npu(), k.npu(), k.npu(), 4, "BSND", scale=0.25)[0]
    e = attention_ref(q.transpose(1, 2), k.transpose(1, 2), k.transpose(1, 2),
                      torch.ones(30, 30, dtype=torch.bool), 0.25).transpose(1, 2)
    close(out, e, torch.float32)
    # BSH taken as a slice of a wider tensor: not viewable as [B, S, N, D] for every stride
    # pattern, so it is reshaped (copied) on the way in.
    wide = torch.zeros(2, 30, 128)
    wide[:, :, :64] = q.flatten(2)
    qh = wide.npu()[:, :, :64]
    assert not qh.is_contiguous()
    out = torch_npu.npu_fusion_attention(qh, k.flatten(2).npu(), k.flatten(2).npu(), 4,
                                         "BSH", scale=0.25)[0]
    close(out, e.flatten(2), torch.float32)


def test_sdpa_kernel_context_can_turn_the_fused_backend_off():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(1, 2, 16, 8).npu().requires_grad_()
    with sdpa_kernel([SDPBackend.MATH]):
        out = F.scaled_dot_product_attention(q, q, q)
    assert "Overrideable" not in type(out.grad_fn).__name__
    with sdpa_kernel([SDPBackend.OVERRIDEABLE]):
        out = F.scaled_dot_product_attention(q, q, q)
    assert "Overrideable" in type(out.grad_fn).__name__
