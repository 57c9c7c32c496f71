"""Attention over short sequences (at most 64 queries and keys per head) takes the flash
kernel's short path (kernels/flash_attention.cpp, short_forward_head / short_backward_head: a
head's whole score matrix at once, keys transposed, no GEMM calls). Forward and gradients
against float64 references: SDPA with small and odd head dims, causal or not, boolean masks,
GQA, 16-bit inputs; npu_fusion_attention's layouts, sparse modes, explicit masks and varlen
(TND) on short sequences; a fully masked row as the general path gives it."""

import pytest
import torch
import torch.nn.functional as F

import torch_npu  # noqa: F401
from test_attention_decode import TOL, check, tensors
from test_fused_ops import run_fa, run_varlen


@pytest.mark.parametrize("sq,skv,d,dv", [(16, 16, 8, 8), (7, 13, 8, 16), (64, 64, 24, 24),
                                         (17, 40, 5, 3), (33, 64, 16, 16), (9, 9, 32, 32)])
@pytest.mark.parametrize("causal", [False, True])
def test_short_heads_equal_the_cpu(sq, skv, d, dv, causal):
    q, k, v, grad = tensors((2, 3, sq, d), (2, 3, skv, d), (2, 3, skv, dv), (2, 3, sq, dv),
                            seed=sq + skv)
    check(q, k, v, grad, TOL[torch.float32], is_causal=causal)


def test_short_heads_with_a_boolean_mask_and_grouped_query_heads():
    q, k, v, grad = tensors((2, 8, 20, 8), (2, 2, 30, 8), (2, 2, 30, 8), (2, 8, 20, 8), seed=5)
    keep = torch.rand(2, 1, 20, 30, generator=torch.Generator().manual_seed(6)) < 0.7
    keep[..., 0] = True  # every row sees a key (the float64 reference gives NaN otherwise)
    check(q, k, v, grad, TOL[torch.float32], attn_mask=keep, enable_gqa=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_short_heads_sixteen_bit(dtype):
    q, k, v, grad = tensors((4, 4, 16, 8), (4, 4, 16, 8), (4, 4, 16, 8), (4, 4, 16, 8),
                            dtype=dtype, seed=7)
    check(q, k, v, grad, TOL[dtype], is_causal=True)


def test_a_fully_masked_row_equals_the_general_path():
    # 60 keys take the short path; 60 keys and 20 more that no row sees (80 > 64) take the
    # general one: outputs and gradients of q, k, v (the first 60 keys) must agree, including
    # the row that sees no key at all (output 0, gradients 0).
    q, k, v, grad = tensors((1, 2, 12, 8), (1, 2, 80, 8), (1, 2, 80, 8), (1, 2, 12, 8), seed=8)
    keep = torch.rand(1, 1, 12, 80, generator=torch.Generator().manual_seed(9)) < 0.6
    keep[..., 60:] = False
    keep[..., 3, :] = False
    results = []
    for skv in (60, 80):
        leaves = [t.npu().requires_grad_() for t in (q, k[:, :, :skv], v[:, :, :skv])]
        out = F.scaled_dot_product_attention(*leaves, attn_mask=keep[..., :skv].npu())
        out.backward(grad.npu())
        results.append([out.detach().cpu()] + [t.grad[:, :, :60].cpu() if i else t.grad.cpu()
                                               for i, t in enumerate(leaves)])
    for name, short, general in zip(("out", "dq", "dk", "dv"), *results):
        torch.testing.assert_close(short, general, rtol=1e-5, atol=1e-6, msg=name)
    assert results[0][0][:, :, 3].abs().max() == 0


@pytest.mark.parametrize("layout", ["BSH", "BSND", "BNSD", "SBH"])
@pytest.mark.parametrize("sparse_mode", [0, 2, 3])
def test_fusion_attention_short_layouts_and_modes(layout, sparse_mode):
    run_fa(layout, sparse_mode, Sq=20, Skv=30, D=8)


def test_fusion_attention_short_explicit_mask_band_and_half():
    run_fa("BNSD", 1, Sq=24, Skv=24, D=16, with_mask=True)
    run_fa("BSND", 4, Sq=40, Skv=50, D=8, pre=12, nxt=3)
    run_fa("BSND", 3, Sq=32, Skv=32, D=16, dtype=torch.bfloat16)
    run_fa("BSND", 3, N=4, Nkv=1, Sq=16, Skv=16, D=8)


def test_fusion_attention_short_varlen():
    run_varlen([5, 33, 1, 64], [5, 40, 3, 64], D=8)
    run_varlen([16, 16], [16, 16], D=8, N=4, Nkv=1)
