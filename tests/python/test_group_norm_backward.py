"""group_norm's backward on npu (kernels/batch_norm.cpp): grad_input, grad_weight and grad_bias
against PyTorch's CPU kernel run in float64 on the same (dtype-rounded) values, for float32,
float64, float16 and bfloat16, with and without affine, a 16-bit input with float32 weight
(ATen's mixed mode), shapes where channels per group and HxW are odd, and a channels-last
input. Also checks that the call runs our kernel rather than ATen's on the stream."""

import pytest
import torch
import torch.nn.functional as F

import torch_npu  # noqa: F401

# Relative to the largest magnitude of each compared tensor. float32 computes in float32 with
# the per-plane sums in double (a few roundings: 1e-5); float16 / bfloat16 round each gradient
# once to 11 / 8 bits (4.9e-4 / 3.9e-3) and start from the forward's float32 mean / rstd.
# Groups of a few elements (2 or 3 values: D * HxW small) amplify those roundings through the
# cancellation in dy - mean(dy) - xhat * mean(dy * xhat); there the bound is twice the error of
# PyTorch's own CPU kernel run in the same dtype on the same values.
TOL = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}

SHAPES = [((8, 16, 12, 12), 4), ((3, 6, 5, 7), 2), ((2, 9, 1, 1), 3), ((4, 10, 17), 5),
          ((5, 12), 6)]


def _rand(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _leaf(t, device, dtype):
    return None if t is None else t.to(device, dtype).detach().clone().requires_grad_()


def _grads(x, w, b, dy, group, device, dtype, param_dtype):
    x, w, b = _leaf(x, device, dtype), _leaf(w, device, param_dtype), _leaf(b, device, param_dtype)
    y = F.group_norm(x, group, w, b, eps=1e-5)
    y.backward(dy.to(device, dtype))
    return [t.grad for t in (x, w, b) if t is not None]


def _err(got, ref):
    return (got.cpu().double() - ref).abs().max().item() / (ref.abs().max().item() or 1.0)


def _close(got, ref, tol, what, cpu_same_dtype=None):
    err = _err(got, ref)
    if cpu_same_dtype is not None:
        tol = max(tol, 2 * _err(cpu_same_dtype, ref))
    assert err <= tol, f"{what}: max error {err:.3g} of the largest magnitude (tolerance {tol:.3g})"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16],
                         ids=["fp32", "fp64", "fp16", "bf16"])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
@pytest.mark.parametrize("shape,group", SHAPES, ids=[str(s) for s, _ in SHAPES])
def test_group_norm_backward_matches_cpu_float64(shape, group, affine, dtype):
    x, dy = _rand(*shape, seed=0) * 2 + 0.5, _rand(*shape, seed=1)
    C = shape[1]
    w, b = (_rand(C, seed=2), _rand(C, seed=3)) if affine else (None, None)
    # The reference gets the values the tested dtype holds.
    x, dy = x.to(dtype), dy.to(dtype)
    w = None if w is None else w.to(dtype)
    b = None if b is None else b.to(dtype)
    before = torch_npu._C._host_kernel_ops().get("aten::native_group_norm_backward", 0)
    got = _grads(x, w, b, dy, group, "npu", dtype, dtype)
    assert torch_npu._C._host_kernel_ops().get("aten::native_group_norm_backward", 0) == before, \
        "group_norm's backward ran ATen's CPU kernel instead of ours"
    ref = _grads(x, w, b, dy, group, "cpu", torch.float64, torch.float64)
    cpu = _grads(x, w, b, dy, group, "cpu", dtype, dtype)
    assert [g.dtype for g in got] == [dtype] * len(ref)
    for g, r, c, what in zip(got, ref, cpu, ["grad_input", "grad_weight", "grad_bias"]):
        _close(g, r, TOL[dtype], what, c)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_half_input_with_float32_weight(dtype):
    shape, group = (4, 8, 6, 6), 2
    x, dy = _rand(*shape, seed=0).to(dtype), _rand(*shape, seed=1).to(dtype)
    w, b = _rand(8, seed=2), _rand(8, seed=3)
    got = _grads(x, w, b, dy, group, "npu", dtype, torch.float32)
    assert [g.dtype for g in got] == [dtype, torch.float32, torch.float32]
    ref = _grads(x, w, b, dy, group, "cpu", torch.float64, torch.float64)
    for g, r, what in zip(got, ref, ["grad_input", "grad_weight", "grad_bias"]):
        _close(g, r, TOL[dtype], what)


def test_channels_last_and_weight_only():
    shape, group = (3, 8, 5, 6), 4
    x = _rand(*shape, seed=0).contiguous(memory_format=torch.channels_last)
    dy = _rand(*shape, seed=1).contiguous(memory_format=torch.channels_last)
    w = _rand(8, seed=2)
    got = _grads(x, w, None, dy, group, "npu", torch.float32, torch.float32)
    ref = _grads(x, w, None, dy, group, "cpu", torch.float64, torch.float64)
    assert len(got) == 2
    for g, r, what in zip(got, ref, ["grad_input", "grad_weight"]):
        _close(g, r, TOL[torch.float32], what)


def test_output_mask_and_mismatched_dtypes():
    shape, group = (2, 4, 3, 3), 2
    x, dy = _rand(*shape, seed=0), _rand(*shape, seed=1)
    _, mean, rstd = torch.ops.aten.native_group_norm(x, None, None, 2, 4, 9, group, 1e-5)
    w = _rand(4, seed=2)
    ref = torch.ops.aten.native_group_norm_backward(dy, x, mean, rstd, w, 2, 4, 9, group,
                                                    [True, True, True])
    got = torch.ops.aten.native_group_norm_backward(dy.npu(), x.npu(), mean.npu(), rstd.npu(),
                                                    w.npu(), 2, 4, 9, group, [False, True, False])
    assert got[0] is None and got[2] is None
    torch.testing.assert_close(got[1].cpu(), ref[1], rtol=1e-5, atol=1e-6)
    # A float32 input with float64 grad_output is refused by ATen's kernel, with its message.
    with pytest.raises(RuntimeError):
        torch.ops.aten.native_group_norm_backward(dy.double().npu(), x.npu(), mean.npu(),
                                                  rstd.npu(), w.npu(), 2, 4, 9, group,
                                                  [True, True, True])
        torch.npu.synchronize()
