"""GradScaler on npu: the two aten kernels against PyTorch's CPU kernels, and torch.amp.GradScaler
("npu") / torch.npu.amp.GradScaler() against torch.amp.GradScaler("cpu") over training steps with
injected inf/nan (same scale trajectory, same skipped steps, same parameters)."""

import copy
import math

import pytest
import torch

import torch_npu

FLOATS = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


class NoHost:
    """Asserts that the block ran only library kernels (no ATen host kernel, no fallback)."""

    def __enter__(self):
        self.before = torch_npu._C._npu_pathTotals()

    def __exit__(self, *exc):
        if exc[0] is None:
            assert torch_npu._C._npu_pathTotals() == self.before, "an op left the kernel library"


def grads_for(dtype, bad=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(3, 5), (70001,), (1,), (4, 6)]
    out = [(torch.rand(s, generator=g, dtype=torch.float64) * 200 - 100).to(dtype) for s in shapes]
    out[3] = out[3].t()  # dense but not contiguous
    if bad is not None:
        out[1][50000] = bad
    return out


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("bad", [None, math.inf, -math.inf, math.nan], ids=str)
@pytest.mark.parametrize("inv", [0.125, 1.0, 1 / 3], ids=str)
def test_unscale_matches_the_cpu_kernel(dtype, bad, inv):
    cpu = grads_for(dtype, bad)
    dev = [t.npu() for t in cpu]
    found_cpu, found_dev = torch.zeros(1), torch.zeros(1).npu()
    inv_cpu = torch.full((1,), inv)
    with NoHost():
        torch._amp_foreach_non_finite_check_and_unscale_(dev, found_dev, inv_cpu.npu())
    torch._amp_foreach_non_finite_check_and_unscale_(cpu, found_cpu, inv_cpu)
    assert found_dev.item() == found_cpu.item() == (0.0 if bad is None else 1.0)
    for d, c in zip(dev, cpu):
        assert d.stride() == c.stride()
        torch.testing.assert_close(d.cpu(), c, rtol=0, atol=0, equal_nan=True)


def test_unscale_strided_views_mixed_dtypes_and_found_inf_kept():
    base = torch.randn(6, 8)
    base[4, 2] = math.nan  # inside the view below
    cpu = [base[:, ::2], torch.randn(5).half()]
    dev_base = base.npu()
    dev = [dev_base[:, ::2], cpu[1].npu()]
    found_cpu, found_dev = torch.zeros(()), torch.zeros(()).npu()
    inv = torch.tensor(0.5)
    torch._amp_foreach_non_finite_check_and_unscale_(dev, found_dev, inv.npu())
    torch._amp_foreach_non_finite_check_and_unscale_([t.clone() for t in cpu], found_cpu, inv)
    assert found_dev.item() == 1.0
    want = base.clone()
    want[:, ::2] *= 0.5
    torch.testing.assert_close(dev_base.cpu(), want, equal_nan=True)  # columns between untouched
    torch.testing.assert_close(dev[1].cpu(), cpu[1] * 0.5)
    # found_inf is only ever set: finite grads leave a 1 from an earlier list in place.
    found = torch.ones(1).npu()
    torch._amp_foreach_non_finite_check_and_unscale_([torch.ones(3).npu()], found,
                                                    torch.ones(1).npu())
    assert found.item() == 1.0


def test_unscale_argument_checks():
    g = [torch.ones(3).npu()]
    with pytest.raises(RuntimeError, match="found_inf must be a float tensor"):
        torch._amp_foreach_non_finite_check_and_unscale_(g, torch.zeros(1).double().npu(),
                                                        torch.ones(1).npu())
    with pytest.raises(RuntimeError, match="inv_scale must be a 1-element tensor"):
        torch._amp_foreach_non_finite_check_and_unscale_(g, torch.zeros(1).npu(),
                                                        torch.ones(2).npu())
    # Grads on the CPU with npu scalars (on CUDA: the same kind of error).
    with pytest.raises(RuntimeError, match="npu|NPU|device"):
        torch._amp_foreach_non_finite_check_and_unscale_([torch.ones(3)], torch.zeros(1).npu(),
                                                        torch.ones(1).npu())


@pytest.mark.parametrize("interval", [1, 3])
def test_update_scale_matches_the_cpu_kernel(interval):
    pattern = [0, 0, 0, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0]
    s_cpu, t_cpu = torch.full((1,), 1024.0), torch.zeros(1, dtype=torch.int32)
    s_dev, t_dev = s_cpu.npu(), t_cpu.npu()
    for f in pattern:
        found = torch.full((1,), float(f))
        with NoHost():
            r = torch._amp_update_scale_(s_dev, t_dev, found.npu(), 2.0, 0.5, interval)
        assert r is s_dev
        torch._amp_update_scale_(s_cpu, t_cpu, found, 2.0, 0.5, interval)
        assert s_dev.item() == s_cpu.item()
        assert t_dev.item() == t_cpu.item()
    # Growth that would overflow float is refused on both.
    s_dev.fill_(3e38)
    s_cpu.fill_(3e38)
    torch._amp_update_scale_(s_dev, t_dev.zero_(), torch.zeros(1).npu(), 2.0, 0.5, 1)
    torch._amp_update_scale_(s_cpu, t_cpu.zero_(), torch.zeros(1), 2.0, 0.5, 1)
    assert s_dev.item() == s_cpu.item() == pytest.approx(3e38)


