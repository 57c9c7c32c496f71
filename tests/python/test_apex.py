"""apex (SimNPU's subset of Ascend's apex): amp.initialize O0-O3, amp.scale_loss, the loss
scaler's state, master weights, apex.optimizers, and the errors for bad options.

References: O1 against torch.autocast("npu") + torch.amp.GradScaler("npu") written out by hand
(the same kernels, so the losses must be identical) and against the CPU's autocast float16 +
GradScaler run; O2 and O3 against the half model / float32 master weights written out by hand;
O0 against plain float32 training."""

import copy
import types

import pytest
import torch
import torch.nn.functional as F

import torch_npu  # noqa: F401
from apex import amp, optimizers as apex_optimizers
from torch_npu.testing import models

STEPS = 8
INF_STEP = 3  # the step whose gradient gets an inf (so the dynamic scaler skips and backs off)


def _fresh(kind="mlp", seed=0):
    torch.manual_seed(seed)
    return models.make_model(kind)


def _inject_inf(model, step):
    if step == INF_STEP:
        p = next(model.parameters())
        p.grad.view(-1)[0] = float("inf")


def _apex_run(kind, opt_level, device="npu", steps=STEPS, inject=True, **init_kwargs):
    model = _fresh(kind).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model, opt = amp.initialize(model, opt, opt_level=opt_level, verbosity=0, **init_kwargs)
    losses, scales = [], []
    for step, (x, y) in enumerate(models.batches(kind, steps)):
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        loss = models.loss_fn(kind, model(x), y)
        with amp.scale_loss(loss, opt) as scaled_loss:
            scaled_loss.backward()
            if inject:
                _inject_inf(model, step)
        opt.step()
        losses.append(loss.item())
        scales.append(amp.state_dict()["loss_scaler0"]["loss_scale"])
    return model, opt, losses, scales


def _autocast_gradscaler_run(kind, device, steps=STEPS, window=2000, inject=True):
    """apex O1 written with PyTorch's own API: autocast float16 around the forward (outputs
    to float32, the loss outside), GradScaler with apex's defaults."""
    model = _fresh(kind).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler(device, init_scale=2.0**16, growth_interval=window)
    losses, scales = [], []
    for step, (x, y) in enumerate(models.batches(kind, steps)):
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        with torch.autocast(device, dtype=torch.float16):
            out = model(x)
        loss = models.loss_fn(kind, out.float(), y)
        scaler.scale(loss).backward()
        if inject:
            _inject_inf(model, step)
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
        scales.append(scaler.get_scale())
    return model, losses, scales


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_o1_is_autocast_plus_gradscaler(kind):
    # Same kernels in the same order: the losses, scales and weights are identical, including
    # the skipped step (INF_STEP), the back-off and, with scale_window=3, the growth.
    model, _, losses, scales = _apex_run(kind, "O1", scale_window=3)
    ref_model, ref_losses, ref_scales = _autocast_gradscaler_run(kind, "npu", window=3)
    assert losses == ref_losses
    assert scales == ref_scales
    # Three clean steps grow the scale, the inf halves it, three more grow it again.
    assert scales[:INF_STEP + 4] == [2.0**16, 2.0**16, 2.0**17, 2.0**16, 2.0**16, 2.0**16,
                                     2.0**17], scales
    for p, q in zip(model.parameters(), ref_model.parameters()):
        assert p.dtype == torch.float32  # O1 leaves the model in float32
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_o1_tracks_cpu_autocast_float16():
    # The CPU reference: the same recipe on the CPU (its own autocast float16 and GradScaler).
    # Both half GEMMs accumulate in float32 but sum in different orders, so float16 outputs can
    # differ by one rounding (~5e-4 relative) here and there; over 20 steps of SGD with
    # momentum the losses stay within 1e-3 relative (largest seen 1.3e-5). A wrong or doubled
    # unscale moves them by orders of magnitude more; the exact test above pins the policy.
    _, _, npu_losses, npu_scales = _apex_run("mlp", "O1", steps=20)
    _, cpu_losses, cpu_scales = _autocast_gradscaler_run("mlp", "cpu", steps=20)
    assert npu_scales == cpu_scales
    for step, (n, c) in enumerate(zip(npu_losses, cpu_losses)):
        assert abs(n - c) <= 1e-3 * abs(c), f"step {step}: npu {n} cpu {c}"
    assert npu_losses[-1] < npu_losses[0]


