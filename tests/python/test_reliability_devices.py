"""Cross-device arguments raise CUDA's error instead of racing between devices' streams.

An npu kernel runs on its own device's stream; handed a tensor of another device (or of the
host), it would read memory that device's stream may still be writing. So every op checks its
tensor arguments' devices at the call, as CUDA's kernels do (adapter/ops/DeviceCheck.h):
  - the sweeps call every aten op registered for the npu device, and every op that reaches the
    ATen host-kernel path or the CPU fallback, once per tensor argument with that argument on
    another device (npu:1, or a CPU non-scalar), and expect PyTorch's message;
  - the rule of each op is taken from PyTorch's native_functions.yaml independently of the
    adapter: `device_check: NoCheck` ops (TensorIterator) take CPU 0-dim tensors as scalars;
  - the concrete cases of issue 11 (mm, index_select / gather / embedding with the index on the
    other device, cat) and the legitimate mixes (copies, CPU scalars, CPU indices of advanced
    indexing, foreach lists over two devices) still work and match the CPU.
"""

import os

import pytest
import torch
import torch_npu  # noqa: F401

MESSAGE = "Expected all tensors to be on the same device"

# The ops that take tensors on several devices by design (the adapter's kExemptOps; kept here
# apart so a change there shows up as a failure): exempt, and ops whose CPU tensors (indices)
# pass while their npu tensors must agree.
EXEMPT = {"_copy_from", "_copy_from_and_resize", "set_", "is_set_to", "fill_", "masked_fill_",
          "_has_compatible_shallow_copy_type",
          "bernoulli_", "_pack_padded_sequence"}
CPU_INDICES = {"index", "_unsafe_index", "index_put", "index_put_", "_index_put_impl_",
               "_unsafe_index_put", "_unsafe_masked_index", "_unsafe_masked_index_put_accumulate"}

pytestmark = pytest.mark.skipif(torch.npu.device_count() < 2,
                                reason="needs NPU_SIM_DEVICE_COUNT >= 2")


def _no_check_ops():
    import torchgen

    path = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native",
                        "native_functions.yaml")
    names, current = set(), None
    with open(path) as f:
        for line in f:
            if line.startswith("- func:"):
                current = line[len("- func:"):].strip().split("(")[0]
            elif current and line.strip().startswith("device_check:"):
                if line.split(":", 1)[1].split("#")[0].strip() == "NoCheck":
                    names.add(current)
    return names


NO_CHECK = _no_check_ops()


def _exempt(base, odd_device="npu:1"):
    return base in EXEMPT or base.startswith("_foreach_") or \
        (base in CPU_INDICES and odd_device == "cpu")


def _overload(qualified):
    """aten::add.Tensor -> (OpOverload, 'add.Tensor')."""
    name = qualified.split("::", 1)[1]
    base, _, overload = name.partition(".")
    packet = getattr(torch.ops.aten, base)
    return getattr(packet, overload or "default"), name


def _value(arg, tensor):
    """A value of the argument's type; tensors come from `tensor(k)` (k: the argument index)."""
    t = str(arg.type)
    if t.startswith("Optional[") or t.endswith("?"):
        if "Tensor" not in t:
            return None
        t = t[len("Optional["):-1] if t.startswith("Optional[") else t[:-1]
    if t == "Tensor":
        return tensor()
    if t in ("List[Tensor]", "Tensor[]"):
        return [tensor(), tensor()]
    if t in ("List[Optional[Tensor]]", "Tensor?[]"):
        return [tensor()]
    if t in ("int", "SymInt"):
        return 1
    if t in ("float",):
        return 1.0
    if t == "bool":
        return False
    if t in ("number", "Scalar"):
        return 1
    if t.startswith("List[int]") or t.startswith("List[SymInt]") or t.startswith("int[") or t.startswith("SymInt["):
        return [1]
    if t.startswith("List[bool]") or t.startswith("bool["):
        return [True] * (getattr(arg, "N", None) or 3)
    if t.startswith("List[float]"):
        return [1.0]
    if t.startswith("List[number]") or t == "List[Scalar]":
        return [1, 1]
    if t == "str":
        return "none"
    if t == "ScalarType":
        return torch.float32
    raise NotImplementedError(t)


