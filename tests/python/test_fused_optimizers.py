"""Fused optimizers on npu: aten::_fused_adamw_ / _fused_adam_ / _fused_sgd_ (torch.optim's
fused=True) and torch_npu.optim's NpuFusedAdamW / NpuFusedAdam / NpuFusedSGD, against
torch.optim's non-fused CPU implementation over several steps, and against PyTorch's CPU fused
kernels when grad_scale / found_inf / a tensor lr are passed."""

import copy

import pytest
import torch

import torch_npu
from torch_npu.optim import NpuFusedAdam, NpuFusedAdamW, NpuFusedSGD

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# float32 tracks the CPU's non-fused step to rounding. 16-bit params: the non-fused CPU path
# rounds after every op of the update while the fused kernels compute in float32 and round each
# stored value once, so they differ by an ulp or two of values around 1-4 (and the non-fused
# float16 Adam is no reference at all: eps=1e-8 rounds to 0 in float16 and 1 - beta2 = 1e-3
# times a small grad squared underflows, so it divides by zero). 16-bit Adam is compared with
# PyTorch's own CPU fused kernel instead, which computes in float32 too (it agrees bit for bit).
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-6), torch.float16: dict(rtol=4e-3, atol=4e-3),
       torch.bfloat16: dict(rtol=3e-2, atol=3.2e-2), torch.float64: dict(rtol=1e-12, atol=1e-12)}
SHAPES = [(7, 5), (70001,), (1,), (3, 4, 2)]


class NoHost:
    def __enter__(self):
        self.before = torch_npu._C._npu_pathTotals()

    def __exit__(self, *exc):
        if exc[0] is None:
            assert torch_npu._C._npu_pathTotals() == self.before, "an op left the kernel library"


def make_params(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g).to(dtype) for s in SHAPES]


def run(make_opt, device, dtype, steps=5, seed=0):
    params = [p.to(device).requires_grad_() for p in make_params(dtype, seed)]
    opt = make_opt(params)
    g = torch.Generator().manual_seed(seed + 100)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=g).to(dtype).to(device)
        opt.step()
    return [p.detach().cpu() for p in params], opt


def compare(make_npu, make_cpu, dtype, steps=5):
    got, opt = run(make_npu, "npu", dtype, steps)
    want, ref = run(make_cpu, "cpu", dtype, steps)
    for i, (a, b) in enumerate(zip(got, want)):
        torch.testing.assert_close(a, b, **TOL[dtype], msg=f"param {i}")
    return opt, ref


ADAM_OPTIONS = [dict(), dict(weight_decay=0.1), dict(amsgrad=True, weight_decay=0.01),
                dict(maximize=True), dict(betas=(0.8, 0.95), eps=1e-6, amsgrad=True)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("cls", [torch.optim.AdamW, torch.optim.Adam], ids=lambda c: c.__name__)
@pytest.mark.parametrize("options", ADAM_OPTIONS, ids=str)
def test_adam_fused_matches_cpu_non_fused(dtype, cls, options):
    cpu_path = dict(foreach=False) if dtype == torch.float32 else dict(fused=True)
    opt, ref = compare(lambda p: cls(p, lr=0.01, fused=True, **options),
                       lambda p: cls(p, lr=0.01, **cpu_path, **options), dtype)
    for p, q in zip(opt.param_groups[0]["params"], ref.param_groups[0]["params"]):
        for key in ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if options.get("amsgrad") else ()):
            torch.testing.assert_close(opt.state[p][key].cpu(), ref.state[q][key], **TOL[dtype])
        assert opt.state[p]["step"].item() == ref.state[q]["step"].item() == 5