def test_o2_is_half_model_with_float32_master_weights():
    model, opt, losses, scales = _apex_run("mlp", "O2")
    # The reference by hand: a float16 model, float32 masters stepped by SGD, gradients copied
    # to float32 and divided by the scale, a skipped step and halved scale on inf.
    ref = _fresh("mlp").npu().half()
    masters = [p.detach().float().clone().requires_grad_() for p in ref.parameters()]
    ref_opt = torch.optim.SGD(masters, lr=0.05, momentum=0.9)
    scale, ref_losses, ref_scales = 2.0**16, [], []
    for step, (x, y) in enumerate(models.batches("mlp", STEPS)):
        x, y = x.npu(), y.npu()
        loss = F.cross_entropy(ref(x.half()).float(), y)
        (loss * scale).backward()
        _inject_inf(ref, step)
        grads = [p.grad.float() * (1.0 / scale) for p in ref.parameters()]
        if all(torch.isfinite(g).all() for g in grads):
            for m, g in zip(masters, grads):
                m.grad = g
            ref_opt.step()
            with torch.no_grad():
                for p, m in zip(ref.parameters(), masters):
                    p.copy_(m)
        else:
            scale /= 2
        for p in ref.parameters():
            p.grad = None
        ref_losses.append(loss.item())
        ref_scales.append(scale)
    assert losses == ref_losses
    assert scales == ref_scales
    model_params = list(model.parameters())
    opt_params = list(amp.master_params(opt))
    assert all(p.dtype == torch.float16 for p in model_params)
    assert all(m.dtype == torch.float32 for m in opt_params)
    for p, m, r in zip(model_params, opt_params, masters):
        torch.testing.assert_close(m, r, rtol=0, atol=0)
        torch.testing.assert_close(p, m.half(), rtol=0, atol=0)  # the model is its masters


def test_o2_keeps_batchnorm_float32_and_tracks_float32_training():
    model, opt, losses, _ = _apex_run("cnn", "O2", steps=20, inject=False)
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            assert module.weight.dtype == torch.float32 and module.running_mean.dtype == \
                torch.float32, name
        elif isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)):
            assert module.weight.dtype == torch.float16, name
    # float16 activations and weights (float32 masters and batch norm) against float32 on the
    # CPU: float16 keeps 11 bits (5e-4 relative per rounding) and the roundings partly cancel,
    # so each loss is within 5e-3 relative over 20 steps (largest seen 1.6e-4); a missing master
    # copy (updates lost to float16 rounding) or a wrong unscale diverges by far more.
    cpu_losses = models.train("cnn", "cpu", "sgd", steps=20)
    for step, (n, c) in enumerate(zip(losses, cpu_losses)):
        assert abs(n - c) <= 5e-3 * abs(c), f"step {step}: O2 {n} float32 {c}"


def test_o2_with_float16_batchnorm_trains():
    # keep_batchnorm_fp32=False casts batch norm too: its forward and backward run in float16
    # (computing in float32 inside, statistics saved in float32). Against float32 on the CPU
    # with the O2 tolerance above (largest seen 2.6e-4).
    model, opt, losses, _ = _apex_run("cnn", "O2", steps=20, inject=False,
                                      keep_batchnorm_fp32=False)
    assert model.bn1.weight.dtype == torch.float16 and model.bn1.running_var.dtype == \
        torch.float16
    assert all(m.dtype == torch.float32 for m in amp.master_params(opt))
    cpu_losses = models.train("cnn", "cpu", "sgd", steps=20)
    for step, (n, c) in enumerate(zip(losses, cpu_losses)):
        assert abs(n - c) <= 5e-3 * abs(c), f"step {step}: O2 {n} float32 {c}"


def _pure_half_run(kind):
    """O3 written by hand: the model in float16, SGD with momentum, no loss scaling. Returns the
    trained model and its losses."""
    ref = _fresh(kind).npu().half()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    ref_losses = []
    for x, y in models.batches(kind, STEPS):
        ref_opt.zero_grad()
        loss = F.cross_entropy(ref(x.npu().half()).float(), y.npu())
        loss.backward()
        ref_opt.step()
        ref_losses.append(loss.item())
    return ref, ref_losses


