"""torch_npu's run-time switches: set_option, set_compile_mode / is_jit_compile_false, the ND
format of mm / bmm, and the HF32 flags (torch.npu.matmul.allow_hf32, torch.npu.conv.allow_hf32).

On a real NPU these select how CANN compiles and runs operators. Each is stored and read back
with torch_npu's names, defaults and checks, so code that sets them runs unchanged and code that
reads them sees what it set:

- jit_compile: False by default, as torch_npu's default on Atlas A2 (910B) devices, which use
  the binary operator packages; our kernels are "binary" too, so is_jit_compile_false() is True
  until set_compile_mode(jit_compile=True). It changes no result.
- allow_hf32: matmul False, conv True by default (torch_npu's defaults), set through
  torch.npu.matmul.allow_hf32 / torch.npu.conv.allow_hf32 or set_option's ALLOW_MATMUL_HF32 /
  ALLOW_CONV_HF32 ("enable" / "disable"). These do change results, as on the card: while a flag
  is on, float32 operands of that family's kernels (mm, addmm, bmm, baddbmm and what decomposes
  into them; conv1d / conv2d forward and backward) are rounded to HF32 (10 mantissa bits, to
  nearest even) before the float32-accumulating product. The adapter reads them at each launch
  (_sync_hf32 hands every change over; docs/strict_mode.md).
"""

from __future__ import annotations

import numbers

from ._device import _lazy_init, is_initialized, synchronize

__all__ = ["set_option", "set_compile_mode", "is_jit_compile_false", "set_mm_bmm_format_nd",
           "get_mm_bmm_format_nd", "get_option", "use_compatible_impl", "config",
           "are_compatible_impl_enabled"]

# The options torch_npu checks, with their allowed values (anything else it passes on as is).
_CHECKED_OPTIONS = {
    "ACL_PRECISION_MODE": ("allow_fp32_to_fp16", "must_keep_origin_dtype"),
    "ACL_OP_SELECT_IMPL_MODE": ("high_performance", "high_precision"),
    "ACL_OP_DEBUG_LEVEL": ("0", "1", "2", "3", "4"),
    "ACL_OP_COMPILER_CACHE_MODE": ("disable", "enable", "force"),
}
_options: dict[str, str] = {"jitCompile": "disable", "ALLOW_MATMUL_HF32": "disable",
                            "ALLOW_CONV_HF32": "enable"}
_mm_bmm_format_nd = True


def _check_option(name: str, value: str) -> None:
    if name == "ACL_AICORE_NUM":
        if not (value.isdigit() and 1 <= int(value) <= 32):
            raise ValueError(f"value of ACL_AICORE_NUM should be an integer from 1 to 32, but got "
                             f"{value}")
        return
    allowed = _CHECKED_OPTIONS.get(name)
    if allowed is not None and value not in allowed:
        raise ValueError(f"value of {name} should be in {list(allowed)} but got {value}")


def set_option(option: dict) -> None:
    """torch.npu.set_option({"ACL_PRECISION_MODE": "must_keep_origin_dtype", ...}).

    Values are turned into strings and checked where torch_npu checks them; a bad value raises
    ValueError naming the option and the allowed values. "MM_BMM_ND_ENABLE": "enable" /
    "disable" also sets set_mm_bmm_format_nd.
    """
    if not isinstance(option, dict):
        raise TypeError(f"npu option must be a dict, got {type(option).__name__}")
    checked = {}
    for name, value in option.items():
        if not isinstance(name, str):
            raise TypeError(f"npu option names must be strings, got {name!r}")
        checked[name] = str(value)
        _check_option(name, checked[name])
    if checked.get("MM_BMM_ND_ENABLE") in ("enable", "disable"):
        set_mm_bmm_format_nd(checked["MM_BMM_ND_ENABLE"] == "enable")
    _options.update(checked)
    _sync_hf32()


def get_option(name: str) -> str | None:
    """The value set for option `name` (as a string), or None if it was never set."""
    return _options.get(name)


def _npu_get_option(name: str) -> bytes | None:
    """torch_npu._C._npu_getOption(name): the option's value as bytes (b"enable"), or None when
    it was never set; ALLOW_INTERNAL_FORMAT reads b"disable" until set, as on an A2 card."""
    if name == "ALLOW_INTERNAL_FORMAT":
        return _options.get(name, "disable").encode()
    value = _options.get(name)
    return None if value is None else value.encode()


