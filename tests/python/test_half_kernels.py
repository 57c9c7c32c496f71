"""Issue 12 item 3's audit: the float16 / bfloat16 kernels compute in float32 and round once.
For each op the half result on npu must equal the same op run by the npu's float32 kernel on the
upcast inputs, rounded once to the half dtype. Exact equality is the point: a kernel that
rounds intermediates to half (sums, means, variances, exp-sums) differs in many elements."""

import pytest
import torch
import torch.nn.functional as F

import torch_npu  # noqa: F401

HALF = [torch.float16, torch.bfloat16]


def _x(*shape, seed=0, positive=False):
    t = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
    return t.abs() + 0.1 if positive else t


OPS = {
    # elementwise
    "exp": (lambda x: torch.exp(x), lambda: (_x(4096),)),
    "log": (lambda x: torch.log(x), lambda: (_x(4096, positive=True),)),
    "tanh": (torch.tanh, lambda: (_x(4096),)),
    "sigmoid": (torch.sigmoid, lambda: (_x(4096),)),
    "gelu": (F.gelu, lambda: (_x(4096),)),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), lambda: (_x(4096),)),
    "silu": (F.silu, lambda: (_x(4096),)),
    "rsqrt": (torch.rsqrt, lambda: (_x(4096, positive=True),)),
    "erf": (torch.erf, lambda: (_x(4096),)),
    "add": (torch.add, lambda: (_x(4096), _x(4096, seed=1))),
    "mul_scalar": (lambda x: x * 0.1, lambda: (_x(4096),)),
    "add_alpha": (lambda x, y: torch.add(x, y, alpha=0.3), lambda: (_x(4096), _x(4096, seed=1))),
    "div": (torch.div, lambda: (_x(4096), _x(4096, seed=1, positive=True))),
    # an exponent exact in both half dtypes: ATen casts a Python exponent to the tensor's dtype
    # first (test_fidelity.py), which the float32 reference would not
    "pow": (lambda x: torch.pow(x, 1.75), lambda: (_x(4096, positive=True),)),
    "addcmul": (lambda a, b, c: torch.addcmul(a, b, c, value=0.5),
                lambda: (_x(4096), _x(4096, seed=1), _x(4096, seed=2))),
    "lerp": (lambda a, b: torch.lerp(a, b, 0.3), lambda: (_x(4096), _x(4096, seed=1))),
    # reductions and scans
    "sum": (lambda x: x.sum(-1), lambda: (_x(16, 4096),)),
    "sum_dim0": (lambda x: x.sum(0), lambda: (_x(4096, 16),)),
    "mean": (lambda x: x.mean(-1), lambda: (_x(16, 4096),)),
    "var": (lambda x: x.var(-1), lambda: (_x(16, 4096),)),
    "std": (lambda x: x.std(-1), lambda: (_x(16, 4096),)),
    "norm": (lambda x: torch.linalg.vector_norm(x, dim=-1), lambda: (_x(16, 4096),)),
    "logsumexp": (lambda x: torch.logsumexp(x, -1), lambda: (_x(16, 4096),)),
    "logsumexp_dim0": (lambda x: torch.logsumexp(x, 0), lambda: (_x(4096, 16),)),
    "cumsum": (lambda x: torch.cumsum(x, -1), lambda: (_x(4, 1024),)),
    # softmax, norms
    "softmax": (lambda x: torch.softmax(x, -1), lambda: (_x(16, 1024),)),
    "log_softmax": (lambda x: F.log_softmax(x, -1), lambda: (_x(16, 1024),)),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (1024,), w, b),
                   lambda: (_x(16, 1024), _x(1024, seed=1), _x(1024, seed=2))),
    "batch_norm": (lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
                   lambda: (_x(8, 16, 12, 12), _x(16, seed=1), _x(16, seed=2))),
    "batch_norm_eval": (lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b, training=False),
                        lambda: (_x(8, 16, 12, 12), _x(16, seed=1), _x(16, seed=2, positive=True),
                                 _x(16, seed=3), _x(16, seed=4))),
    "group_norm": (lambda x: F.group_norm(x, 4), lambda: (_x(8, 16, 12, 12),)),
    "group_norm_affine": (lambda x, w, b: F.group_norm(x, 4, w, b),
                          lambda: (_x(8, 16, 12, 12), _x(16, seed=1), _x(16, seed=2))),
    "rms_norm": (lambda x, w: F.rms_norm(x, (1024,), w), lambda: (_x(16, 1024), _x(1024, seed=1))),
    # GEMM, convolution, pooling, loss
    "mm": (torch.mm, lambda: (_x(64, 256), _x(256, 48, seed=1))),
    "conv2d": (lambda x, k: F.conv2d(x, k, padding=1),
               lambda: (_x(4, 8, 10, 10), _x(6, 8, 3, 3, seed=1))),
    "avg_pool2d": (lambda x: F.avg_pool2d(x, 3), lambda: (_x(4, 8, 10, 10),)),
    "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, 1), lambda: (_x(4, 8, 10, 10),)),
    "cross_entropy": (lambda x: F.cross_entropy(x, torch.arange(64, device=x.device) % 10),
                      lambda: (_x(64, 10),)),
    # backward kernels, called directly so both paths get the same half-valued saved tensors
    "softmax_backward": (lambda g, y: torch.ops.aten._softmax_backward_data(g, y, -1, y.dtype),
                         lambda: (_x(16, 1024), torch.softmax(_x(16, 1024, seed=1), -1))),
    "log_softmax_backward": (
        lambda g, y: torch.ops.aten._log_softmax_backward_data(g, y, -1, y.dtype),
        lambda: (_x(16, 1024), F.log_softmax(_x(16, 1024, seed=1), -1))),
    "batch_norm_backward": (
        lambda g, x, w, m, r: torch.ops.aten.native_batch_norm_backward(
            g, x, w, None, None, m, r, True, 1e-5, [True, False, False])[0],
        lambda: (_x(8, 16, 12, 12), _x(8, 16, 12, 12, seed=1), _x(16, seed=2),
                 _x(16, seed=3), _x(16, seed=4, positive=True))),
    "group_norm_backward": (
        lambda g, x, w, m, r: torch.ops.aten.native_group_norm_backward(
            g, x, m, r, w, 8, 16, 144, 4, [True, False, False])[0],
        lambda: (_x(8, 16, 12, 12), _x(8, 16, 12, 12, seed=1), _x(16, seed=2),
                 _x(8, 4, seed=3), _x(8, 4, seed=4, positive=True))),
    "gelu_backward": (lambda g, x: torch.ops.aten.gelu_backward(g, x),
                      lambda: (_x(4096), _x(4096, seed=1))),
    "silu_backward": (lambda g, x: torch.ops.aten.silu_backward(g, x),
                      lambda: (_x(4096), _x(4096, seed=1))),
    "tanh_backward": (lambda g, y: torch.ops.aten.tanh_backward(g, y),
                      lambda: (_x(4096), torch.tanh(_x(4096, seed=1)))),
    "sigmoid_backward": (lambda g, y: torch.ops.aten.sigmoid_backward(g, y),
                         lambda: (_x(4096), torch.sigmoid(_x(4096, seed=1)))),
    # embedding forward is a copy; its backward sums repeated rows
    "embedding": (lambda w: F.embedding(torch.tensor([1, 3, 3, 0], device=w.device), w),
                  lambda: (_x(8, 64),)),
}


