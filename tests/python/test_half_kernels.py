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
    "cumsum": (lambda x: torch.cumsum(x, -1), lambda: (_x(4, 1024),)),
    # softmax, norms
    "softmax": (lambda x: torch.softmax(x, -1), lambda: (_x(16, 1024),)),
    "log_softmax": (lambda x: F.log_softmax(x, -1), lambda: (_x(16, 1024),)),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (1024,), w, b),
                   lambda: (_x(16, 1024), _x(1024, seed=1), _x(1024, seed=2))),
    "batch_norm": (lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
                   lambda: (_x(8, 16, 12, 12), _x(16, seed=1), _x(16, seed=2))),
    "group_norm": (lambda x: F.group_norm(x, 4), lambda: (_x(8, 16, 12, 12),)),
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


# Not yet float32-rounded-once on npu (each off by one half ulp in 20-40% of the elements), and
# each needs an adapter change (adapter/ops), not a kernel one:
# - logsumexp is composite (as on the CPU): amax, sub, exp, sum and log each round to half;
#   kernels/reduce.cpp has a one-pass float logsumexp to route it to.
# - batch_norm with 16-bit input runs ATen's CPU kernel as a host kernel (the adapter's bnOk
#   refuses 16-bit), which rounds intermediates as the CPU does.
# - group_norm is composite on npu, its pieces rounding to half.
NEEDS_ADAPTER = {"logsumexp", "batch_norm", "group_norm"}


def _params():
    xfail = pytest.mark.xfail(strict=True, reason="rounds intermediates to half on npu: needs "
                              "an adapter change (see NEEDS_ADAPTER)")
    return [pytest.param(name, marks=[xfail] if name in NEEDS_ADAPTER else [], id=name)
            for name in OPS]


@pytest.mark.parametrize("dtype", HALF, ids=["fp16", "bf16"])
@pytest.mark.parametrize("name", _params())
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
