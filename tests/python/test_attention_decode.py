"""Attention with few query rows (decoding: one new token, or a few, against a KV cache) takes
the flash kernel's decode path (kernels/flash_attention.cpp: decode_group, a grouped-query group
per item, or decode_block, a head per item; keys and values read in place, no 64-row query
tiles). Forward and gradients against a float64
reference on the CPU: boolean and additive masks as Hugging Face's static cache passes them,
causal, GQA, key lengths over one 256-key block, fully masked rows, 16-bit inputs; and
npu_fusion_attention with one query row against its general path's result."""

import pytest
import torch
import torch.nn.functional as F

import torch_npu  # noqa: F401

TOL = {torch.float32: 2e-5, torch.bfloat16: 3e-2, torch.float16: 4e-3}


def rel_err(got, ref, floor=1e-30):
    return ((got.double() - ref).abs().max() / ref.abs().max().clamp_min(floor)).item()


def tensors(*shapes, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g).to(dtype) for s in shapes]


def check(q, k, v, grad, tol, fused=True, **kw):
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    ref_kw = {key: (val.double() if torch.is_tensor(val) and val.is_floating_point() else val)
              for key, val in kw.items()}
    ref = F.scaled_dot_product_attention(*leaves, **ref_kw)
    ref.backward(grad.double())
    npu = [t.npu().requires_grad_() for t in (q, k, v)]
    npu_kw = {key: (val.npu() if torch.is_tensor(val) else val) for key, val in kw.items()}
    out = F.scaled_dot_product_attention(*npu, **npu_kw)
    if fused:
        assert "FusedAttentionOverrideable" in type(out.grad_fn).__name__
    out.backward(grad.npu())
    assert rel_err(out.detach().cpu(), ref.detach()) < tol, "out"
    for name, got, want in zip("qkv", npu, leaves):
        # A gradient can be exactly 0 (dq and dk with one key: the softmax is constant), where
        # float32 leaves cancellation noise of ~1e-6 (dP - D_i): errors are measured against at
        # least 0.1, the order of these inputs' gradients.
        assert rel_err(got.grad.cpu(), want.grad, floor=0.1) < 4 * tol, f"d{name}"


@pytest.mark.parametrize("sq", [1, 3, 8])
@pytest.mark.parametrize("skv", [1, 37, 300])
@pytest.mark.parametrize("mask", [None, "bool", "additive"])
def test_few_query_rows_equal_the_cpu(sq, skv, mask):
    B, H, D = 2, 4, 64
    q, k, v, grad = tensors((B, H, sq, D), (B, H, skv, D), (B, H, skv, D), (B, H, sq, D))
    kw = {"fused": mask != "additive"}  # a float mask takes the math path (Attention.cpp)
    if mask is not None:
        # A static cache: keys past each sequence's filled length are not attended to.
        filled = torch.tensor([skv, max(1, skv // 2)])
        keep = (torch.arange(skv)[None, :] < filled[:, None])[:, None, None, :].expand(B, 1, sq, skv)
        kw["attn_mask"] = keep if mask == "bool" else \
            torch.where(keep, 0.0, torch.finfo(torch.float32).min).to(torch.float32)
    check(q, k, v, grad, TOL[torch.float32], **kw)


@pytest.mark.parametrize("sq,skv", [(1, 1), (4, 4), (4, 40)])
def test_causal_few_rows(sq, skv):
    q, k, v, grad = tensors((1, 2, sq, 32), (1, 2, skv, 32), (1, 2, skv, 32), (1, 2, sq, 32), seed=1)
    check(q, k, v, grad, TOL[torch.float32], is_causal=True)


def test_grouped_query_heads():
    q, k, v, grad = tensors((3, 8, 1, 64), (3, 2, 70, 64), (3, 2, 70, 64), (3, 8, 1, 64), seed=2)
    check(q, k, v, grad, TOL[torch.float32], enable_gqa=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_sixteen_bit_inputs(dtype):
    q, k, v, grad = tensors((2, 4, 1, 64), (2, 4, 129, 64), (2, 4, 129, 64), (2, 4, 1, 64),
                            dtype=dtype, seed=3)
    check(q, k, v, grad, TOL[dtype])


def test_a_fully_masked_row_gives_what_the_general_path_gives():
    # Every key hidden from the second query row: the general path (9 rows here) and the decode
    # path (that row alone) must agree on such a row, and on the visible ones.
    q, k, v = tensors((1, 2, 9, 32), (1, 2, 20, 32), (1, 2, 20, 32), seed=4)
    mask = torch.ones(1, 1, 9, 20, dtype=torch.bool)
    mask[..., 1, :] = False
    general = F.scaled_dot_product_attention(q.npu(), k.npu(), v.npu(), attn_mask=mask.npu())
    for row in range(2):
        decode = F.scaled_dot_product_attention(q[:, :, row:row + 1].npu(), k.npu(), v.npu(),
                                                attn_mask=mask[:, :, row:row + 1].npu())
        torch.testing.assert_close(decode.cpu(), general[:, :, row:row + 1].cpu(),
                                   rtol=1e-5, atol=1e-6, equal_nan=True)


def test_fusion_attention_one_query_row_with_a_position_bias():
    # npu_fusion_attention's pse (added before the softmax) on the decode path, against the same
    # call on 9 query rows (the general path), row 0 of which is the decode call's row.
    q, k, v, pse = tensors((1, 4, 9, 64), (1, 4, 50, 64), (1, 4, 50, 64), (1, 4, 9, 50), seed=5)
    full = torch_npu.npu_fusion_attention(q.npu(), k.npu(), v.npu(), 4, "BNSD", pse=pse.npu(),
                                          scale=0.125)[0]
    one = torch_npu.npu_fusion_attention(q[:, :, :1].npu(), k.npu(), v.npu(), 4, "BNSD",
                                         pse=pse[:, :, :1].contiguous().npu(), scale=0.125)[0]
    torch.testing.assert_close(one.cpu(), full[:, :, :1].cpu(), rtol=1e-5, atol=1e-6)
