"""torch.npu's switches of scaled_dot_product_attention's backends, with torch_npu's names:
enable_flash_sdp / flash_sdp_enabled, enable_mem_efficient_sdp / ..., enable_math_sdp / ...,
and the sdp_kernel context manager.

torch_npu stores them in PyTorch's global SDPA flags (the ones torch.backends.cuda reads), and
so do we. On npu the "flash" backend is our fused attention kernel, which PyTorch reaches as
the overrideable backend of PrivateUse1; enable_flash_sdp therefore sets PyTorch's flash flag
and the overrideable one together, so that enable_flash_sdp(False) really sends npu SDPA to the
math backend here (torch_npu's own toggles only record the flag and warn that they do).
mem_efficient has no npu kernel: its flag is recorded and read back, nothing else.
"""

from __future__ import annotations

import contextlib

import torch

__all__ = ["enable_flash_sdp", "flash_sdp_enabled", "enable_mem_efficient_sdp",
           "mem_efficient_sdp_enabled", "enable_math_sdp", "math_sdp_enabled", "sdp_kernel",
           "preferred_linalg_library"]


def _flag(enabled, name: str) -> bool:
    if not isinstance(enabled, bool):
        raise TypeError(f"torch.npu.{name}(enabled) expects a bool, got "
                        f"{type(enabled).__name__}")
    return enabled


def flash_sdp_enabled() -> bool:
    """Whether SDPA on npu may use the fused (flash) attention kernel."""
    return torch._C._get_flash_sdp_enabled()


def enable_flash_sdp(enabled: bool) -> None:
    """Allows (True, the default) or forbids the fused attention kernel for SDPA on npu."""
    enabled = _flag(enabled, "enable_flash_sdp")
    torch._C._set_sdp_use_flash(enabled)
    torch._C._set_sdp_use_overrideable(enabled)


def mem_efficient_sdp_enabled() -> bool:
    return torch._C._get_mem_efficient_sdp_enabled()


def enable_mem_efficient_sdp(enabled: bool) -> None:
    """Records the flag (PyTorch's global one); npu has no memory-efficient SDPA kernel."""
    torch._C._set_sdp_use_mem_efficient(_flag(enabled, "enable_mem_efficient_sdp"))


def math_sdp_enabled() -> bool:
    return torch._C._get_math_sdp_enabled()


def enable_math_sdp(enabled: bool) -> None:
    torch._C._set_sdp_use_math(_flag(enabled, "enable_math_sdp"))


@contextlib.contextmanager
def sdp_kernel(enable_flash: bool = True, enable_math: bool = True,
               enable_mem_efficient: bool = True):
    """Sets the three flags for the duration of a ``with`` block, then restores them."""
    previous = (flash_sdp_enabled(), torch._C._get_overrideable_sdp_enabled(),
                mem_efficient_sdp_enabled(), math_sdp_enabled())
    try:
        enable_flash_sdp(enable_flash)
        enable_mem_efficient_sdp(enable_mem_efficient)
        enable_math_sdp(enable_math)
        yield {}
    finally:
        torch._C._set_sdp_use_flash(previous[0])
        torch._C._set_sdp_use_overrideable(previous[1])
        torch._C._set_sdp_use_mem_efficient(previous[2])
        torch._C._set_sdp_use_math(previous[3])


def preferred_linalg_library(backend=None):
    """npu has one linear-algebra library (the CPU's, run by the host kernels): the answer is
    always the default backend, as on torch_npu; asking for another one is refused."""
    default_names = ("default", str(torch._C._LinalgBackend.Default).lower())
    if backend is not None and str(backend).lower() not in default_names:
        raise NotImplementedError(
            f"torch.npu.preferred_linalg_library({backend!r}): npu has no choice of linear-algebra "
            "library; call it with no argument or 'default'")
    return torch._C._LinalgBackend.Default
