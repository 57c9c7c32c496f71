"""torch_npu.optim: torch_npu's fused optimizers, on SimNPU's fused kernels.

NpuFusedAdamW, NpuFusedAdam and NpuFusedSGD take torch_npu's documented arguments and defaults
and are torch.optim.AdamW / Adam / SGD with ``fused=True``: each step is one kernel launch per
(device, dtype) group of parameters (aten::_fused_adamw_ / _fused_adam_ / _fused_sgd_, run by
adapter/ops/FusedOptimizers.cpp), which also takes GradScaler's scale and found_inf, so a
mixed-precision step skips on inf/nan and unscales the gradients on the device. Their
state_dict is torch.optim's, so checkpoints load into the torch.optim classes and back.

Hugging Face's Trainer imports NpuFusedAdamW for ``optim="adamw_torch_npu_fused"``.
"""

import torch

__all__ = ["NpuFusedAdamW", "NpuFusedAdam", "NpuFusedSGD"]


def _check_adam_args(lr, betas, eps, weight_decay) -> None:
    # torch_npu raises ValueError for these; torch.optim checks some of them with other words.
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")
    if not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps}")
    if not 0.0 <= betas[0] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
    if not 0.0 <= betas[1] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
    if not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")


class _FusedClipMixin:
    def clip_grad_norm_fused_(self, max_norm, norm_type=2):
        """Clips the gradients of every parameter of this optimizer to a total norm of
        ``max_norm`` (torch_npu's method; torch.nn.utils.clip_grad_norm_ over the optimizer's
        parameters, whose norms run as foreach kernels). Returns the total norm."""
        params = [p for group in self.param_groups for p in group["params"] if p.grad is not None]
        return torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type)


class NpuFusedAdamW(_FusedClipMixin, torch.optim.AdamW):
    """AdamW as one fused kernel per parameter group and dtype (torch_npu.optim.NpuFusedAdamW)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False):
        _check_adam_args(lr, betas, eps, weight_decay)
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         amsgrad=amsgrad, fused=True)


class NpuFusedAdam(_FusedClipMixin, torch.optim.Adam):
    """Adam as one fused kernel per parameter group and dtype (torch_npu.optim.NpuFusedAdam)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False):
        _check_adam_args(lr, betas, eps, weight_decay)
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         amsgrad=amsgrad, fused=True)


class NpuFusedSGD(_FusedClipMixin, torch.optim.SGD):
    """SGD (momentum, dampening, Nesterov) as one fused kernel per parameter group and dtype
    (torch_npu.optim.NpuFusedSGD). ``lr`` is required, as in torch_npu."""

    def __init__(self, params, lr=None, momentum=0, dampening=0, weight_decay=0,
                 nesterov=False):
        if lr is None:
            raise ValueError("NpuFusedSGD needs a learning rate: pass lr=...")
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, lr=lr, momentum=momentum, dampening=dampening,
                         weight_decay=weight_decay, nesterov=nesterov, fused=True)
