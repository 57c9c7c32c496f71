"""Run an unmodified CUDA-style script on npu.

    import torch
    import torch_npu
    from torch_npu.contrib import transfer_to_npu  # or: TORCH_TRANSFER_TO_NPU=1 python train.py

From then on, in this process:

    torch.cuda.*                         torch.npu.* (is_available, set_device, Event, Stream, ...)
    Tensor.cuda(), Module.cuda()         .npu()
    Tensor.is_cuda                       True for npu tensors
    device="cuda" / "cuda:N" /           device="npu" / "npu:N" in factory functions (torch.randn,
      torch.device("cuda", N)              torch.zeros, ...), Tensor.to / new_*, Module.to /
                                           to_empty, torch.Generator, DataLoader(pin_memory_device)
    torch.load(map_location=...)         CUDA locations in a checkpoint (saved on a GPU machine)
                                           restore on npu, with or without map_location
    torch.autocast("cuda"),              torch.autocast("npu"); see below for what runs today
      torch.cuda.amp.autocast
    torch.amp.GradScaler("cuda"),        a GradScaler on npu
      torch.cuda.amp.GradScaler
    init_process_group("nccl"),          "hccl" (torch_npu.distributed's backend); also in
      new_group, "cuda:nccl,cpu:gloo"      per-device strings and DDP's device_ids
    torch.cuda.CUDAGraph                 torch.npu.NPUGraph

How: thin wrappers around those entry points rewrite only the arguments that *are* CUDA
devices: the string "cuda" or "cuda:N", or a torch.device of type cuda. Anything else passes
through untouched, so a path such as "cuda_ckpt.pt" or a tensor named "cuda" stays as it is.
The patches are applied once per process, and a one-line notice says so on stderr (on rank 0).

Every other name of torch.cuda.__all__ has a row in CUDA_SURFACE below (torch.npu's twin, a
constant true of npu, a NotImplementedError saying why, or torch.cuda's own object with the
reason); the legacy typed classes (torch.cuda.FloatTensor) are torch.npu's; torch.cuda.nvtx
ranges become profiler ranges; torch.Event / torch.Stream accept cuda devices.

Not covered: a torch.device("cuda") object itself stays a CUDA device (comparing
`t.device == torch.device("cuda")` is False for npu tensors: use `t.is_cuda`);
torch.backends.cudnn options are accepted and have no effect; torch.cuda.get_device_capability()
returns None, as torch_npu's does.

Mixed precision: torch.autocast("cuda") and torch.cuda.amp.autocast run as torch.autocast("npu")
with CUDA's casting policies; torch.amp.GradScaler("cuda") is a GradScaler on npu.
"""

from __future__ import annotations

import copy
import functools
import inspect
import os
import re
import sys

import torch
import torch.distributed
import torch.utils.data

import torch_npu

__all__ = ["REDIRECTED"]

_CUDA_DEVICE = re.compile(r"cuda(:\d+)?")
# Keyword arguments that name a device in the entry points wrapped below.
_DEVICE_KWARGS = ("device", "device_type", "map_location", "device_id", "output_device",
                  "pin_memory_device")
REDIRECTED: list[str] = []  # the entry points patched, for the notice and for users to read


# ---- rewriting one argument ------------------------------------------------------------------


def _npu(value):
    """"cuda" / "cuda:N" / torch.device("cuda", N) as the npu equivalent; anything else as is."""
    if isinstance(value, str):
        m = _CUDA_DEVICE.fullmatch(value)
        return "npu" + (m.group(1) or "") if m else value
    if isinstance(value, torch.device) and value.type == "cuda":
        return torch.device("npu") if value.index is None else torch.device("npu", value.index)
    return value


