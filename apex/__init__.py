"""apex for SimNPU: the subset of Ascend's apex (apex-patch) that torch_npu scripts use.

``from apex import amp`` gives ``amp.initialize`` (opt levels O0-O3, static or dynamic loss
scale with Ascend's dynamic_init_scale / scale_growth_factor / scale_backoff_factor /
scale_window, keep_batchnorm_fp32, master_weights, combine_grad), ``amp.scale_loss``,
``amp.master_params``, ``amp.state_dict`` / ``load_state_dict`` and
``amp.register_half_function`` / ``register_float_function`` / ``register_promote_function``;
``apex.optimizers`` gives NpuFusedAdam, NpuFusedAdamW, NpuFusedSGD (Ascend's names) and
FusedAdam, FusedSGD, FusedLAMB (NVIDIA's). Everything is built on PyTorch's own machinery run
by our kernels: O1 is ``torch.autocast`` on the model's device, loss scaling uses GradScaler's
kernels (``_amp_foreach_non_finite_check_and_unscale_``, ``_amp_update_scale_``) and the
optimizers are torch.optim's fused steps (FusedLAMB: _foreach ops). Ascend's other fused
optimizers (Adadelta, AdamP, BertAdam, Lamb, RMSprop, RMSpropTF), combine_ddp and apex.parallel
are not provided: they raise NotImplementedError naming the replacement.
"""

from . import amp, optimizers  # noqa: F401

__all__ = ["amp", "optimizers"]


def __getattr__(name):
    # apex's other subpackages (parallel, normalization, fp16_utils, contrib, ...) are absent;
    # say so instead of a bare AttributeError deep inside a user's script.
    if name in ("parallel", "normalization", "fp16_utils", "contrib", "mlp", "fused_dense",
                "transformer", "RNN", "reparameterization"):
        raise NotImplementedError(
            f"apex.{name} is not part of SimNPU's apex (it provides apex.amp and "
            f"apex.optimizers); use the PyTorch equivalent, e.g. "
            f"torch.nn.parallel.DistributedDataParallel for apex.parallel")
    raise AttributeError(f"module 'apex' has no attribute {name!r}")