def _tensor_positions(schema):
    return [i for i, a in enumerate(schema.arguments) if "Tensor" in str(a.type)]


def _call(op, schema, odd, odd_device, shape=(2, 2)):
    """Calls op with every tensor on npu:0 except those of argument `odd` (on odd_device)."""
    args, kwargs = [], {}
    for i, a in enumerate(schema.arguments):
        device = odd_device if i == odd else "npu:0"
        v = _value(a, lambda: torch.ones(shape, device=device))
        if a.kwarg_only:
            kwargs[a.name] = v
        else:
            args.append(v)
    return op(*args, **kwargs)


def _sweep(qualified_names, odd_device, shape=(2, 2)):
    """Per op and tensor argument: the message it raised, or what went wrong."""
    problems, checked = [], 0
    for qualified in qualified_names:
        try:
            op, name = _overload(qualified)
            schema = op._schema
            positions = _tensor_positions(schema)
            for a in schema.arguments:
                _value(a, lambda: None)
        except (AttributeError, NotImplementedError, RuntimeError):
            continue  # an argument type the sweep cannot build (Storage, Stream, Dimname...)
        base = name.split(".")[0]
        if _exempt(base, odd_device) or len(positions) < 2:
            continue
        # The first tensor argument sets the common device; each later one is made odd.
        for odd in positions[1:]:
            checked += 1
            try:
                _call(op, schema, odd, odd_device, shape)
            except Exception as e:  # noqa: BLE001 - the message is what is checked
                msg = str(e)
                if MESSAGE in msg and odd_device.split(":")[0] in msg:
                    continue
                if base in CPU_INDICES and "indices should be either on cpu or on the same " \
                        "device" in msg:
                    continue  # PyTorch's own check of the indices came first
                problems.append(f"{name} arg {schema.arguments[odd].name}: {type(e).__name__}: "
                                f"{msg.splitlines()[0][:150]}")
                continue
            problems.append(f"{name} arg {schema.arguments[odd].name}: accepted {odd_device}")
    return problems, checked


def _registered():
    return sorted(r for r in torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")
                  if r.startswith("aten::"))


@pytest.mark.parametrize("odd_device", ["npu:1", "cpu"])
def test_every_registered_op_refuses_a_tensor_on_another_device(odd_device):
    problems, checked = _sweep(_registered(), odd_device)
    assert checked > 300, checked  # the sweep reached the registered ops
    assert not problems, "\n".join(problems)


def test_strict_ops_refuse_a_cpu_scalar_tensor_and_tensor_iterator_ops_accept_it():
    # CUDA's wrapper refuses even a 0-dim CPU tensor; TensorIterator ops take it as a scalar.
    strict_problems, strict_checked = [], 0
    for qualified in _registered():
        op, name = _overload(qualified)
        if name in NO_CHECK or _exempt(name.split(".")[0]):
            continue
        try:
            schema = op._schema
            for a in schema.arguments:
                _value(a, lambda: None)
        except NotImplementedError:
            continue
        positions = [i for i in _tensor_positions(schema)
                     if str(schema.arguments[i].type) in ("Tensor", "Optional[Tensor]")]
        for odd in positions[1:]:
            strict_checked += 1
            try:
                _call(op, schema, odd, "cpu", shape=())
                strict_problems.append(f"{name}: accepted a CPU 0-dim {schema.arguments[odd].name}")
            except Exception as e:  # noqa: BLE001
                if MESSAGE not in str(e):
                    strict_problems.append(f"{name}: {str(e).splitlines()[0][:150]}")
    assert strict_checked > 50
    assert not strict_problems, "\n".join(strict_problems)
    x = torch.tensor([1.0, -2.0, 3.0], device="npu:0")
    assert torch.equal((x * torch.tensor(2.0)).cpu(), x.cpu() * 2)
    assert torch.equal(torch.where(x > 0, x, torch.tensor(0.0)).cpu(),
                       torch.where(x.cpu() > 0, x.cpu(), torch.tensor(0.0)))
    assert torch.equal(x.clone().masked_fill_(x > 0, torch.tensor(7.0)).cpu(),
                       x.cpu().masked_fill(x.cpu() > 0, torch.tensor(7.0)))
    assert torch.equal(torch.lerp(x, x * 3, torch.tensor(0.5)).cpu(),
                       torch.lerp(x.cpu(), x.cpu() * 3, torch.tensor(0.5)))
    assert torch.equal(x.clone().fill_(torch.tensor(4.0)).cpu(), torch.full((3,), 4.0))
    # ... as an input only: a CPU tensor the op would write is refused (TensorIterator's rule).
    for write in (lambda: torch.sum(x, 0, out=torch.tensor(0.0)),
                  lambda: torch.add(x[0], x[1], out=torch.tensor(0.0)),
                  lambda: torch.amax(x, 0, out=torch.tensor(0.0)),
                  lambda: torch.cumsum(x[:1].view(()), 0, out=torch.tensor(0.0))):
        with pytest.raises(RuntimeError, match=MESSAGE):
            write()