@pytest.mark.parametrize("dtype", HALF, ids=["fp16", "bf16"])
@pytest.mark.parametrize("name", list(OPS))
def test_half_result_is_float32_rounded_once(name, dtype):
    fn, make = OPS[name]
    args = [a.to(dtype) for a in make()]  # half values, so both paths see the same inputs
    half = fn(*[a.npu() for a in args])
    ref = fn(*[a.float().npu() for a in args]).to(dtype)
    assert half.dtype == dtype
    bad = (half.cpu().float() != ref.cpu().float()) & ~(half.cpu().isnan() & ref.cpu().isnan())
    assert not bad.any(), (f"{name} {dtype}: {int(bad.sum())} of {bad.numel()} elements differ "
                           f"from float32 rounded once; first: half "
                           f"{half.cpu()[bad][:3].tolist()} vs {ref.cpu()[bad][:3].tolist()}")


@pytest.mark.parametrize("dtype", HALF, ids=["fp16", "bf16"])
def test_embedding_backward_sums_in_float32(dtype):
    # 4096 lookups of 8 rows: each row's gradient is a sum of ~512 half values.
    idx = torch.randint(0, 8, (4096,), generator=torch.Generator().manual_seed(0)).npu()
    grads = {}
    for dt in (dtype, torch.float32):
        w = _x(8, 64).to(dtype).to(dt).npu().requires_grad_()
        g = _x(4096, 64, seed=1).to(dtype).to(dt).npu()
        F.embedding(idx, w).backward(g)
        grads[dt] = w.grad
    ref = grads[torch.float32].to(dtype)
    torch.testing.assert_close(grads[dtype].cpu(), ref.cpu(), rtol=0, atol=0)


