"""Shadow execution: run a program at its real size without its data (docs/shadow.md).

``NPU_SIM_SHADOW=1`` (read once, when the simulator starts) makes npu tensors carry no data:
device memory is address space only, kernels keep their place in their streams but do not run,
collectives meet but move no bytes, and values read on the host are zeros. Shapes, dtypes,
strides, aliasing, autograd, the caching allocator and the order of work are those of a normal
run, so the memory a job needs on a 64 GB device is exact.
"""

from __future__ import annotations

import torch_npu._C as _C

__all__ = ["shadow_mode"]


def shadow_mode() -> bool:
    """True when this process runs under shadow execution (``NPU_SIM_SHADOW=1``)."""
    return bool(_C._npu_shadowMode())