def _host_path_ops():
    """aten ops that reach our boxed path: a CPU kernel, none of ours, no composite kernel."""
    names = []
    registered = set(_registered())
    for qualified in torch._C._dispatch_get_all_op_names():
        if not qualified.startswith("aten::") or qualified in registered:
            continue
        has = lambda key: torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key)  # noqa: E731
        if not has("CPU") or has("CompositeImplicitAutograd") or \
                has("CompositeExplicitAutograd") or has("CompositeExplicitAutogradNonFunctional"):
            continue
        names.append(qualified)
    return sorted(names)


@pytest.mark.parametrize("odd_device", ["npu:1", "cpu"])
def test_host_kernel_path_and_fallback_refuse_a_tensor_on_another_device(odd_device):
    names = _host_path_ops()
    problems, checked = _sweep(names, odd_device, shape=(2, 2))
    assert checked > 200, checked
    assert not problems, "\n".join(problems)


# ---- the cases of issue 11, and the legitimate mixes --------------------------------------

def _on(device, *tensors):
    return [t.to(device) for t in tensors]


@pytest.mark.parametrize("other", ["npu:1", "cpu"])
def test_issue_cases_raise_with_cuda_message(other):
    a, b = torch.randn(4, 4, device="npu:0"), torch.randn(4, 4, device=other)
    idx = torch.tensor([0, 2], device=other)
    cases = {
        "mm": lambda: a @ b,
        "mm.out": lambda: torch.mm(a, a, out=torch.empty(4, 4, device=other)),
        "addmm": lambda: torch.addmm(a, a, b),
        "bmm": lambda: torch.bmm(a[None], b[None]),
        "index_select": lambda: torch.index_select(a, 0, idx),
        "gather": lambda: torch.gather(a, 0, idx.view(2, 1)),
        "scatter_": lambda: a.clone().scatter_(0, idx.view(2, 1), b),
        "index_add_": lambda: a.clone().index_add_(0, idx, b[:2]),
        "embedding": lambda: torch.nn.functional.embedding(idx, a),
        "cat": lambda: torch.cat([a, b]),
        "linear": lambda: torch.nn.functional.linear(a, b),
        "softmax.out": lambda: torch._softmax(a, 0, False, out=torch.empty(4, 4, device=other)),
    }
    for name, f in cases.items():
        with pytest.raises(RuntimeError, match=MESSAGE) as info:
            f()
        assert other in str(info.value), (name, str(info.value))
    # The argument is named, as the generated wrappers do (in torch_npu's words: both devices,
    # then the argument).
    with pytest.raises(RuntimeError, match=r"at least two devices, npu:0 and " + other +
                       r"! \(when checking argument for argument mat2 in method aten::mm\)"):
        torch.mm(a, b)
    with pytest.raises(RuntimeError, match=r"npu:0 and " + other + r"! .*argument index in"):
        torch.index_select(a, 0, idx)