def test_update_scale_argument_checks():
    s, f = torch.ones(1).npu(), torch.zeros(1).npu()
    with pytest.raises(RuntimeError, match="growth_tracker must be an int tensor"):
        torch._amp_update_scale_(s, torch.zeros(1).npu(), f, 2.0, 0.5, 10)
    with pytest.raises(RuntimeError, match="current_scale must be a float tensor"):
        torch._amp_update_scale_(s.double(), torch.zeros(1, dtype=torch.int32).npu(), f, 2.0,
                                 0.5, 10)


# ---- GradScaler over training steps --------------------------------------------------------

def model_and_data():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    x, y = torch.randn(32, 8), torch.randn(32, 4)
    return model, x, y


# Steps whose gradients get an inf or a nan injected (after backward, as an overflow would).
INJECT = {2: math.inf, 5: math.nan, 6: -math.inf}


def train(device, make_scaler, make_opt, steps=12):
    model, x, y = model_and_data()
    model = model.to(device)
    x, y = x.to(device), y.to(device)
    opt = make_opt(model.parameters())
    scaler = make_scaler()
    scales, params = [], []
    for step in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        if step in INJECT:
            model[0].weight.grad[1, 1] = INJECT[step]
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
        params.append([p.detach().cpu().clone() for p in model.parameters()])
    return scales, params, scaler


SCALERS = {
    "torch.amp.GradScaler('npu')": lambda: torch.amp.GradScaler("npu", init_scale=2.0**10,
                                                                growth_interval=3),
    "torch.npu.amp.GradScaler()": lambda: torch.npu.amp.GradScaler(init_scale=2.0**10,
                                                                   growth_interval=3),
}
OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
    "adamw-foreach": lambda p: torch.optim.AdamW(p, lr=0.01, foreach=True),
}


@pytest.mark.parametrize("scaler", list(SCALERS), ids=str)
@pytest.mark.parametrize("opt", list(OPTIMIZERS), ids=str)
def test_grad_scaler_tracks_the_cpu(scaler, opt):
    cpu_scaler = lambda: torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=3)  # noqa: E731
    s_npu, p_npu, sc = train("npu", SCALERS[scaler], OPTIMIZERS[opt])
    s_cpu, p_cpu, _ = train("cpu", cpu_scaler, OPTIMIZERS[opt])
    assert sc._device == "npu" and sc._scale.device.type == "npu"
    assert s_npu == s_cpu
    # The trajectory itself: growth every 3 clean steps, halving on each injected step.
    assert s_cpu[2] == 2.0**9 and s_cpu[5] == s_cpu[4] / 2 and s_cpu[6] == s_cpu[5] / 2
    assert s_cpu[9] == 2 * s_cpu[8]  # three clean steps (7, 8, 9): growth
    for step, (a, b) in enumerate(zip(p_npu, p_cpu)):
        for u, v in zip(a, b):
            torch.testing.assert_close(u, v, rtol=1e-5, atol=1e-6, msg=f"step {step}")
    # A skipped step leaves the parameters as they were.
    for step in INJECT:
        for u, v in zip(p_npu[step], p_npu[step - 1]):
            assert torch.equal(u, v)


def test_grad_scaler_with_a_fused_optimizer_skips_on_the_device():
    make_fused = lambda p: torch.optim.AdamW(p, lr=0.01, fused=True)  # noqa: E731
    make_plain = lambda p: torch.optim.AdamW(p, lr=0.01, foreach=False)  # noqa: E731
    s_npu, p_npu, _ = train("npu", SCALERS["torch.npu.amp.GradScaler()"], make_fused)
    s_cpu, p_cpu, _ = train(
        "cpu", lambda: torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=3),
        make_plain)
    assert s_npu == s_cpu
    for step, (a, b) in enumerate(zip(p_npu, p_cpu)):
        for u, v in zip(a, b):
            torch.testing.assert_close(u, v, rtol=1e-5, atol=1e-6, msg=f"step {step}")


def test_grad_scaler_state_dict_round_trips():
    _, _, sc = train("npu", SCALERS["torch.npu.amp.GradScaler()"], OPTIMIZERS["sgd"], steps=8)
    _, _, ref = train("cpu", lambda: torch.amp.GradScaler("cpu", init_scale=2.0**10,
                                                          growth_interval=3),
                      OPTIMIZERS["sgd"], steps=8)
    state = sc.state_dict()
    assert state == ref.state_dict()
    assert set(state) == {"scale", "growth_factor", "backoff_factor", "growth_interval",
                          "_growth_tracker"}
    fresh = torch.npu.amp.GradScaler()
    fresh.load_state_dict(copy.deepcopy(state))
    assert fresh.state_dict() == state
    assert fresh.get_scale() == sc.get_scale()
    assert fresh._get_growth_tracker() == sc._get_growth_tracker()
    # ... and a CPU scaler takes it too (a checkpoint moves between devices).
    on_cpu = torch.amp.GradScaler("cpu")
    on_cpu.load_state_dict(state)
    assert on_cpu.state_dict() == state


def test_static_scale_with_dynamic_false_still_skips():
    make = lambda: torch.npu.amp.GradScaler(init_scale=128.0, growth_interval=1, dynamic=False)  # noqa: E731
    scales, params, sc = train("npu", make, OPTIMIZERS["sgd"], steps=8)
    assert not sc.is_dynamic()
    assert scales == [128.0] * 8
    for step in INJECT:
        for u, v in zip(params[step], params[step - 1]):
            assert torch.equal(u, v)
    assert not torch.equal(params[7][0], params[6][0])  # clean steps do update


def test_disabled_scaler_is_a_no_op():
    sc = torch.npu.amp.GradScaler(enabled=False)
    loss = torch.tensor(3.0).npu()
    assert sc.scale(loss) is loss
    assert not sc.is_enabled()