def test_o3_is_pure_half_with_static_scale_one():
    model, opt, losses, scales = _apex_run("mlp", "O3", inject=False)
    assert losses == _pure_half_run("mlp")[1]
    assert scales == [1.0] * STEPS
    assert all(p.dtype == torch.float16 for p in model.parameters())
    assert list(amp.master_params(opt)) == list(model.parameters())  # no masters


def test_o3_trains_a_cnn_with_batchnorm_in_float16():
    # Pure float16, batch norm included (its backward once failed in the ATen host kernel).
    # The same steps written by hand give identical losses (the same kernels); against float32
    # on the CPU with the O2 tolerance (largest seen 4.6e-5 over these 8 steps), and the loss
    # goes down.
    model, _, losses, scales = _apex_run("cnn", "O3", inject=False)
    assert model.bn1.weight.dtype == torch.float16 and model.bn1.running_mean.dtype == \
        torch.float16
    ref, ref_losses = _pure_half_run("cnn")
    assert losses == ref_losses
    assert scales == [1.0] * STEPS
    cpu_losses = models.train("cnn", "cpu", "sgd", steps=STEPS)
    for step, (n, c) in enumerate(zip(losses, cpu_losses)):
        assert abs(n - c) <= 5e-3 * abs(c), f"step {step}: O3 {n} float32 {c}"
    assert losses[-1] < losses[0]
    for (name, p), (_, q) in zip(model.named_buffers(), ref.named_buffers()):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)


def test_o0_is_float32_training():
    _, _, losses, scales = _apex_run("mlp", "O0", inject=False)
    ref = models.train("mlp", "npu", "sgd", steps=STEPS)
    assert losses == ref
    assert scales == [1.0] * STEPS


def test_static_loss_scale_never_skips():
    # apex: a number as loss_scale is static, and a static scaler does not check for overflow.
    model, _, losses, scales = _apex_run("mlp", "O2", loss_scale=128.0)
    assert scales == [128.0] * STEPS
    # The inf at INF_STEP went into the step: the weights it touched are no longer finite.
    assert not torch.isfinite(next(model.parameters())).all()


def test_accumulating_two_losses_adds_unscaled_gradients():
    model = _fresh().npu()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    model, opt = amp.initialize(model, opt, opt_level="O1", verbosity=0)
    ref = _fresh().npu()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("npu", init_scale=2.0**16)
    (x1, y1), (x2, y2) = list(models.batches("mlp", 2))
    for x, y in ((x1, y1), (x2, y2)):
        loss = F.cross_entropy(model(x.npu()), y.npu())
        with amp.scale_loss(loss, opt) as scaled:
            scaled.backward()
        with torch.autocast("npu", dtype=torch.float16):
            out = ref(x.npu())
        scaler.scale(F.cross_entropy(out.float(), y.npu())).backward()
    scaler.unscale_(ref_opt)  # GradScaler unscales the sum once; amp each loss's share
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=1e-9)


def test_delay_unscale_keeps_gradients_scaled_until_the_last_loss():
    model = _fresh().npu()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    model, opt = amp.initialize(model, opt, opt_level="O1", loss_scale=64.0, verbosity=0)
    x, y = next(models.batches("mlp", 1))
    loss = F.cross_entropy(model(x.npu()), y.npu())
    with amp.scale_loss(loss, opt, delay_unscale=True) as scaled:
        scaled.backward()
    scaled_grads = [p.grad.clone() for p in model.parameters()]
    loss = F.cross_entropy(model(x.npu()), y.npu())
    with amp.scale_loss(loss, opt) as scaled:
        scaled.backward()
    for p, g in zip(model.parameters(), scaled_grads):
        torch.testing.assert_close(p.grad, g * (2 / 64.0), rtol=1e-6, atol=1e-8)


