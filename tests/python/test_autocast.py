"""torch.autocast("npu") and torch.npu.amp: CUDA's casting policies on the AutocastPrivateUse1 key
(adapter/Autocast.cpp). The reference for values is the same op on the CPU with the casts the
policy implies, done by hand."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import torch_npu  # noqa: F401

LOW = torch.bfloat16


def _t(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# (name, fn, inputs, expected dtype under autocast(LOW)); inputs are float32 CPU tensors.
POLICY = [
    ("mm", torch.mm, lambda: (_t(4, 5), _t(5, 3, seed=1)), LOW),
    ("bmm", torch.bmm, lambda: (_t(2, 4, 5), _t(2, 5, 3, seed=1)), LOW),
    ("addmm", torch.addmm, lambda: (_t(3), _t(4, 5), _t(5, 3, seed=1)), LOW),
    ("baddbmm", torch.baddbmm, lambda: (_t(2, 4, 3), _t(2, 4, 5), _t(2, 5, 3, seed=1)), LOW),
    ("matmul", torch.matmul, lambda: (_t(2, 4, 5), _t(5, 3, seed=1)), LOW),
    ("linear", F.linear, lambda: (_t(4, 5), _t(3, 5, seed=1), _t(3, seed=2)), LOW),
    ("conv2d", F.conv2d, lambda: (_t(1, 2, 6, 6), _t(3, 2, 3, 3, seed=1)), LOW),
    ("sdpa", F.scaled_dot_product_attention,
     lambda: (_t(1, 2, 4, 8), _t(1, 2, 4, 8, seed=1), _t(1, 2, 4, 8, seed=2)), LOW),
    ("softmax", lambda x: torch.softmax(x, -1), lambda: (_t(4, 5).to(LOW),), torch.float32),
    ("log_softmax", lambda x: F.log_softmax(x, -1), lambda: (_t(4, 5).to(LOW),), torch.float32),
    ("layer_norm", lambda x: F.layer_norm(x, (5,)), lambda: (_t(4, 5).to(LOW),), torch.float32),
    ("exp", torch.exp, lambda: (_t(4, 5).to(LOW),), torch.float32),
    ("log", torch.log, lambda: (_t(4, 5).abs().to(LOW),), torch.float32),
    ("pow", lambda x: torch.pow(x, 2.0), lambda: (_t(4, 5).to(LOW),), torch.float32),
    ("sum", torch.sum, lambda: (_t(4, 5).to(LOW),), torch.float32),
    ("cumsum", lambda x: torch.cumsum(x, 0), lambda: (_t(4, 5).to(LOW),), torch.float32),
    ("mse_loss", F.mse_loss, lambda: (_t(4, 5).to(LOW), _t(4, 5, seed=1).to(LOW)),
     torch.float32),
    ("addcmul (promote)", torch.addcmul, lambda: (_t(4).to(LOW), _t(4, seed=1), _t(4, seed=2)),
     torch.float32),
    ("relu (falls through)", torch.relu, lambda: (_t(4, 5),), torch.float32),
    ("add (falls through)", torch.add, lambda: (_t(4).to(LOW), _t(4, seed=1).to(LOW)), LOW),
]


def _policy_cast(args, dtype):
    return [a.to(dtype) if a.is_floating_point() else a for a in args]


@pytest.mark.parametrize("name,fn,make,expected", POLICY, ids=[p[0] for p in POLICY])
def test_policy_dtype_and_values(name, fn, make, expected):
    args = make()
    with torch.autocast("npu", dtype=LOW):
        out = fn(*[a.npu() for a in args])
    assert out.device.type == "npu"
    assert out.dtype == expected, name
    # The reference: the op on the CPU, its inputs cast as the policy says.
    if name.endswith("(falls through)"):
        ref_args = args
    elif expected == LOW:
        ref_args = _policy_cast(args, LOW)
    else:
        ref_args = _policy_cast(args, expected)
    ref = fn(*ref_args)
    tol = 2e-2 if out.dtype == LOW else 1e-5
    torch.testing.assert_close(out.cpu(), ref.to(out.dtype), rtol=tol, atol=tol)


def test_training_step_matches_cpu_autocast():
    # linear runs in bfloat16 and cross_entropy in float32 on both devices (the CPU's policy and
    # CUDA's agree on these ops), so an MLP step under autocast matches the CPU's.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    x, y = _t(8, 16), torch.randint(0, 4, (8,), generator=torch.Generator().manual_seed(1))
    results = {}
    for device in ("cpu", "npu"):
        m = torch.nn.Sequential(*[torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                  torch.nn.Linear(32, 4)]).to(device)
        m.load_state_dict(model.state_dict())
        with torch.autocast(device, dtype=LOW):
            logits = m(x.to(device))
            loss = F.cross_entropy(logits, y.to(device))
        assert logits.dtype == LOW and loss.dtype == torch.float32
        loss.backward()
        results[device] = (loss.detach().cpu(), [p.grad.cpu() for p in m.parameters()])
        assert all(p.grad.dtype == torch.float32 for p in m.parameters())
    torch.testing.assert_close(results["npu"][0], results["cpu"][0], rtol=1e-2, atol=1e-2)
    for g_npu, g_cpu in zip(results["npu"][1], results["cpu"][1]):
        torch.testing.assert_close(g_npu, g_cpu, rtol=5e-2, atol=5e-3)


class _CountCasts(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.casts = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._to_copy.default:
            self.casts += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("cache_enabled", [True, False])
def test_weight_casts_are_cached_within_a_region(cache_enabled):
    lin = torch.nn.Linear(8, 8, bias=False).npu()
    x = _t(2, 8).npu()
    with torch.autocast("npu", dtype=LOW, cache_enabled=cache_enabled):
        with _CountCasts() as counter:
            lin(x)
            lin(x)
    # each call casts x; the weight (a float32 leaf that requires grad) once with the cache
    assert counter.casts == (3 if cache_enabled else 4)


def test_nesting_and_disabling():
    a = _t(4, 4).npu()
    with torch.autocast("npu", dtype=torch.float16):
        assert (a @ a).dtype == torch.float16
        with torch.autocast("npu", dtype=torch.bfloat16):
            assert (a @ a).dtype == torch.bfloat16
        with torch.autocast("npu", enabled=False):
            assert (a @ a).dtype == torch.float32
            assert not torch.npu.is_autocast_enabled()
        assert (a @ a).dtype == torch.float16
    assert (a @ a).dtype == torch.float32
    # CPU tensors are not cast by an npu region
    with torch.autocast("npu", dtype=LOW):
        assert (a.cpu() @ a.cpu()).dtype == torch.float32


def test_npu_amp_names():
    a = _t(4, 4).npu()
    with torch.npu.amp.autocast():  # torch_npu's default: float16
        assert (a @ a).dtype == torch.float16
        assert torch.npu.get_autocast_dtype() == torch.float16

    @torch.npu.amp.autocast(dtype=torch.bfloat16)
    def decorated(t):
        return t @ t
    assert decorated(a).dtype == torch.bfloat16
    assert torch.npu.is_bf16_supported()
    assert {torch.float16, torch.bfloat16} <= set(torch.npu.get_amp_supported_dtype())
    assert torch._C._is_autocast_available("npu")

    class Square(torch.autograd.Function):
        @staticmethod
        @torch.npu.amp.custom_fwd(cast_inputs=torch.float32)
        def forward(ctx, t):
            ctx.save_for_backward(t)
            return t * t

        @staticmethod
        @torch.npu.amp.custom_bwd
        def backward(ctx, g):
            (t,) = ctx.saved_tensors
            return 2 * t * g

    h = _t(3).to(torch.float16).npu().requires_grad_()
    with torch.autocast("npu", dtype=torch.float16):
        out = Square.apply(h)
    assert out.dtype == torch.float32  # cast_inputs ran forward in float32
    out.sum().backward()
    torch.testing.assert_close(h.grad.cpu(), (2 * h.detach().cpu()).to(torch.float16))


def test_binary_cross_entropy_is_refused_as_on_cuda():
    p = torch.rand(4).npu()
    with torch.autocast("npu", dtype=torch.float16):
        with pytest.raises(RuntimeError, match="binary_cross_entropy_with_logits"):
            F.binary_cross_entropy(p, p)
        # the safe form works, in float32
        assert F.binary_cross_entropy_with_logits(p, p).dtype == torch.float32