def _npu_call(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    args = tuple(_npu(a) for a in args)
    for key in _DEVICE_KWARGS:
        if key in kwargs:
            kwargs[key] = _npu(kwargs[key])
    if isinstance(kwargs.get("device_ids"), (list, tuple)):
        kwargs["device_ids"] = [_npu(d) for d in kwargs["device_ids"]]
    return args, kwargs


def _redirect(fn):
    """`fn` with its CUDA device arguments rewritten to npu."""

    @functools.wraps(fn)
    def redirected(*args, **kwargs):
        args, kwargs = _npu_call(args, kwargs)
        return fn(*args, **kwargs)

    return redirected


def _patch(owner, name: str, make, label: str | None = None) -> None:
    """Replaces owner.name by make(owner.name) when it exists (torch builds differ)."""
    original = getattr(owner, name, None)
    if original is None:
        return
    setattr(owner, name, make(original))
    REDIRECTED.append(label or f"{getattr(owner, '__name__', owner)}.{name}")


# ---- torch.cuda -> torch.npu -----------------------------------------------------------------


def _patch_torch_cuda() -> None:
    """Points torch.cuda's functions at torch.npu's, on the torch.cuda module itself.

    The module object stays (its attributes change), so `from torch.cuda import X` after this
    import, `torch.cuda.amp` and `torch.get_device_module("cuda")` all see the npu versions.
    """
    npu = torch_npu.npu
    names = sorted(set(npu.__all__) | {"is_initialized", "init", "StreamContext"})
    for name in names:
        value = getattr(npu, name, None)
        if value is None:
            continue
        if callable(value) and not isinstance(value, type):
            value = _redirect(value)
        setattr(torch.cuda, name, value)
    torch.cuda.CUDAGraph = npu.NPUGraph
    REDIRECTED.append("torch.cuda.* (" + ", ".join(names + ["CUDAGraph"]) + ")")
    # Classes keep their identity (isinstance works); their constructors accept "cuda:N".
    npu.device.__init__ = _redirect(npu.device.__init__)
    npu.Stream.__new__ = staticmethod(_redirect(npu.Stream.__new__))


# ---- the rest of torch.cuda's public surface -------------------------------------------------
#
# Every name of torch.cuda.__all__ that torch.npu does not have, and what it becomes. The test
# (tests/python/test_transfer_to_npu.py) fails when torch.cuda gains a name this table and
# torch.npu both miss, so the table stays complete against the installed torch.
#   ("npu", attr)    torch.npu's object of another name
#   ("value", v)     an attribute whose value is true of npu
#   ("answer", v)    a function whose answer is always v on npu
#   ("refuse", why)  raises NotImplementedError saying why (CUDA-only, or not in SimNPU yet)
#   ("kept", why)    torch.cuda's own object stays (types and modules harmless to keep)


def _nvtx_module():
    """torch.cuda.nvtx as profiler ranges: range_push / range_pop / range / mark become
    record_function ranges, so NVTX-annotated code shows its ranges in torch_npu.profiler."""
    import types

    from torch.autograd.profiler import record_function

    nvtx = types.ModuleType("torch.cuda.nvtx", "NVTX ranges as npu profiler ranges")
    stack: list = []

    def range_push(msg: str) -> int:
        rf = record_function(msg)
        rf.__enter__()
        stack.append(rf)
        return len(stack) - 1

    def range_pop() -> int:
        if not stack:
            return -1  # NVTX's answer for a pop without a push
        stack.pop().__exit__(None, None, None)
        return len(stack)

    def mark(msg: str) -> None:
        with record_function(msg):
            pass

    nvtx.range_push, nvtx.range_pop, nvtx.mark = range_push, range_pop, mark
    nvtx.range = record_function
    nvtx.range_start = lambda msg: range_push(msg)
    nvtx.range_end = lambda range_id: range_pop()
    return nvtx


_NOT_ON_NPU = "CUDA-only; torch.npu has no equivalent"
_NOT_YET = "not implemented in SimNPU yet (docs/api.md lists it)"
CUDA_SURFACE: dict[str, tuple[str, object]] = {
    "CUDAGraph": ("npu", "NPUGraph"),
    "has_half": ("value", True),
    "has_magma": ("value", False),
    "is_tf32_supported": ("answer", False),  # NPU's reduced float32 is HF32 (torch.npu.matmul)
    "get_arch_list": ("answer", []),
    "get_gencode_flags": ("answer", ""),
    "nvtx": ("module", "NVTX ranges become profiler ranges (_nvtx_module)"),
    "ComplexFloatStorage": ("kept", "no complex legacy storage on npu (torch_npu has none)"),
    "ComplexDoubleStorage": ("kept", "no complex legacy storage on npu (torch_npu has none)"),
    "CudaError": ("kept", "an exception type; npu errors are RuntimeError / AcceleratorError"),
    "DeferredCudaCallError": ("kept", "an exception type; npu's lazy-init errors are RuntimeError"),
    "GreenContext": ("refuse", _NOT_ON_NPU),
    "ExternalStream": ("refuse", "wrapping a foreign stream pointer is " + _NOT_YET),
    "get_stream_from_external": ("refuse", "wrapping a foreign stream pointer is " + _NOT_YET),
    "caching_allocator_enable": ("refuse", "switching the caching allocator at run time is "
                                 + _NOT_YET + "; set PYTORCH_NO_NPU_MEMORY_CACHING=1 at start"),
    "caching_allocator_disabled": ("refuse", "switching the caching allocator at run time is "
                                   + _NOT_YET + "; set PYTORCH_NO_NPU_MEMORY_CACHING=1 at start"),
    "CUDAPluggableAllocator": ("refuse", "pluggable allocators are " + _NOT_YET),
    "change_current_allocator": ("refuse", "pluggable allocators are " + _NOT_YET),
    "check_error": ("refuse", "a CUDA runtime binding; " + _NOT_ON_NPU),
    "cudaStatus": ("kept", "CUDA runtime status codes; " + _NOT_ON_NPU),
    "cudart": ("refuse", "the CUDA runtime library; " + _NOT_ON_NPU),
    "current_solver_handle": ("refuse", "cuSOLVER; " + _NOT_ON_NPU),
    "device_memory_used": ("refuse", "an NVML query; read torch.npu.mem_get_info or npu-smi"),
    "list_gpu_processes": ("refuse", "an NVML query; run `npu-smi info` for the processes"),
    "memory_usage": ("refuse", "an NVML query; read torch.npu.mem_get_info or npu-smi"),
    "temperature": ("refuse", "an NVML query; run `npu-smi info` (simulated temperature)"),
    "power_draw": ("refuse", "an NVML query; run `npu-smi info` (simulated power)"),
    "clock_rate": ("refuse", "an NVML query; " + _NOT_ON_NPU),
    "jiterator": ("kept", "CUDA's kernel generator; its functions raise on a CPU build"),
    "nccl": ("kept", "torch.cuda.nccl; distributed code goes through torch.distributed (hccl)"),
    "profiler": ("kept", "cudaProfilerStart/Stop; use torch_npu.profiler"),
    "sparse": ("kept", "a CUDA module; " + _NOT_ON_NPU),
    "tunable": ("kept", "TunableOp (GEMM tuning); " + _NOT_ON_NPU),
}
# torch.cuda.memory's private helpers that real scripts call (memory_viz snapshots).
CUDA_MEMORY_PRIVATE = ("_record_memory_history", "_snapshot", "_dump_snapshot",
                       "_set_allocator_settings")


def _refusal(name: str, why: str):
    def refuse(*args, **kwargs):
        raise NotImplementedError(f"torch.cuda.{name} under transfer_to_npu: {why}")

    refuse.__name__ = refuse.__qualname__ = name
    return refuse


def _patch_torch_cuda_surface() -> None:
    npu = torch_npu.npu
    for name, (kind, detail) in CUDA_SURFACE.items():
        if kind == "npu":
            setattr(torch.cuda, name, getattr(npu, detail))
        elif kind == "value":
            setattr(torch.cuda, name, detail)
        elif kind == "answer":
            setattr(torch.cuda, name, lambda *args, _answer=detail, **kwargs: copy.copy(_answer))
        elif kind == "module":
            setattr(torch.cuda, name, _nvtx_module())
        elif kind == "refuse":
            setattr(torch.cuda, name, _refusal(name, detail))
    REDIRECTED.append("torch.cuda.* without a torch.npu twin (" + ", ".join(
        n for n, (kind, _) in CUDA_SURFACE.items() if kind != "kept") + ")")
    # torch.cuda.memory: the same functions as torch.cuda's, and clear refusals for the rest.
    for name in dir(npu.memory):
        if not name.startswith("_") and callable(getattr(npu.memory, name)) and \
                hasattr(torch.cuda.memory, name):
            setattr(torch.cuda.memory, name, _redirect(getattr(npu.memory, name)))
    for name in CUDA_MEMORY_PRIVATE:
        own = getattr(npu.memory, name, None)
        setattr(torch.cuda.memory, name, _redirect(own) if own is not None else _refusal(
            f"memory.{name}", _NOT_YET))
    REDIRECTED.append("torch.cuda.memory.*")
    # torch.backends.cuda's SDPA switches act on npu's attention kernel (torch.npu's toggles).
    for name in ("enable_flash_sdp", "flash_sdp_enabled", "enable_math_sdp", "math_sdp_enabled",
                 "enable_mem_efficient_sdp", "mem_efficient_sdp_enabled", "sdp_kernel"):
        if hasattr(torch.backends.cuda, name):
            setattr(torch.backends.cuda, name, getattr(npu, name))
    REDIRECTED.append("torch.backends.cuda SDPA switches")


class _AnyInstanceOf(type):
    """Metaclass keeping isinstance / issubclass true against the original class."""

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, cls._original)

    def __subclasscheck__(cls, sub) -> bool:
        return issubclass(sub, cls._original)


