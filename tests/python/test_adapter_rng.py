"""The npu generators: one per device, seeded and saved like the CPU one, driving the native RNG
kernels. The values come from ATen's CPU kernels with a per-launch seed, so their statistics
are compared with the CPU's and their reproducibility is checked exactly."""

import pytest
import torch

import torch_npu

C = torch_npu._C


def draws(device="npu:0"):
    return [
        torch.randn(50, device=device),
        torch.rand(50, device=device),
        torch.randint(-5, 5, (50,), device=device),
        torch.empty(50, device=device).bernoulli_(0.3),
        torch.empty(50, device=device).exponential_(2.0),
        torch.empty(50, device=device).normal_(3.0, 0.5)[::2],
        torch.randperm(20, device=device),
        torch.nn.functional.dropout(torch.ones(50, device=device), 0.5),
    ]


def test_manual_seed_reproduces_every_native_rng_op():
    gen = C._npu_getDefaultGenerator(0)
    gen.manual_seed(2024)
    first = [t.cpu() for t in draws()]
    gen.manual_seed(2024)
    second = [t.cpu() for t in draws()]
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    gen.manual_seed(2025)
    assert not torch.equal(torch.randn(50, device="npu").cpu(), first[0])
    assert torch_npu._C._fallback_ops().keys().isdisjoint(
        {"aten::normal_", "aten::uniform_", "aten::random_.from", "aten::bernoulli_.float",
         "aten::exponential_", "aten::randperm.generator_out", "aten::native_dropout"})


def test_default_generator_object():
    g0 = C._npu_getDefaultGenerator(0)
    g1 = C._npu_getDefaultGenerator(1)
    assert isinstance(g0, torch.Generator)
    assert g0.device == torch.device("npu:0") and g1.device == torch.device("npu:1")
    g0.manual_seed(11)
    assert C._npu_getDefaultGenerator(0).initial_seed() == 11  # the same generator


def test_state_save_and_restore():
    g = C._npu_getDefaultGenerator(0)
    g.manual_seed(7)
    torch.rand(10, device="npu")
    state = g.get_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    assert state.shape == torch.Generator().get_state().shape  # the CPU generator's format
    a = torch.rand(10, device="npu").cpu()
    g.set_state(state)
    assert torch.equal(torch.rand(10, device="npu").cpu(), a)


def test_devices_have_independent_generators():
    g0, g1 = C._npu_getDefaultGenerator(0), C._npu_getDefaultGenerator(1)
    g0.manual_seed(1)
    g1.manual_seed(1)
    a = torch.randn(20, device="npu:0").cpu()
    b = torch.randn(20, device="npu:1").cpu()
    assert torch.equal(a, b)  # same seed, same stream of values
    g0.manual_seed(1)
    g1.manual_seed(99)
    torch.randn(20, device="npu:1")  # drawing on device 1 does not advance device 0
    assert torch.equal(torch.randn(20, device="npu:0").cpu(), a)


def test_explicit_generators():
    g = torch.Generator(device="npu:1")
    assert g.device == torch.device("npu:1")
    g.manual_seed(42)
    clone = g.clone_state()
    a = torch.randn(30, device="npu:1", generator=g).cpu()
    b = torch.randn(30, device="npu:1", generator=clone).cpu()
    assert torch.equal(a, b)
    s = g.seed()  # a non-deterministic seed becomes the initial seed
    assert g.initial_seed() == s
    with pytest.raises(RuntimeError, match="npu"):
        torch.randn(3, device="npu", generator=torch.Generator())  # a CPU generator


def test_statistics_match_the_cpu():
    torch.manual_seed(0)
    n = 200_000
    for make in (lambda d: torch.randn(n, device=d), lambda d: torch.rand(n, device=d) * 4 - 1,
                 lambda d: torch.empty(n, device=d).exponential_(3.0)):
        npu, cpu = make("npu").cpu(), make("cpu")
        assert abs(npu.mean() - cpu.mean()) < 0.02
        assert abs(npu.std() - cpu.std()) < 0.02
    r = torch.randint(3, 9, (n,), device="npu").cpu()
    assert r.min() == 3 and r.max() == 8
    assert torch.equal(torch.randperm(100, device="npu").cpu().sort().values, torch.arange(100))
    mask = torch.nn.functional.dropout(torch.ones(n, device="npu"), 0.25).cpu()
    assert set(mask.unique().tolist()) <= {0.0, torch.tensor(1 / 0.75).item()}
    assert abs((mask == 0).float().mean() - 0.25) < 0.01


def test_bad_arguments_raise_at_once_like_cpu():
    for op in (lambda t: t.normal_(0, -1), lambda t: t.uniform_(2, 1),
               lambda t: t.random_(5, 2), lambda t: t.bernoulli_(1.5)):
        with pytest.raises(RuntimeError) as cpu_error:
            op(torch.empty(3))
        with pytest.raises(RuntimeError) as npu_error:
            op(torch.empty(3, device="npu"))
        assert str(cpu_error.value).splitlines()[0] in str(npu_error.value)


def test_dropout_backward_uses_the_mask():
    torch.manual_seed(3)
    x = torch.ones(1000, device="npu", requires_grad=True)
    y = torch.nn.functional.dropout(x, 0.5)
    y.sum().backward()
    assert torch.equal(x.grad.cpu(), y.detach().cpu())  # d(sum)/dx is mask * scale
