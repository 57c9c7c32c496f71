"""torch.npu.amp: automatic mixed precision (not part of SimNPU yet).

torch.autocast("npu") needs an AutocastPrivateUse1 kernel set that SimNPU does not register
yet; these names exist so that code probing for them gets a clear error.
"""


def _missing(name: str):
    def fn(*args, **kwargs):
        raise NotImplementedError(
            f"torch.npu.amp.{name} is not implemented in SimNPU yet; run in float32 for now"
        )

    return fn


autocast = _missing("autocast")
from torch_npu.npu._grad_scaler import GradScaler  # noqa: E402
