"""torch_npu's general-purpose npu_* operators (torch_npu/_utility_ops.py) against references
computed on the CPU from their documented definitions, with torch_npu's output dtypes."""

import pytest
import torch
import torch.nn.functional as F

import torch_npu

torch.manual_seed(0)
X = torch.randn(3, 4, 5)


def _same(got, ref, **tol):
    if isinstance(ref, tuple):
        assert len(got) == len(ref)
        for g, r in zip(got, ref):
            _same(g, r, **tol)
        return
    assert got.device.type == "npu"
    assert got.dtype == ref.dtype and got.shape == ref.shape
    torch.testing.assert_close(got.cpu(), ref, **tol)


# (name, npu call, CPU reference of the documented definition)
CASES = [
    ("npu_silu", lambda x: torch_npu.npu_silu(x), lambda x: x * torch.sigmoid(x)),
    ("npu_mish", lambda x: torch_npu.npu_mish(x), lambda x: x * torch.tanh(F.softplus(x))),
    ("fast_gelu", lambda x: torch_npu.fast_gelu(x),
     lambda x: x / (1 + torch.exp(-1.702 * x.abs())) * torch.exp(0.851 * (x - x.abs()))),
    ("npu_transpose", lambda x: torch_npu.npu_transpose(x, (2, 0, 1)),
     lambda x: x.permute(2, 0, 1).contiguous()),
    ("npu_confusion_transpose first",
     lambda x: torch_npu.npu_confusion_transpose(x, (0, 2, 1), (3, 20), True),
     lambda x: x.transpose(1, 2).reshape(3, 20)),
    ("npu_confusion_transpose after",
     lambda x: torch_npu.npu_confusion_transpose(x, (1, 0), (12, 5), False),
     lambda x: x.reshape(12, 5).t().contiguous()),
    ("npu_broadcast", lambda x: torch_npu.npu_broadcast(x[:, :1], (2, 3, 4, 5)),
     lambda x: x[:, :1].expand(2, 3, 4, 5).contiguous()),
    ("npu_slice", lambda x: torch_npu.npu_slice(x, [1, 0, 2], [2, 3, 3]),
     lambda x: x[1:3, 0:3, 2:5]),
    ("npu_max", lambda x: torch_npu.npu_max(x, 2),
     lambda x: (x.max(2).values, x.max(2).indices.int())),
    ("npu_min keepdim", lambda x: torch_npu.npu_min(x, 1, keepdim=True),
     lambda x: (x.min(1, True).values, x.min(1, True).indices.int())),
    ("npu_dtype_cast", lambda x: torch_npu.npu_dtype_cast(x, torch.float16), lambda x: x.half()),
    ("npu_linear", lambda x: torch_npu.npu_linear(x, x[0], x[1, :, 0]),
     lambda x: x @ x[0].t() + x[1, :, 0]),
    ("npu_bmmV2", lambda x: torch_npu.npu_bmmV2(x, x.transpose(1, 2), [3, 4, 4]),
     lambda x: torch.bmm(x, x.transpose(1, 2))),
    ("npu_layer_norm_eval", lambda x: torch_npu.npu_layer_norm_eval(x, [5], x[0, 0], x[0, 1], 1e-5),
     lambda x: (x - x.mean(-1, keepdim=True))
     / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5) * x[0, 0] + x[0, 1]),
    ("npu_reshape", lambda x: torch_npu.npu_reshape(x, (4, 15)), lambda x: x.reshape(4, 15)),
    ("npu_sort_v2", lambda x: torch_npu.npu_sort_v2(x, 1, True), lambda x: x.sort(1, True).values),
    ("npu_softmax_cross_entropy_with_logits",
     lambda x: torch_npu.npu_softmax_cross_entropy_with_logits(x, x.softmax(-1)),
     lambda x: -(x.softmax(-1) * (x - x.exp().sum(-1, keepdim=True).log())).sum(-1)),
]


@pytest.mark.parametrize("name,npu_call,reference", CASES, ids=[c[0] for c in CASES])
def test_utility_op_matches_its_definition(name, npu_call, reference):
    _same(npu_call(X.npu()), reference(X), atol=1e-5, rtol=1e-4)


def test_npu_one_hot_matches_torch_npus_documented_example():
    a = torch.tensor([5, 3, 2, 1], dtype=torch.int32).npu()
    got = torch_npu.npu_one_hot(a, depth=5)
    ref = torch.tensor([[0., 0., 0., 0., 0.], [0., 0., 0., 1., 0.], [0., 0., 1., 0., 0.],
                        [0., 1., 0., 0., 0.]])  # class 5 is outside depth 5: a row of zeros
    _same(got, ref)
    got = torch_npu.npu_one_hot(a, num_classes=0, depth=6, on_value=2, off_value=-1)
    ref = torch.where(F.one_hot(a.cpu().long(), 6).t() == 1, 2.0, -1.0)
    _same(got, ref)
    with pytest.raises(TypeError, match="integer classes"):
        torch_npu.npu_one_hot(a.float(), depth=5)
    with pytest.raises(ValueError, match="depth must be at least 1"):
        torch_npu.npu_one_hot(a, depth=0)