def test_cpu_scalar_in_tensor_iterator_ops_and_foreach_lists_over_devices_work():
    # _foreach ops over a list spanning two devices take the per-tensor path (as CUDA does).
    xs = [torch.randn(3, device="npu:0"), torch.randn(3, device="npu:1")]
    ys = [torch.randn(3, device="npu:0"), torch.randn(3, device="npu:1")]
    ref = [x.cpu() + 2 * y.cpu() for x, y in zip(xs, ys)]
    torch._foreach_add_(xs, ys, alpha=2)
    for x, r in zip(xs, ref):
        assert torch.equal(x.cpu(), r)
    # ... but each pair must share its device.
    with pytest.raises(RuntimeError, match=MESSAGE):
        torch._foreach_add_([torch.ones(3, device="npu:0")], [torch.ones(3, device="npu:1")])


def test_masked_fill_follows_cuda_rule():
    x = torch.tensor([1.0, -2.0, 3.0], device="npu:0")
    mask = x > 0
    with pytest.raises(RuntimeError, match="expected self and mask to be on the same device, "
                                           "but got mask on npu:1 and self on npu:0"):
        x.clone().masked_fill_(mask.to("npu:1"), 1.0)
    with pytest.raises(RuntimeError, match="expected self and mask to be on the same device"):
        x.clone().masked_fill_(torch.tensor(True), 1.0)  # even a 0-dim CPU mask, as on CUDA
    ref = x.cpu().masked_fill(mask.cpu(), 5.0)
    for value in (torch.tensor(5.0), torch.tensor(5.0, device="npu:1")):  # value: any device
        assert torch.equal(x.clone().masked_fill_(mask, value).cpu(), ref)


def test_advanced_indexing_npu_tensors_must_agree():
    x = torch.zeros(4, 3, device="npu:0")
    idx = torch.tensor([0, 2])
    with pytest.raises(RuntimeError, match=MESSAGE):
        x.index_put_((idx,), torch.ones(2, 3, device="npu:1"))
    x.index_put_((idx,), torch.ones(2, 3, device="npu:0"))  # CPU indices, npu values
    assert torch.equal(x.cpu()[idx], torch.ones(2, 3))


def test_copies_between_devices_still_work():
    a = torch.randn(5, 7)
    x0 = a.to("npu:0")
    x1 = x0.to("npu:1")
    assert x1.device == torch.device("npu:1") and torch.equal(x1.cpu(), a)
    y = torch.empty(5, 7, device="npu:1")
    y.copy_(x0)
    assert torch.equal(y.cpu(), a)
    z = torch.empty(5, 7)
    z.copy_(x1)
    assert torch.equal(z, a)
    x0.copy_(torch.ones(5, 7))
    assert torch.equal(x0.cpu(), torch.ones(5, 7))


def test_advanced_indexing_with_cpu_indices_works_as_on_cuda():
    a = torch.randn(6, 4)
    x = a.to("npu:0")
    idx = torch.tensor([5, 0, 3])
    assert torch.equal(x[idx].cpu(), a[idx])
    assert torch.equal(x[idx, 1:].cpu(), a[idx, 1:])
    y, b = x.clone(), a.clone()
    y[idx] = 1.0
    b[idx] = 1.0
    assert torch.equal(y.cpu(), b)
    y.index_put_((idx,), torch.zeros(3, 4, device="npu:0"), accumulate=True)
    b.index_put_((idx,), torch.zeros(3, 4), accumulate=True)
    assert torch.equal(y.cpu(), b)
    # an index on another npu device is refused by the CPU kernel's own rule
    with pytest.raises(RuntimeError):
        x[idx.to("npu:1")]


def test_same_device_ops_on_the_second_device_are_unaffected():
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    x, y = a.to("npu:1"), b.to("npu:1")
    assert torch.allclose((x @ y).cpu(), a @ b, rtol=1e-5, atol=1e-5)
    idx = torch.tensor([7, 1, 1])
    assert torch.equal(torch.index_select(x, 0, idx.to("npu:1")).cpu(), a[idx])
    assert torch.equal(torch.cat([x, y]).cpu(), torch.cat([a, b]))
    assert torch.equal(torch.nn.functional.embedding(idx.to("npu:1"), x).cpu(), a[idx])
