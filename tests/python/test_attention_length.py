"""F.scaled_dot_product_attention on npu at lengths of many tiles: forward output and q / k / v
gradients against a float64 reference on the CPU, causal and not, float32 and bfloat16, ragged
tails (S not a multiple of the 64-row tiles), head dims of the tile path (32, 64, 128; bfloat16
on AMX where the CPU has it) and one beside it (24); and the O(S) memory bound of forward +
backward in both dtypes."""

import pytest
import torch
import torch.nn.functional as F

import torch_npu  # noqa: F401

# Error relative to the reference's largest magnitude: float32 keeps 1e-5-level agreement; the
# bfloat16 kernels round inputs, P and dS to bfloat16 (8 significant bits) as the CPU's do.
TOL = {torch.float32: 2e-5, torch.bfloat16: 3e-2}


def rel_err(got, ref):
    return ((got.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def sdpa_case(dtype, S, heads, D, causal, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v, grad = (torch.randn(1, heads, S, D, generator=g).to(dtype) for _ in range(4))
    # The reference: CPU SDPA in float64 on the same (already rounded) inputs.
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*leaves, is_causal=causal)
    ref.backward(grad.double())
    npu = [t.npu().requires_grad_() for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*npu, is_causal=causal)
    assert "FusedAttentionOverrideable" in type(out.grad_fn).__name__
    out.backward(grad.npu())
    assert out.dtype == dtype
    tol = TOL[dtype]
    assert rel_err(out.cpu(), ref.detach()) < tol, "out"
    for name, got, want in zip("qkv", npu, leaves):
        assert got.grad.dtype == dtype
        # Gradients sum S products of rounded terms: a few times the output's tolerance.
        assert rel_err(got.grad.cpu(), want.grad) < 4 * tol, f"d{name}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("S,heads,D", [(300, 2, 32), (300, 2, 24), (1024, 2, 64), (333, 2, 128)])
def test_sdpa_at_length_matches_float64_cpu(dtype, causal, S, heads, D):
    sdpa_case(dtype, S, heads, D, causal, seed=S + D)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_sdpa_forward_backward_memory_is_o_of_s(dtype):
    S, heads, D = 2048, 2, 64
    q, k, v, grad = (torch.randn(1, heads, S, D).to(dtype).npu() for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_()
    torch.npu.synchronize()
    torch.npu.reset_peak_memory_stats()
    base = torch.npu.memory_allocated()
    F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)
    torch.npu.synchronize()
    peak = torch.npu.max_memory_allocated() - base
    # Beyond its inputs the call keeps its outputs (out, dq, dk, dv: 4 x 1 MiB here) and
    # statistics of O(S); one S x S float32 score matrix of one head alone would be 16 MiB,
    # both heads' 32 MiB.
    outputs = 4 * heads * S * D * dtype.itemsize
    assert peak < outputs + 2 * 2**20, peak / 2**20
    assert peak < S * S * 4 / 2, peak / 2**20