def _device_class(original):
    """`original` (torch.Event, torch.Stream) accepting a CUDA device as its npu twin."""
    meta = type("_Meta", (_AnyInstanceOf, type(original)), {})

    def __new__(cls, device=None, *args, **kwargs):
        return original.__new__(cls, _npu(device), *args, **kwargs)

    redirected = meta(original.__name__, (original,), {"__new__": __new__, "_original": original,
                                                       "__module__": "torch",
                                                       "__doc__": original.__doc__})
    redirected.__qualname__ = original.__qualname__
    return redirected


def _patch_generic_device_classes() -> None:
    torch.Event = _device_class(torch.Event)
    torch.Stream = _device_class(torch.Stream)
    REDIRECTED.extend(["torch.Event", "torch.Stream"])


# ---- tensors and modules ---------------------------------------------------------------------


def _tensor_cuda(self, device=None, non_blocking=False, **kwargs):
    return self.npu(_npu(device), non_blocking, **kwargs)


def _module_cuda(self, device=None):
    return self.npu(_npu(device))


def _patch_tensors_and_modules() -> None:
    for name in ("to", "new_empty", "new_empty_strided", "new_full", "new_ones", "new_tensor",
                 "new_zeros"):
        _patch(torch.Tensor, name, _redirect, f"torch.Tensor.{name}")
    torch.Tensor.cuda = _tensor_cuda
    torch.Tensor.is_cuda = property(lambda self: self.device.type == "npu")
    torch.nn.Module.cuda = _module_cuda
    REDIRECTED.extend(["torch.Tensor.cuda", "torch.Tensor.is_cuda", "torch.nn.Module.cuda"])
    for name in ("to", "to_empty"):
        _patch(torch.nn.Module, name, _redirect, f"torch.nn.Module.{name}")


