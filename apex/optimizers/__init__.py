"""apex.optimizers on SimNPU: Ascend's NpuFusedAdam / NpuFusedAdamW / NpuFusedSGD (those of
torch_npu.optim) and NVIDIA's FusedAdam / FusedSGD, all one fused kernel launch per parameter
group and dtype (torch.optim's fused=True steps, run by our kernels)."""

import torch
from torch_npu.optim import NpuFusedAdam, NpuFusedAdamW, NpuFusedSGD

__all__ = ["NpuFusedAdam", "NpuFusedAdamW", "NpuFusedSGD", "FusedAdam", "FusedSGD"]


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


_NOT_PROVIDED = ("NpuFusedAdadelta", "NpuFusedAdamP", "NpuFusedBertAdam", "NpuFusedLamb", "Lamb",
                 "NpuFusedRMSprop", "NpuFusedRMSpropTF", "FusedLAMB", "FusedNovoGrad",
                 "FusedAdagrad", "FusedMixedPrecisionLamb")


def __getattr__(name):
    if name in _NOT_PROVIDED:
        raise NotImplementedError(
            f"apex.optimizers.{name} is not implemented in SimNPU's apex (it provides "
            f"{', '.join(__all__)}); use the torch.optim optimizer of that algorithm where there "
            f"is one (torch.optim.Adadelta, torch.optim.RMSprop), it runs on npu")
    raise AttributeError(f"module 'apex.optimizers' has no attribute {name!r}")