class _NPUConfig:
    """torch.npu.config: `allow_internal_format` (False by default, torch_npu's default on Atlas
    A2 / 910B) chooses whether operators may keep private storage formats (NC1HWC0, FRACTAL_NZ)
    for their outputs; the ALLOW_INTERNAL_FORMAT option. SimNPU stores formats as a tensor
    property that changes no result (torch_npu.npu_format_cast / get_npu_format), so the switch
    is stored and read back."""

    _names = ("allow_internal_format",)

    def __setattr__(self, name, value):
        if name not in self._names:
            raise AttributeError(f"torch.npu.config has no setting {name!r}; settings: "
                                 f"{', '.join(self._names)}")
        _options["ALLOW_INTERNAL_FORMAT"] = "enable" if value else "disable"

    def __getattr__(self, name):
        if name not in type(self)._names:
            raise AttributeError(f"torch.npu.config has no setting {name!r}; settings: "
                                 f"{', '.join(type(self)._names)}")
        return _options.get("ALLOW_INTERNAL_FORMAT", "disable") == "enable"


config = _NPUConfig()


def use_compatible_impl(is_enable: bool) -> None:
    """torch.npu.use_compatible_impl(True): have operators follow PyTorch's CPU/CUDA semantics
    where torch_npu's own kernels differ (the TORCH_NPU_USE_COMPATIBLE_IMPL option). SimNPU's
    kernels always compute PyTorch's semantics, so the switch is stored and read back
    (are_compatible_impl_enabled) and changes no result."""
    if not isinstance(is_enable, (bool, numbers.Integral)):
        raise TypeError(f"use_compatible_impl(is_enable=...) expects a bool, got "
                        f"{type(is_enable).__name__}")
    _options["TORCH_NPU_USE_COMPATIBLE_IMPL"] = "1" if is_enable else "0"


def are_compatible_impl_enabled() -> bool:
    """Whether use_compatible_impl(True) is in force (False until it is called)."""
    return _options.get("TORCH_NPU_USE_COMPATIBLE_IMPL") == "1"


def set_compile_mode(jit_compile: bool = False) -> None:
    """torch.npu.set_compile_mode(jit_compile=False): choose online compilation of operators
    (True) or the precompiled binary operators (False, the A2 default). Queued work finishes
    first, as on torch_npu, so the switch applies to the operators launched after it."""
    if not isinstance(jit_compile, (bool, numbers.Integral)):
        raise TypeError(f"set_compile_mode(jit_compile=...) expects a bool, got "
                        f"{type(jit_compile).__name__}")
    if is_initialized():
        synchronize()
    _options["jitCompile"] = "enable" if jit_compile else "disable"


def is_jit_compile_false() -> bool:
    """True while operators run from the precompiled binaries (jit_compile=False); initialises
    the device, as torch_npu's does."""
    _lazy_init()
    return _options["jitCompile"] == "disable"


def set_mm_bmm_format_nd(is_nd: bool = True) -> None:
    """Whether mm / bmm keep the ND format (True by default); formats are a tensor property
    here (torch_npu.get_npu_format), and mm / bmm always compute on ND."""
    global _mm_bmm_format_nd
    _mm_bmm_format_nd = bool(is_nd)


def get_mm_bmm_format_nd() -> bool:
    return _mm_bmm_format_nd


class _HF32Flag:
    """torch.npu.matmul / torch.npu.conv: an object with one flag, allow_hf32."""

    def __init__(self, option: str, name: str):
        object.__setattr__(self, "_option", option)
        object.__setattr__(self, "_name", name)

    @property
    def allow_hf32(self) -> bool:
        return _options[self._option] == "enable"

    def __setattr__(self, name, value):
        if name != "allow_hf32":
            raise AttributeError(f"torch.npu.{self._name} has no setting {name!r}; the one it "
                                 "has is allow_hf32")
        _options[self._option] = "enable" if value else "disable"
        _sync_hf32()

    def __repr__(self) -> str:
        return f"torch.npu.{self._name}(allow_hf32={self.allow_hf32})"


matmul = _HF32Flag("ALLOW_MATMUL_HF32", "matmul")
conv = _HF32Flag("ALLOW_CONV_HF32", "conv")


def _sync_hf32() -> None:
    """Hands the HF32 flags, as _options holds them, to the adapter's kernels (KernelBridge.h)."""
    from torch_npu import _C

    _C._npu_setAllowHF32("matmul", matmul.allow_hf32)
    _C._npu_setAllowHF32("conv", conv.allow_hf32)