# ---- factory functions, Generator, load ------------------------------------------------------


def _factory_functions() -> list[tuple[object, str]]:
    try:  # the list torch.set_default_device itself uses
        from torch.utils._device import _device_constructors

        names = sorted(f.__name__ for f in _device_constructors())
    except ImportError:
        names = ["arange", "empty", "eye", "full", "linspace", "ones", "rand", "randint", "randn",
                 "randperm", "tensor", "zeros"]
    names += ["empty_like", "full_like", "ones_like", "rand_like", "randint_like", "randn_like",
              "zeros_like", "normal", "frombuffer", "from_file", "set_default_device"]
    out = []
    for name in names:
        if name.startswith("fft_"):
            out.append((torch.fft, name[len("fft_"):]))
        else:
            out.append((torch, name))
    return out


class _GeneratorMeta(type(torch.Generator)):
    """Keeps isinstance(g, torch.Generator) true for every generator, old or new."""

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, torch._C.Generator)

    def __subclasscheck__(cls, sub) -> bool:
        return issubclass(sub, torch._C.Generator)


class _Generator(torch._C.Generator, metaclass=_GeneratorMeta):
    """torch.Generator that accepts device="cuda" (torch._C.Generator cannot be patched)."""

    def __new__(cls, device="cpu"):
        return super().__new__(cls, device=_npu(device))


_Generator.__name__ = _Generator.__qualname__ = "Generator"
_Generator.__module__ = "torch"


def _npu_location(location: str) -> str:
    return _npu(location) if isinstance(location, str) else location


def _npu_map_location(map_location):
    """A map_location under which CUDA storages of a checkpoint restore on npu.

    A checkpoint saved on a GPU names its storages "cuda:N"; torch would restore them on CUDA,
    so every form of map_location is turned into one that ends on npu for those.
    """
    from torch.serialization import default_restore_location

    if isinstance(map_location, (str, torch.device)):
        return _npu(map_location)
    if map_location is None:
        def restore(storage, location):
            return default_restore_location(storage, _npu_location(location))
    elif isinstance(map_location, dict):
        def restore(storage, location):
            target = map_location.get(location, location)
            return default_restore_location(storage, _npu_location(str(target)))
    elif callable(map_location):
        def restore(storage, location):
            result = map_location(storage, location)
            if result is None:
                result = default_restore_location(storage, _npu_location(location))
            return result
    else:
        return map_location
    return restore


