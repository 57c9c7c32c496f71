"""apex.optimizers on SimNPU: Ascend's NpuFusedAdam / NpuFusedAdamW / NpuFusedSGD (those of
torch_npu.optim) and NVIDIA's FusedAdam / FusedSGD, all one fused kernel launch per parameter
group and dtype (torch.optim's fused=True steps, run by our kernels)."""

import torch
from torch_npu.optim import NpuFusedAdam, NpuFusedAdamW, NpuFusedSGD

__all__ = ["NpuFusedAdam", "NpuFusedAdamW", "NpuFusedSGD", "FusedAdam", "FusedSGD", "FusedLAMB"]


class FusedAdam(torch.optim.Adam):
    """NVIDIA apex's FusedAdam: Adam with decoupled weight decay by default (adam_w_mode=True,
    i.e. AdamW), or with L2 decay added to the gradient (adam_w_mode=False)."""

    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8,
                 adam_w_mode=True, weight_decay=0.0, amsgrad=False, set_grad_none=True,
                 capturable=False, master_weights=False):
        if amsgrad:
            raise RuntimeError("FusedAdam does not support the AMSGrad variant; use "
                               "apex.optimizers.NpuFusedAdam(amsgrad=True) or "
                               "torch.optim.Adam(amsgrad=True)")
        if not bias_correction:
            raise NotImplementedError("FusedAdam(bias_correction=False) is not implemented in "
                                      "SimNPU's apex (the fused step always corrects the bias)")
        if capturable or master_weights:
            raise NotImplementedError("FusedAdam(capturable=True / master_weights=True) is not "
                                      "implemented in SimNPU's apex; keep float32 master weights "
                                      "with amp.initialize(opt_level='O2') instead")
        self.set_grad_none = set_grad_none
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         fused=True, decoupled_weight_decay=adam_w_mode)

    def zero_grad(self, set_to_none=None):
        super().zero_grad(set_to_none=self.set_grad_none if set_to_none is None else set_to_none)


class FusedSGD(torch.optim.SGD):
    """NVIDIA apex's FusedSGD (weight decay applied before momentum, as torch.optim.SGD)."""

    def __init__(self, params, lr=None, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False, wd_after_momentum=False, materialize_master_grads=True,
                 set_grad_none=False):
        if lr is None:
            raise ValueError("FusedSGD needs a learning rate: pass lr=...")
        if wd_after_momentum:
            raise NotImplementedError("FusedSGD(wd_after_momentum=True) is not implemented in "
                                      "SimNPU's apex; the fused step applies weight decay before "
                                      "momentum (wd_after_momentum=False)")
        self.set_grad_none = set_grad_none
        super().__init__(params, lr=lr, momentum=momentum, dampening=dampening,
                         weight_decay=weight_decay, nesterov=nesterov, fused=True)

    def zero_grad(self, set_to_none=None):
        super().zero_grad(set_to_none=self.set_grad_none if set_to_none is None else set_to_none)