def test_state_dict_round_trip():
    _apex_run("mlp", "O1", scale_window=3)
    state = amp.state_dict()
    assert list(state) == ["loss_scaler0"]
    assert state["loss_scaler0"] == {"loss_scale": 2.0**17, "unskipped": 1}
    model = _fresh().npu()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    amp.initialize(model, opt, opt_level="O1", verbosity=0, num_losses=1)
    assert amp.state_dict()["loss_scaler0"]["unskipped"] == 0
    amp.load_state_dict(state)
    assert amp.state_dict() == state
    with pytest.raises(ValueError, match="num_losses"):
        amp.load_state_dict({"loss_scaler0": state["loss_scaler0"], "loss_scaler1": {}})


def _o2_sgd(model):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)  # no momentum: a step has no state
    return amp.initialize(model, opt, opt_level="O2", verbosity=0)


def _o2_step(model, opt, x, y):
    opt.zero_grad()
    loss = F.cross_entropy(model(x.npu()), y.npu())
    with amp.scale_loss(loss, opt) as scaled_loss:
        scaled_loss.backward()
    opt.step()


def test_o2_load_state_dict_refreshes_master_weights():
    # Resuming from a checkpoint after amp.initialize: the loaded weights must become the
    # masters, or the next step would step the stale masters and copy them over the model.
    ckpt = {k: v.clone() for k, v in _fresh("mlp", seed=1).state_dict().items()}  # float32, CPU
    (x0, y0), (x1, y1), (x, y) = models.batches("mlp", 3)
    trained, opt = _o2_sgd(_fresh("mlp").npu())
    _o2_step(trained, opt, x0, y0)
    _o2_step(trained, opt, x1, y1)
    trained.load_state_dict(ckpt)
    for (name, p), m in zip(trained.named_parameters(), amp.master_params(opt)):
        assert p.dtype == torch.float16 and m.dtype == torch.float32, name
        torch.testing.assert_close(m.cpu(), ckpt[name], rtol=0, atol=0, msg=name)  # no rounding
        torch.testing.assert_close(p.cpu(), ckpt[name].half(), rtol=0, atol=0, msg=name)
    _o2_step(trained, opt, x, y)
    # The reference: a fresh O2 model that loads the checkpoint before its first step.
    fresh, fresh_opt = _o2_sgd(_fresh("mlp", seed=2).npu())
    fresh.load_state_dict(ckpt)
    _o2_step(fresh, fresh_opt, x, y)
    for (name, p), q, m, r in zip(trained.named_parameters(), fresh.parameters(),
                                  amp.master_params(opt), amp.master_params(fresh_opt)):
        torch.testing.assert_close(m, r, rtol=0, atol=0, msg=name)
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)
    # A submodule's load refreshes its own masters and leaves the others alone.
    others = [m.clone() for m in list(amp.master_params(opt))[2:]]
    trained.net[0].load_state_dict({"weight": ckpt["net.0.weight"], "bias": ckpt["net.0.bias"]})
    masters = list(amp.master_params(opt))
    torch.testing.assert_close(masters[0].cpu(), ckpt["net.0.weight"], rtol=0, atol=0)
    for m, o in zip(masters[2:], others):
        torch.testing.assert_close(m, o, rtol=0, atol=0)