def _redirect_load(load):
    signature = inspect.signature(load)

    @functools.wraps(load)
    def redirected_load(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.arguments["map_location"] = _npu_map_location(bound.arguments.get("map_location"))
        return load(*bound.args, **bound.kwargs)

    return redirected_load


def _patch_factories() -> None:
    for owner, name in _factory_functions():
        _patch(owner, name, _redirect, f"{owner.__name__}.{name}")
    torch.Generator = _Generator
    REDIRECTED.append("torch.Generator")
    load = _redirect_load(torch.serialization.load)
    torch.load = torch.serialization.load = load
    REDIRECTED.append("torch.load")
    _patch(torch.utils.data.DataLoader, "__init__", _redirect, "torch.utils.data.DataLoader")


# ---- mixed precision -------------------------------------------------------------------------


def _redirect_autocast_init(init):
    @functools.wraps(init)
    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        init(self, _npu(device_type), dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    return __init__


def _redirect_grad_scaler_init(init):
    @functools.wraps(init)
    def __init__(self, device="cuda", *args, **kwargs):
        init(self, _npu(device), *args, **kwargs)

    return __init__


def _patch_amp() -> None:
    from torch.amp.autocast_mode import autocast
    from torch.amp.grad_scaler import GradScaler

    _patch(autocast, "__init__", _redirect_autocast_init, "torch.autocast")
    _patch(GradScaler, "__init__", _redirect_grad_scaler_init, "torch.amp.GradScaler")
    # torch.cuda.amp.autocast / GradScaler subclass these and pass "cuda" to them.
    REDIRECTED.extend(["torch.cuda.amp.autocast", "torch.cuda.amp.GradScaler"])
    for name in ("custom_fwd", "custom_bwd"):
        _patch(torch.amp, name, _redirect, f"torch.amp.{name}")
    for name in ("is_autocast_enabled", "get_autocast_dtype", "set_autocast_enabled",
                 "set_autocast_dtype"):
        _patch(torch, name, _redirect, f"torch.{name}")


# ---- torch.distributed -----------------------------------------------------------------------


def hccl_registered() -> bool:
    return torch.distributed.is_available() and "hccl" in torch.distributed.Backend.backend_list


def _npu_backend(backend, where: str):
    if not isinstance(backend, str) or "nccl" not in backend.lower():
        return backend
    if not hccl_registered():
        raise RuntimeError(
            f"{where}(backend={backend!r}): transfer_to_npu maps NCCL to HCCL, but "
            f"torch.distributed has no 'hccl' backend in this SimNPU build yet (registered: "
            f"{', '.join(b for b in torch.distributed.Backend.backend_list if b != 'undefined')}). "
            "Run the script on one device without init_process_group, or use backend='gloo' "
            "with CPU tensors.")
    # "nccl", or a per-device list such as "cuda:nccl,cpu:gloo"
    return re.sub(r"\bcuda:", "npu:", backend.lower().replace("nccl", "hccl"))


def _redirect_backend(fn):
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def redirected(*args, **kwargs):
        bound = signature.bind_partial(*args, **kwargs)
        if "backend" in bound.arguments:
            bound.arguments["backend"] = _npu_backend(bound.arguments["backend"], fn.__name__)
        if "device_id" in bound.arguments:
            bound.arguments["device_id"] = _npu(bound.arguments["device_id"])
        return fn(*bound.args, **bound.kwargs)

    return redirected


def _patch_distributed() -> None:
    if not torch.distributed.is_available():
        return
    dist = torch.distributed
    for name in ("init_process_group", "new_group"):
        _patch(dist, name, _redirect_backend, f"torch.distributed.{name}")
        _patch(dist.distributed_c10d, name, _redirect_backend, f"distributed_c10d.{name}")
    dist.is_nccl_available = hccl_registered
    REDIRECTED.append("torch.distributed.is_nccl_available")
    from torch.nn.parallel import DistributedDataParallel

    _patch(DistributedDataParallel, "__init__", _redirect, "DistributedDataParallel")


# ---- once per process ------------------------------------------------------------------------


def _notice() -> None:
    if os.environ.get("RANK", "0") != "0":
        return  # one notice per job, not one per rank
    print("[transfer_to_npu] CUDA calls now run on npu: torch.cuda -> torch.npu, .cuda() -> "
          ".npu(), device 'cuda[:N]' -> 'npu[:N]', backend 'nccl' -> 'hccl' "
          f"({len(REDIRECTED)} entry points, listed in "
          "torch_npu.contrib.transfer_to_npu.REDIRECTED)", file=sys.stderr, flush=True)


def _apply() -> None:
    if getattr(torch, "_transfer_to_npu_applied", False):
        return  # applied already (a reloaded module would wrap the wrappers)
    _patch_torch_cuda()
    _patch_torch_cuda_surface()
    _patch_generic_device_classes()
    _patch_tensors_and_modules()
    _patch_factories()
    _patch_amp()
    _patch_distributed()
    torch._transfer_to_npu_applied = True
    _notice()


_apply()