def test_in_place_and_factory_utility_ops():
    x = X.npu().clone()
    assert torch_npu.one_(x) is x
    _same(x, torch.ones_like(X))
    y = torch.zeros_like(X).npu()
    torch_npu.copy_memory_(y, X.npu())
    _same(y, X)
    with pytest.raises(RuntimeError, match="same dtype"):
        torch_npu.copy_memory_(y, X.double().npu())
    with pytest.raises(RuntimeError, match="one npu device"):
        torch_npu.copy_memory_(y, X)
    e = torch_npu.empty_with_format((2, 3), dtype=torch.float16, acl_format=29)
    assert e.device.type == "npu" and e.shape == (2, 3) and e.dtype == torch.float16
    assert torch_npu.get_npu_format(e) == 29
    assert torch_npu.get_npu_format(torch_npu.empty_with_format((2,))) == 2
    r = X.npu().clone()
    out = torch_npu.npu_reshape(r, (5, 12), can_refresh=True)
    assert out is r and r.shape == (5, 12)
    _same(r, X.reshape(5, 12))


def test_utility_ops_have_autograd_through_their_parts():
    x = X.clone().requires_grad_()
    xn = X.npu().requires_grad_()
    torch_npu.fast_gelu(xn).sum().backward()
    (x * torch.sigmoid(1.702 * x)).sum().backward()
    torch.testing.assert_close(xn.grad.cpu(), x.grad, atol=1e-5, rtol=1e-4)


def test_utility_ops_reject_bad_arguments_by_name():
    with pytest.raises(ValueError, match="offset 3 \\+ size 2 does not fit"):
        torch_npu.npu_slice(X.npu(), [3, 0, 0], [2, 1, 1])
    with pytest.raises(ValueError, match="one entry per dimension"):
        torch_npu.npu_slice(X.npu(), [0], [1])
    with pytest.raises(ValueError, match="not output_sizes"):
        torch_npu.npu_bmmV2(X.npu(), X.npu().transpose(1, 2), [3, 5, 5])
    with pytest.raises(TypeError, match="self must be a Tensor"):
        torch_npu.npu_silu([1.0])


# torch_npu also exposes each as torch.ops.npu.<name>: (op, arguments after self)
TORCH_OPS_CASES = [
    ("npu_silu", ()), ("npu_mish", ()), ("fast_gelu", ()), ("npu_transpose", ([2, 0, 1],)),
    ("npu_transpose", ([1, 0, 2], False)), ("npu_confusion_transpose", ([0, 2, 1], [3, 20], True)),
    ("npu_broadcast", ([2, 3, 4, 5],)), ("npu_slice", ([1, 0, 2], [2, 3, 3])),
    ("npu_max", (2,)), ("npu_min", (1, True)), ("npu_dtype_cast", (torch.float16,)),
    ("npu_bmmV2", (X.transpose(1, 2), [3, 4, 4])), ("npu_reshape", ([4, 15],)),
    ("npu_layer_norm_eval", ([5], X[0, 0], X[0, 1], 1e-5)), ("npu_sort_v2", (1, True)),
    ("npu_linear", (X[0], X[1, :, 0])),
    ("npu_softmax_cross_entropy_with_logits", (X.softmax(-1),)),
]


@pytest.mark.parametrize("name,args", TORCH_OPS_CASES, ids=[c[0] for c in TORCH_OPS_CASES])
def test_torch_ops_npu_spelling_gives_the_same_result(name, args):
    to_npu = [a.npu() if isinstance(a, torch.Tensor) else a for a in args]
    got = getattr(torch.ops.npu, name)(X.npu(), *to_npu)
    want = getattr(torch_npu, name)(X.npu(), *to_npu)
    if isinstance(want, tuple):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w.cpu())
    else:
        _same(got, want.cpu())


def test_torch_ops_npu_in_place_factory_one_hot_and_autograd():
    x = X.npu().clone()
    assert torch.ops.npu.one_(x) is x
    _same(x, torch.ones_like(X))
    y = torch.zeros_like(X).npu()
    torch.ops.npu.copy_memory_(y, X.npu())
    _same(y, X)
    e = torch.ops.npu.empty_with_format([2, 3], dtype=torch.float16, acl_format=29)
    assert e.device.type == "npu" and e.dtype == torch.float16 and e.shape == (2, 3)
    assert torch.ops.npu.get_npu_format(e) == 29
    a = torch.tensor([5, 3, 2, 1], dtype=torch.int32)
    _same(torch.ops.npu.npu_one_hot(a.npu(), depth=5),
          torch_npu.npu_one_hot(a.npu(), depth=5).cpu())
    xn = X.npu().requires_grad_()
    x = X.clone().requires_grad_()
    torch.ops.npu.npu_mish(xn).sum().backward()
    F.mish(x).sum().backward()
    torch.testing.assert_close(xn.grad.cpu(), x.grad, atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="does not fit"):
        torch.ops.npu.npu_slice(X.npu(), [3, 0, 0], [2, 1, 1])