def test_o2_load_state_dict_assign_rebinds_master_weights():
    # assign=True puts the checkpoint's tensors in the model as new Parameters: they are cast
    # to float16 and the masters (refreshed) are copied into them by the next step.
    ckpt = {k: v.npu() for k, v in _fresh("mlp", seed=1).state_dict().items()}
    model, opt = _o2_sgd(_fresh("mlp").npu())
    model.load_state_dict(ckpt, assign=True)
    (x, y), = models.batches("mlp", 1)
    _o2_step(model, opt, x, y)
    for (name, p), m in zip(model.named_parameters(), amp.master_params(opt)):
        assert p.dtype == torch.float16, name
        assert not torch.equal(m.cpu(), ckpt[name].cpu()), name  # the step moved the master
        torch.testing.assert_close(p, m.half(), rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("level", ["O2", "O3"])
def test_cast_model_state_dict_is_float32(level):
    # apex hooks state_dict on a cast model: checkpoints are float32 (the half values widened
    # exactly), parameters and buffers alike, and the model itself stays half.
    model = _fresh("cnn").npu()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    model, opt = amp.initialize(model, opt, opt_level=level, verbosity=0)
    live = {k: v for k, v in model.state_dict(keep_vars=True).items()}
    state = model.state_dict()
    floating = [k for k, v in state.items() if v.is_floating_point()]
    assert floating and all(state[k].dtype == torch.float32 for k in floating), \
        {k: state[k].dtype for k in floating}
    half = [name for name, p in model.named_parameters() if p.dtype == torch.float16]
    assert half, "the model was not cast"
    for name in half:
        torch.testing.assert_close(state[name], model.get_parameter(name).float(), rtol=0, atol=0)
    # Integer buffers (num_batches_tracked) keep their dtype; live tensors are not touched.
    for k, v in state.items():
        if not v.is_floating_point():
            assert v.dtype == live[k].dtype, k
    for name, p in model.named_parameters():
        bn_fp32 = level == "O2" and _in_batchnorm(model, name)  # keep_batchnorm_fp32
        assert p.dtype == (torch.float32 if bn_fp32 else torch.float16), name
    # A submodule's own state_dict is float32 too, and the checkpoint loads into a float32 model.
    sub = next(m for m in model.modules() if isinstance(m, torch.nn.Conv2d))
    assert all(v.dtype == torch.float32 for v in sub.state_dict().values())
    plain = _fresh("cnn", seed=3).npu()
    plain.load_state_dict(state)
    for name in half:
        torch.testing.assert_close(plain.get_parameter(name), state[name], rtol=0, atol=0)


def _in_batchnorm(model, name):
    owner = model.get_submodule(name.rpartition(".")[0]) if "." in name else model
    return isinstance(owner, torch.nn.modules.batchnorm._BatchNorm)


def test_o1_state_dict_is_the_model_dtype():
    # O1 leaves the model float32 and registers no hook: state_dict is the model's own.
    model = _fresh("mlp").npu()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    model, opt = amp.initialize(model, opt, opt_level="O1", verbosity=0)
    assert all(not type(h).__name__ == "O2StateDictHook"
               for m in model.modules() for h in m._state_dict_hooks.values())
    assert all(v.dtype == torch.float32 for v in model.state_dict().values())


def test_num_losses_have_their_own_scalers():
    model = _fresh().npu()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    model, opt = amp.initialize(model, opt, opt_level="O1", num_losses=2, verbosity=0,
                                dynamic_init_scale=1024.0, scale_backoff_factor=0.25)
    x, y = next(models.batches("mlp", 1))
    loss = F.cross_entropy(model(x.npu()), y.npu())
    with amp.scale_loss(loss, opt, loss_id=1) as scaled:
        scaled.backward()
        next(model.parameters()).grad.view(-1)[0] = float("nan")
    opt.step()  # skipped
    state = amp.state_dict()
    assert state["loss_scaler0"]["loss_scale"] == 1024.0
    assert state["loss_scaler1"]["loss_scale"] == 256.0
    with pytest.raises(ValueError, match="loss_id"):
        with amp.scale_loss(loss, opt, loss_id=2):
            pass


def test_article_snippet_with_npu_fused_sgd_and_combine_grad():
    # The article's apex O1 lines, with Ascend's fused optimizer and combine_grad.
    model = _fresh("gpt").npu()
    optimizer = apex_optimizers.NpuFusedSGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1", combine_grad=True,
                                      verbosity=0)
    losses = []
    for x, y in models.batches("gpt", 20):
        optimizer.zero_grad()
        loss = models.loss_fn("gpt", model(x.npu()), y.npu())
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert sum(losses[-5:]) < sum(losses[:5]) and losses[-1] < losses[0]


def test_register_functions_act_under_autocast_only():
    ns = types.SimpleNamespace(add=torch.add, mul=torch.mul, sub=torch.sub)
    amp.register_float_function(ns, "add")
    amp.register_half_function(ns, "mul")
    amp.register_promote_function(ns, "sub")
    a16 = torch.ones(3, dtype=torch.float16).npu()
    a32 = torch.ones(3).npu()
    assert ns.add(a16, a16).dtype == torch.float16  # autocast off: untouched
    with torch.autocast("npu", dtype=torch.float16):
        assert ns.add(a16, a16).dtype == torch.float32
        assert ns.mul(a32, a32).dtype == torch.float16
        assert ns.sub(a16, a32).dtype == torch.float32
    with pytest.raises(ValueError, match="No function named"):
        amp.register_half_function(ns, "nothing")


