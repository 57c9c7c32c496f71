"""apex.amp on SimNPU: amp.initialize (O0-O3), amp.scale_loss and friends, built on
torch.autocast, GradScaler's kernels and float32 master weights (see _initialize.py)."""

from ._initialize import initialize
from .handle import (load_state_dict, master_params, register_float_function,
                     register_half_function, register_promote_function, scale_loss, state_dict)

__all__ = ["initialize", "scale_loss", "master_params", "state_dict", "load_state_dict",
           "register_half_function", "register_float_function", "register_promote_function"]