class FusedLAMB(torch.optim.Optimizer):
    """NVIDIA apex's FusedLAMB, as _foreach ops over each group's list (a few launches per list
    plus one per tensor to apply its trust ratio), state in float32:

    - every gradient is divided by max(1, global_norm / max_grad_norm), the global norm taken
      over all groups (max_grad_norm <= 0: no clipping);
    - m = b1 m + (1 - b1 if grad_averaging else 1) g, v = b2 v + (1 - b2) g^2, with g += wd p
      first when adam_w_mode=False; update = (m / bc1) / (sqrt(v / bc2) + eps) (+ wd p when
      adam_w_mode), bc = 1 - b^step when bias_correction else 1;
    - p -= lr * (|p| / |update|) * update where weight_decay != 0 or use_nvlamb and both norms
      are nonzero, else p -= lr * update.
    """

    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-6,
                 weight_decay=0.01, amsgrad=False, adam_w_mode=True, grad_averaging=True,
                 set_grad_none=True, max_grad_norm=1.0, use_nvlamb=False):
        if amsgrad:
            raise RuntimeError("FusedLAMB does not support the AMSGrad variant.")
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"Invalid betas: {betas} (each must be in [0, 1))")
        self.set_grad_none = set_grad_none
        self.adam_w_mode = adam_w_mode
        self.use_nvlamb = use_nvlamb
        super().__init__(params, dict(lr=lr, bias_correction=bias_correction, betas=betas,
                                      eps=eps, weight_decay=weight_decay,
                                      grad_averaging=grad_averaging,
                                      max_grad_norm=max_grad_norm))

    def zero_grad(self, set_to_none=None):
        super().zero_grad(set_to_none=self.set_grad_none if set_to_none is None else set_to_none)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        if not grads:
            return loss
        if any(g.is_sparse for g in grads):
            raise RuntimeError("FusedLAMB does not support sparse gradients")
        global_norm = torch.linalg.vector_norm(
            torch.stack([n.float() for n in torch._foreach_norm(grads)]))
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            beta1, beta2 = group["betas"]
            wd, lr, max_norm = group["weight_decay"], group["lr"], group["max_grad_norm"]
            group["step"] = group.get("step", 0) + 1
            bc1 = 1 - beta1 ** group["step"] if group["bias_correction"] else 1.0
            bc2 = 1 - beta2 ** group["step"] if group["bias_correction"] else 1.0
            for p in params:
                if not self.state[p]:
                    self.state[p]["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
                    self.state[p]["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
            m = [self.state[p]["exp_avg"] for p in params]
            v = [self.state[p]["exp_avg_sq"] for p in params]
            p32 = [p.float() for p in params]  # copies for 16-bit params, the params otherwise
            g = [p.grad.float() for p in params]
            if max_norm > 0:
                clip = torch.clamp(global_norm / max_norm, min=1.0)
                g = torch._foreach_div(g, clip)  # new tensors; g is only read below
            if not self.adam_w_mode and wd != 0:
                g = torch._foreach_add(g, p32, alpha=wd)
            torch._foreach_mul_(m, beta1)
            torch._foreach_add_(m, g, alpha=1 - beta1 if group["grad_averaging"] else 1.0)
            torch._foreach_mul_(v, beta2)
            torch._foreach_addcmul_(v, g, g, value=1 - beta2)
            denom = torch._foreach_sqrt(torch._foreach_div(v, bc2))
            torch._foreach_add_(denom, group["eps"])
            update = torch._foreach_div(torch._foreach_div(m, bc1), denom)
            if self.adam_w_mode and wd != 0:
                torch._foreach_add_(update, p32, alpha=wd)
            if self.use_nvlamb or wd != 0:
                w_norm = torch.stack(torch._foreach_norm(p32))
                u_norm = torch.stack(torch._foreach_norm(update))
                trust = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm,
                                    torch.ones_like(w_norm)) * lr
                for u, r in zip(update, trust.unbind()):
                    u.mul_(r)
            else:
                torch._foreach_mul_(update, lr)
            for p, p_f, u in zip(params, p32, update):
                if p_f is p:
                    p.sub_(u)
                else:
                    p.copy_(p_f.sub_(u))
        return loss


_NOT_PROVIDED = ("NpuFusedAdadelta", "NpuFusedAdamP", "NpuFusedBertAdam", "NpuFusedLamb", "Lamb",
                 "NpuFusedRMSprop", "NpuFusedRMSpropTF", "FusedNovoGrad",
                 "FusedAdagrad", "FusedMixedPrecisionLamb")


def __getattr__(name):
    if name in _NOT_PROVIDED:
        raise NotImplementedError(
            f"apex.optimizers.{name} is not implemented in SimNPU's apex (it provides "
            f"{', '.join(__all__)}); use the torch.optim optimizer of that algorithm where there "
            f"is one (torch.optim.Adadelta, torch.optim.RMSprop), it runs on npu")
    raise AttributeError(f"module 'apex.optimizers' has no attribute {name!r}")