@pytest.mark.parametrize("make,ref", [
    (lambda p: apex_optimizers.FusedAdam(p, lr=1e-2, weight_decay=0.1),
     lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1, foreach=True)),
    (lambda p: apex_optimizers.FusedAdam(p, lr=1e-2, weight_decay=0.1, adam_w_mode=False),
     lambda p: torch.optim.Adam(p, lr=1e-2, weight_decay=0.1, foreach=True)),
    (lambda p: apex_optimizers.FusedSGD(p, lr=0.1, momentum=0.9, nesterov=True),
     lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, foreach=True)),
], ids=["FusedAdam", "FusedAdam-L2", "FusedSGD"])
def test_fused_optimizers_equal_foreach(make, ref):
    # float32 steps: the fused kernel and the foreach ops round differently in the last bit.
    a, b = _fresh().npu(), _fresh().npu()
    opt_a, opt_b = make(a.parameters()), ref(b.parameters())
    for x, y in models.batches("mlp", 5):
        for model, opt in ((a, opt_a), (b, opt_b)):
            opt.zero_grad()
            F.cross_entropy(model(x.npu()), y.npu()).backward()
            opt.step()
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-6)
    assert apex_optimizers.NpuFusedAdamW is torch_npu.optim.NpuFusedAdamW


def _lamb_reference(params, grads_per_step, lr, betas, eps, wd, adam_w_mode, grad_averaging,
                    bias_correction, max_grad_norm):
    """NVIDIA's LAMB written out per tensor in float64."""
    params = [p.double().clone() for p in params]
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    b1, b2 = betas
    for step, grads in enumerate(grads_per_step, 1):
        grads = [g.double() for g in grads]
        gnorm = torch.sqrt(sum((g * g).sum() for g in grads))
        clip = max(1.0, float(gnorm) / max_grad_norm) if max_grad_norm > 0 else 1.0
        bc1 = 1 - b1**step if bias_correction else 1.0
        bc2 = 1 - b2**step if bias_correction else 1.0
        for i, (p, g) in enumerate(zip(params, grads)):
            g = g / clip
            if not adam_w_mode:
                g = g + wd * p
            m[i] = b1 * m[i] + ((1 - b1) if grad_averaging else 1.0) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            u = (m[i] / bc1) / ((v[i] / bc2).sqrt() + eps)
            if adam_w_mode:
                u = u + wd * p
            pn, un = p.norm(), u.norm()
            ratio = lr * float(pn / un) if wd != 0 and pn > 0 and un > 0 else lr
            params[i] = p - ratio * u
    return params


@pytest.mark.parametrize("kw", [
    dict(weight_decay=0.01),
    dict(weight_decay=0.1, adam_w_mode=False, max_grad_norm=0.5),
    dict(weight_decay=0.0, grad_averaging=False, bias_correction=False, max_grad_norm=0.0),
], ids=["adamw", "l2-clipped", "no-decay"])
def test_fused_lamb_matches_reference(kw):
    g = torch.Generator().manual_seed(0)
    shapes = [(16, 8), (8,), (4, 4, 3)]
    init = [torch.randn(s, generator=g) for s in shapes]
    steps = [[torch.randn(s, generator=g) for s in shapes] for _ in range(5)]
    params = [p.clone().npu().requires_grad_() for p in init]
    opt = apex_optimizers.FusedLAMB(params, lr=0.01, **kw)
    for grads in steps:
        for p, gr in zip(params, grads):
            p.grad = gr.npu()
        opt.step()
    full = dict(weight_decay=0.01, adam_w_mode=True, grad_averaging=True, bias_correction=True,
                max_grad_norm=1.0)
    full.update(kw)
    ref = _lamb_reference(init, steps, 0.01, (0.9, 0.999), 1e-6, full["weight_decay"],
                          full["adam_w_mode"], full["grad_averaging"], full["bias_correction"],
                          full["max_grad_norm"])
    for p, r in zip(params, ref):
        torch.testing.assert_close(p.detach().cpu().double(), r, rtol=1e-5, atol=1e-6)