def _bn_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 4, 3, padding=1, bias=False), torch.nn.BatchNorm2d(4))


# Relative to the largest magnitude of each compared tensor: float16 keeps 11 bits (4.9e-4 per
# rounding) and bfloat16 8 bits (3.9e-3); the model rounds each layer's output and every
# gradient once, so a few roundings add up along the chain (largest seen: fp16 6.4e-4, bf16
# 7.0e-3). A kernel computing statistics or gradient sums in half, or a wrong formula, is off
# by far more.
BN_MODEL_TOL = {torch.float16: 5e-3, torch.bfloat16: 4e-2}


@pytest.mark.parametrize("dtype", HALF, ids=["fp16", "bf16"])
@pytest.mark.parametrize("params", ["half", "float32"], ids=["half_params", "float32_params"])
def test_batch_norm_model_trains_in_half_like_float32(dtype, params):
    """A conv + batch norm model, forward and backward in float16 / bfloat16 on npu (all-half as
    apex O3 makes it, or with float32 batch norm parameters as autocast leaves them), against
    the same model in float32 on the CPU."""
    x = _x(4, 3, 10, 10).to(dtype)  # half values, so both runs see the same input
    ref, half = _bn_model(), _bn_model().npu()
    for m in half.modules():
        if not isinstance(m, torch.nn.BatchNorm2d) or params == "half":
            m.to(dtype)
    ref_out = ref(x.float())
    out = half(x.npu())
    assert out.dtype == dtype
    # A fixed random weighting: a loss of the normalised output alone (its mean square) would
    # not depend on the layers before the last batch norm.
    target = _x(4, 4, 10, 10, seed=5)
    (ref_out * target).sum().backward()
    (out.float() * target.npu()).sum().backward()
    tol = BN_MODEL_TOL[dtype]

    def close(name, got, want):
        got = got.detach().cpu().float()
        err = (got - want.detach()).abs().max().item()
        scale = want.detach().abs().max().item()
        assert err <= tol * scale, f"{name}: max error {err:.3g}, {err / scale:.3g} of the " \
                                   f"largest value {scale:.3g} (tolerance {tol})"

    close("output", out, ref_out)
    for (name, p), (_, r) in zip(half.named_parameters(), ref.named_parameters()):
        assert p.grad.dtype == p.dtype, name
        close(f"{name}.grad", p.grad, r.grad)
    for (name, b), (_, r) in zip(half.named_buffers(), ref.named_buffers()):
        if b.is_floating_point():
            close(name, b, r)