SGD_OPTIONS = [dict(), dict(momentum=0.9), dict(momentum=0.9, nesterov=True, weight_decay=0.01),
               dict(momentum=0.5, dampening=0.1, maximize=True), dict(weight_decay=0.1)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("options", SGD_OPTIONS, ids=str)
def test_sgd_fused_matches_cpu_non_fused(dtype, options):
    compare(lambda p: torch.optim.SGD(p, lr=0.05, fused=True, **options),
            lambda p: torch.optim.SGD(p, lr=0.05, foreach=False, **options), dtype)


def test_a_fused_step_is_one_library_kernel_and_no_host_work():
    params = [p.npu().requires_grad_() for p in make_params(torch.float32)]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(params, fused=True)
    opt.step()  # creates the state
    with NoHost():
        opt.step()


# ---- the aten ops with grad_scale / found_inf / tensor lr, against PyTorch's CPU kernels ----

def adam_lists(device, dtype, amsgrad, seed=0):
    g = torch.Generator().manual_seed(seed)
    def rand(low=-1.0, high=1.0):
        return [(torch.rand(s, generator=g) * (high - low) + low).to(dtype).to(device)
                for s in SHAPES]
    params, grads, m, v = rand(), rand(-64, 64), rand(-0.1, 0.1), rand(0, 0.1)
    vmax = rand(0, 0.1) if amsgrad else []
    steps = [torch.tensor(float(i + 3)).to(device) for i in range(len(SHAPES))]
    return params, grads, m, v, vmax, steps


@pytest.mark.parametrize("op", ["_fused_adamw_", "_fused_adam_"])
@pytest.mark.parametrize("dtype", DTYPES + [torch.float64], ids=str)
@pytest.mark.parametrize("found", [0.0, 1.0])
@pytest.mark.parametrize("tensor_lr", [False, True])
def test_fused_adam_op_with_grad_scale_found_inf_matches_cpu_kernel(op, dtype, found, tensor_lr):
    fn = getattr(torch, op)
    amsgrad = dtype != torch.float32
    cpu = adam_lists("cpu", dtype, amsgrad)
    dev = adam_lists("npu", dtype, amsgrad)
    before = copy.deepcopy(cpu)
    lr = torch.tensor(0.05) if tensor_lr else 0.05
    kwargs = dict(beta1=0.9, beta2=0.99, weight_decay=0.1, eps=1e-8, amsgrad=amsgrad,
                  maximize=False)
    fn(*cpu, lr=lr, grad_scale=torch.tensor(64.0), found_inf=torch.tensor(found), **kwargs)
    with NoHost():
        fn(*dev, lr=lr.npu() if tensor_lr else lr, grad_scale=torch.tensor(64.0).npu(),
           found_inf=torch.tensor(found).npu(), **kwargs)
    for name, d, c, b in zip(("params", "grads", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs"),
                             dev, cpu, before):
        for x, y, z in zip(d, c, b):
            torch.testing.assert_close(x.cpu(), y, **TOL[dtype], msg=name)
            if found:
                assert torch.equal(x.cpu(), z), f"{name} changed on a skipped step"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("found", [0.0, 1.0])
@pytest.mark.parametrize("first", [False, True])
def test_fused_sgd_op_with_grad_scale_found_inf_matches_cpu_kernel(dtype, found, first):
    # The reference is PyTorch's CPU kernel run in float64 on the same values (its 16-bit
    # variant is off by ~0.33 on this case in torch 2.13, far beyond rounding).
    def lists(device, dt):
        g = torch.Generator().manual_seed(1)
        return [[torch.randn(s, generator=g).to(dtype).to(dt).to(device) for s in SHAPES]
                for _ in range(3)]
    cpu, dev = lists("cpu", torch.float64), lists("npu", dtype)
    before = copy.deepcopy(dev)
    kwargs = dict(weight_decay=0.01, momentum=0.9, lr=0.1, dampening=0.0, nesterov=True,
                  maximize=False, is_first_step=first)
    torch._fused_sgd_(*cpu, grad_scale=torch.tensor(8.0), found_inf=torch.tensor(found), **kwargs)
    with NoHost():
        torch._fused_sgd_(*dev, grad_scale=torch.tensor(8.0).npu(),
                          found_inf=torch.tensor(found).npu(), **kwargs)
    for d, c, b in zip(dev, cpu, before):
        for x, y, z in zip(d, c, b):
            torch.testing.assert_close(x.cpu(), y.to(dtype), **TOL[dtype])
            if found:
                assert torch.equal(x, z)


def test_fused_ops_refuse_bad_lists_with_clear_errors():
    p = [torch.randn(3).npu()]
    steps = [torch.tensor(1.0).npu()]
    with pytest.raises(RuntimeError, match=r"grads\[0\] has dtype Half but its param has Float"):
        torch._fused_adamw_(p, [torch.randn(3).half().npu()], [torch.zeros(3).npu()],
                            [torch.zeros(3).npu()], [], steps, lr=0.1, beta1=0.9, beta2=0.99,
                            weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
    with pytest.raises(RuntimeError, match=r"same strides"):
        q = [torch.randn(4, 3).npu()]
        torch._fused_sgd_(q, [torch.randn(3, 4).npu().t()], [], weight_decay=0.0, momentum=0.0,
                          lr=0.1, dampening=0.0, nesterov=False, maximize=False,
                          is_first_step=False)
    with pytest.raises(RuntimeError, match=r"state_step"):
        torch._fused_adam_(p, [torch.randn(3).npu()], [torch.zeros(3).npu()],
                           [torch.zeros(3).npu()], [], [torch.tensor(1.0)], lr=0.1, beta1=0.9,
                           beta2=0.99, weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)


@pytest.mark.parametrize("step_dtype", [torch.int64, torch.int32, torch.float64], ids=str)
def test_fused_adamw_takes_a_step_of_another_real_dtype_as_the_cpu_kernel(step_dtype):
    # DeepSpeed's FusedAdam keeps its step as an int64 tensor; ATen's CPU kernel takes it.
    cpu = adam_lists("cpu", torch.float32, False)
    dev = adam_lists("npu", torch.float32, False)
    for lists in (cpu, dev):
        lists[5][:] = [s.to(step_dtype) for s in lists[5]]
    kwargs = dict(lr=0.05, beta1=0.9, beta2=0.99, weight_decay=0.1, eps=1e-8, amsgrad=False,
                  maximize=False)
    torch._fused_adamw_(*cpu, **kwargs)
    with NoHost():
        torch._fused_adamw_(*dev, **kwargs)
    for d, c in zip(dev[0], cpu[0]):
        torch.testing.assert_close(d.cpu(), c, **TOL[torch.float32])
    assert all(s.dtype == step_dtype for s in dev[5])  # the caller's steps are left as they are


# ---- torch_npu.optim ---------------------------------------------------------------------

def test_npu_fused_optimizers_take_torch_npus_defaults():
    p = [torch.zeros(2).npu().requires_grad_()]
    d = NpuFusedAdamW(p).defaults
    assert (d["lr"], d["betas"], d["eps"], d["weight_decay"], d["amsgrad"], d["fused"]) == \
        (1e-3, (0.9, 0.999), 1e-8, 1e-2, False, True)
    d = NpuFusedAdam(p).defaults
    assert (d["weight_decay"], d["fused"]) == (0, True)
    d = NpuFusedSGD(p, lr=0.1).defaults
    assert (d["momentum"], d["dampening"], d["weight_decay"], d["nesterov"], d["fused"]) == \
        (0, 0, 0, False, True)
    for bad in (dict(lr=-1.0), dict(betas=(1.5, 0.9)), dict(eps=-1.0), dict(weight_decay=-0.1)):
        with pytest.raises(ValueError):
            NpuFusedAdamW(p, **bad)
    with pytest.raises(ValueError, match="learning rate"):
        NpuFusedSGD(p)


@pytest.mark.parametrize("npu_cls,cpu_cls,kwargs", [
    (NpuFusedAdamW, torch.optim.AdamW, dict(lr=2e-3, weight_decay=0.05)),
    (NpuFusedAdam, torch.optim.Adam, dict(lr=2e-3, weight_decay=0.05, amsgrad=True)),
    (NpuFusedSGD, torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
], ids=lambda x: getattr(x, "__name__", ""))
def test_npu_fused_optimizers_match_torch_optim_on_cpu(npu_cls, cpu_cls, kwargs):
    # torch_npu's documented example: float32 and float16 params in one list, the last without
    # a gradient (left alone).
    def params(device):
        ps = [torch.arange(6).reshape(2, 3).float(), torch.arange(12).reshape(4, 3).float(),
              torch.arange(6).reshape(2, 3).half(), torch.arange(12).reshape(4, 3).half(),
              torch.arange(15).reshape(5, 3).float(), torch.arange(6).reshape(2, 3).float()]
        ps = [p.to(device).requires_grad_() for p in ps]
        for p in ps[:-1]:
            p.grad = p.detach().clone() / 100.0
        return ps
    # float32 params against torch.optim's non-fused CPU step; float16 ones against PyTorch's
    # CPU fused kernel for Adam (see TOL: the non-fused float16 Adam divides 0 by 0 for these
    # zero params and gives NaN) and against the non-fused step for SGD.
    got, want, want_fused = params("npu"), params("cpu"), params("cpu")
    o_npu, o_cpu = npu_cls(got, **kwargs), cpu_cls(want, foreach=False, **kwargs)
    o_fused = cpu_cls(want_fused, fused=npu_cls is not NpuFusedSGD, **kwargs)
    for _ in range(4):
        o_npu.step()
        o_cpu.step()
        o_fused.step()
    for a, b, c in zip(got, want, want_fused):
        ref = b if b.dtype == torch.float32 else c
        torch.testing.assert_close(a.detach().cpu(), ref.detach(), **TOL[b.dtype])
    assert torch.equal(got[-1].detach().cpu(), torch.arange(6).reshape(2, 3).float())
    # Checkpoints move between the fused npu optimizer and torch.optim's.
    state = o_npu.state_dict()
    clone = cpu_cls(want, foreach=False, **kwargs)
    clone.load_state_dict(state)
    assert clone.state_dict()["param_groups"][0]["lr"] == kwargs["lr"]
    again = npu_cls(got, **kwargs)
    again.load_state_dict(o_cpu.state_dict())
    again.step()


def test_clip_grad_norm_fused_and_transformers_import():
    from torch_npu.optim import NpuFusedAdamW as imported  # what transformers' Trainer imports

    assert imported is NpuFusedAdamW and torch_npu.optim.NpuFusedAdamW is NpuFusedAdamW
    p = [torch.ones(4).npu().requires_grad_()]
    p[0].grad = torch.full((4,), 3.0).npu()
    norm = NpuFusedAdamW(p).clip_grad_norm_fused_(1.0)
    assert norm.item() == pytest.approx(6.0)
    torch.testing.assert_close(p[0].grad.cpu(), torch.full((4,), 0.5), rtol=1e-5, atol=1e-6)