def test_bad_options_say_what_to_do():
    model = _fresh().npu()

    def init(**kw):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        return amp.initialize(model, opt, verbosity=0, **kw)

    with pytest.raises(RuntimeError, match="letter O, not the number zero"):
        init(opt_level="01")
    with pytest.raises(RuntimeError, match="Unexpected optimization level 'O4'"):
        init(opt_level="O4")
    with pytest.raises(ValueError, match="loss_scale='big'"):
        init(loss_scale="big")
    with pytest.raises(ValueError, match="loss_scale=-1"):
        init(loss_scale=-1)
    with pytest.raises(ValueError, match="keep_batchnorm_fp32='yes'"):
        init(opt_level="O2", keep_batchnorm_fp32="yes")
    with pytest.raises(ValueError, match="cast_model_type=torch.int8"):
        init(cast_model_type=torch.int8)
    with pytest.raises(ValueError, match="scale_window"):
        init(scale_window=0)
    with pytest.raises(NotImplementedError, match="DistributedDataParallel"):
        init(combine_ddp=True)
    with pytest.raises(TypeError, match="torch.nn.Module"):
        amp.initialize("model", None, verbosity=0)
    stepped = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 32).npu()).sum().backward()
    stepped.step()
    with pytest.raises(RuntimeError, match="before the first optimizer.step"):
        amp.initialize(model, stepped, verbosity=0)
    model2, opt2 = amp.initialize(_fresh().npu(), torch.optim.SGD(_fresh().parameters(), lr=0.1),
                                  verbosity=0)
    with pytest.raises(RuntimeError, match="already passed to amp.initialize"):
        amp.initialize(model2, opt2, verbosity=0)
    with pytest.raises(RuntimeError, match="was not passed to amp.initialize"):
        with amp.scale_loss(torch.ones(()).npu(), torch.optim.SGD(model.parameters(), lr=1)):
            pass
    with pytest.raises(RuntimeError, match="closures"):
        opt2.step(lambda: 0)
    with pytest.raises(NotImplementedError, match="NpuFusedLamb"):
        apex_optimizers.NpuFusedLamb
    with pytest.raises(RuntimeError, match="AMSGrad"):
        apex_optimizers.FusedAdam(model.parameters(), amsgrad=True)


def test_enabled_false_changes_nothing():
    model = _fresh().npu()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    m2, o2 = amp.initialize(model, opt, opt_level="O2", enabled=False, verbosity=0)
    assert m2 is model and o2 is opt and next(model.parameters()).dtype == torch.float32
    loss = torch.ones((), device="npu")
    with amp.scale_loss(loss, opt) as scaled:
        assert scaled is loss


def test_lists_of_models_and_optimizers_come_back_as_lists():
    a, b = _fresh().npu(), _fresh(seed=1).npu()
    oa, ob = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (a, b))
    ms, os_ = amp.initialize([a, b], [oa, ob], opt_level="O2", verbosity=0)
    assert ms == [a, b] and os_ == [oa, ob]
    assert amp.initialize(copy.deepcopy(_fresh()).npu(), opt_level="O1", verbosity=0) is not None


@pytest.mark.parametrize("level", ["O1", "O2"])
def test_hugging_face_model_output_keeps_its_type(level):
    # A Hugging Face model returns a ModelOutput (a dict subclass): amp's output cast must keep
    # it one, so `out.loss` / `out.logits` still work, with float32 logits.
    import transformers
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).npu()
    ids = torch.randint(0, 128, (2, 32), generator=torch.Generator().manual_seed(0)).npu()
    with torch.no_grad():
        ref_loss = model(input_ids=ids, labels=ids).loss.item()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, opt = amp.initialize(model, opt, opt_level=level, verbosity=0)
    out = model(input_ids=ids, labels=ids)
    assert type(out).__name__ == "CausalLMOutputWithPast"
    assert out.logits.dtype == torch.float32
    # float16 against float32: the loss of random logits over 128 classes agrees to ~1e-3.
    assert abs(out.loss.item() - ref_loss) <= 1e-2 * ref_loss
    with amp.scale_loss(out.loss, opt) as scaled:
        scaled.backward()
    opt.step()
    assert all(torch.isfinite(p).all() for p in model.parameters())
