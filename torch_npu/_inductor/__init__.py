"""torch.compile on npu: Dynamo's device interface and Inductor's backend for the npu device.

Inductor generates, for npu, what it generates for the CPU: fused C++ kernels (its C++
scheduling) over raw pointers, and a Python wrapper that allocates buffers and calls them.
Device memory is host-addressable on the simulator, so those kernels are npu kernels as they
are; what differs is WHERE they run. The npu wrapper does not call a kernel inline on the host:
it queues it on the current npu stream (``launch`` below, ``_C._npu_launchCompiledKernel``), so
a compiled region is ordered with the eager work queued before and after it, the host does not
wait for the device, and an NPUGraph capture records compiled kernels like any other.
Ops Inductor leaves to ATen (``extern_kernels.mm`` ...) run our eager npu kernels.

Loaded on first use: Inductor asks the device module for ``Scheduling`` and
``PythonWrapperCodegen`` (torch.npu's ``__getattr__`` imports this module then), so importing
torch_npu does not import Inductor.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

import torch
from torch._dynamo import device_interface as _device_interface
from torch._inductor import config as _inductor_config
from torch._inductor import scheduler as _scheduler
from torch._inductor import utils as _inductor_utils
from torch._inductor.codegen import common as _common
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen.wrapper import PythonWrapperCodegen as _PythonWrapperCodegen
from torch._inductor.virtualized import V

import torch_npu._C as _C

__all__ = [
    "CppWrapperCodegen", "NpuInterface", "PythonWrapperCodegen", "Scheduling", "launch",
    "npu_backend",
]


# ---- launching compiled kernels on the stream ------------------------------------------------

_addresses: dict[Any, int] = {}


def _kernel_address(kernel) -> int:
    """The C entry point of a kernel Inductor compiled: its code cache module exports the
    extern "C" function ``kernel`` next to the Python binding the wrapper would call."""
    address = _addresses.get(kernel)
    if address is None:
        # A builtin function's __self__ is its extension module. sys.modules is only the
        # fallback: Inductor drops its entries when its caches are cleared (for instance under
        # TORCHINDUCTOR_FORCE_DISABLE_CACHES=1) while the wrapper still holds the kernel.
        path = getattr(getattr(kernel, "__self__", None), "__file__", None)
        if path is None:
            module = sys.modules.get(getattr(kernel, "__module__", None) or "")
            path = getattr(module, "__file__", None)
        if path is None:
            raise RuntimeError(f"cannot find the compiled library of Inductor kernel {kernel!r}")
        library = ctypes.CDLL(path)  # already loaded: dlopen returns the same handle
        address = ctypes.cast(library.kernel, ctypes.c_void_p).value
        _addresses[kernel] = address
    return address


def launch(kernel, name: str, *args, writes: str = "") -> None:
    """Queues ``kernel(*args)`` on the current npu stream: tensors pass their device pointers,
    Python ints their value (converted in C++: this runs once per kernel per call). ``writes``
    has a 'w' (or 'r') per argument the kernel writes (only reads), from its C++ signature: the
    stream sanitizer's accesses."""
    if _C._npu_sanitizer_enabled():
        _C._npu_sanitizer_compiled_kernel(name, writes, *args)
    _C._npu_launchCompiledKernel(_kernel_address(kernel), name, *args)


# ---- Inductor's backend for npu ----------------------------------------------------------------

class PythonWrapperCodegen(_PythonWrapperCodegen):
    """The Python wrapper for npu graphs: the CPU wrapper, with kernel calls queued on the
    stream instead of made inline."""

    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        if is_subgraph:
            raise NotImplementedError(
                "torch.compile on npu does not support Inductor subgraphs (control flow "
                "operators such as torch.cond) yet")
        return PythonWrapperCodegen()

    def write_header(self) -> None:
        super().write_header()
        self.imports.splice("from torch_npu._inductor import launch as npu_launch", strip=True)

    def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None, triton=True,
                                     **kwargs):
        device = device or V.graph.get_current_device_or_throw()
        if device.type == "npu" and not triton:
            args = ", ".join(call_args)
            # 'w' for a buffer the C++ kernel takes as `T*`, 'r' for `const T*` and values.
            types = kwargs.get("arg_types") or []
            writes = "".join("w" if str(t).strip().endswith("*") and
                             not str(t).strip().startswith("const") else "r" for t in types)
            self.writeline(f"npu_launch({kernel_name}, {kernel_name!r}, {args}, "
                           f"writes={writes!r})")
            return
        super()._generate_kernel_call_helper(kernel_name, call_args, device=device,
                                             triton=triton, **kwargs)


class CppWrapperCodegen:
    """Inductor's C++ wrapper would call the kernels inline on the host: not for npu."""

    supports_caching = False

    @staticmethod
    def create(*args, **kwargs):
        raise NotImplementedError(
            "torch._inductor.config.cpp_wrapper is not supported on npu yet: its C++ wrapper "
            "would run the kernels on the host instead of the npu stream. Leave cpp_wrapper off.")


class Scheduling(CppScheduling):
    """Inductor's C++ scheduling, generating serial kernels for npu.

    Inductor parallelises a large C++ kernel with OpenMP (``#pragma omp parallel``). An npu
    kernel runs on a stream's worker thread, and the ops around it (``extern_kernels.mm``, SDPA,
    every eager op) run on the kernel library's own thread pool. After a parallel region,
    libgomp's team threads keep spinning (GOMP_SPINCOUNT, about 300,000 pauses by default),
    holding cores that the next task on the stream needs for its own pool: on a 2-core host a
    compiled decode step ran 4x slower than with ``OMP_WAIT_POLICY=PASSIVE``. Generated npu
    kernels are therefore single-threaded (``cpp.threads = 1`` while an npu kernel is generated):
    the stream, not an OpenMP team, is their unit of work, as it is for a kernel on a card.
    CPU kernels in the same graph keep Inductor's settings."""

    def _serial(self):
        return _inductor_config.patch({"cpp.threads": 1})

    def codegen_node(self, node):
        with self._serial():
            return super().codegen_node(node)

    def codegen_template(self, template_node, epilogue_nodes, prologue_nodes):
        with self._serial():
            return super().codegen_template(template_node, epilogue_nodes, prologue_nodes)

    def flush(self):
        with self._serial():
            return super().flush()


class _DeviceOpOverrides(_common.DeviceOpOverrides):
    def import_get_raw_stream_as(self, name: str) -> str:
        return f"def {name}(_):\n    return 0"

    def set_device(self, device_idx: int) -> str:
        return f"torch.npu.set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.npu.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        return f"torch.npu.device({device_idx})"

    def cpp_kernel_type(self) -> str:
        return "void*"


# ---- Dynamo's device interface ---------------------------------------------------------------

class NpuInterface(_device_interface.DeviceInterface):
    device = torch.npu.device
    Event = torch.npu.Event
    Stream = torch.npu.Stream

    class Worker:
        @staticmethod
        def set_device(device: int) -> None:
            _device_interface.caching_worker_current_devices["npu"] = device

        @staticmethod
        def current_device() -> int:
            return _device_interface.caching_worker_current_devices.get("npu", 0)

        @staticmethod
        def get_device_properties(device=None):
            return torch.npu.get_device_properties(device)

    current_device = staticmethod(torch.npu.current_device)
    set_device = staticmethod(torch.npu.set_device)
    device_count = staticmethod(torch.npu.device_count)
    stream = staticmethod(torch.npu.stream)
    current_stream = staticmethod(torch.npu.current_stream)
    set_stream = staticmethod(torch.npu.set_stream)
    synchronize = staticmethod(torch.npu.synchronize)
    get_device_properties = staticmethod(torch.npu.get_device_properties)
    memory_allocated = staticmethod(torch.npu.memory_allocated)

    @staticmethod
    def is_available() -> bool:
        return torch.npu.is_available()

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        return 0  # kernels are queued through launch(), which takes the current stream

    @staticmethod
    def get_compute_capability(device=None):
        return "npu"

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return True

    @staticmethod
    def is_triton_capable(device=None) -> bool:
        return False


# Inductor takes its C++-kernel decisions by asking two questions about the device: "is this
# node's device the CPU?" (scheduler fusion groups, loop reindexing) and "which kernel backend
# does this device use?" (how generated values get their dtypes, masked loads, ...). npu
# kernels ARE its C++ kernels, so for npu both must answer as for the CPU; otherwise npu nodes
# take the GPU (Triton) branches and fail. These two functions are the Inductor internals we
# replace (torch is pinned to 2.13.0).

def _is_cpu(self) -> bool:
    device = self.get_device()
    return device is not None and device.type in ("cpu", "npu")


_original_get_current_backend = _inductor_utils.get_current_backend


def _get_current_backend(device_type: str | None = None) -> str:
    if not device_type:
        device_type = V.graph.get_current_device_or_throw().type
    if device_type == "npu":
        return "cpp"
    return _original_get_current_backend(device_type)


def npu_backend(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    """torch.compile(backend="npu"): Inductor, generating npu kernels for npu tensors (the
    default backend does the same once torch_npu is imported; this name mirrors torch_npu's)."""
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(gm, example_inputs, **kwargs)


def register() -> None:
    """Registers npu with Dynamo and Inductor (idempotent)."""
    _device_interface.register_interface_for_device("npu", NpuInterface)
    for index in range(torch.npu.device_count()):
        _device_interface.register_interface_for_device(f"npu:{index}", NpuInterface)
    _common.register_device_op_overrides("npu", _DeviceOpOverrides())
    if _common.get_scheduling_for_device("npu") is None:
        _common.register_backend_for_device("npu", Scheduling, PythonWrapperCodegen,
                                            CppWrapperCodegen)
    _scheduler.BaseSchedulerNode.is_cpu = _is_cpu
    # get_current_backend is imported by name: replace it where Inductor looks it up.
    for module in list(sys.modules.values()):
        if (getattr(module, "__name__", "").startswith("torch._inductor")
                and getattr(module, "get_current_backend", None) is _original_get_current_backend):
            module.get_current_backend = _get_current_backend
    from torch_npu._inductor import npu_graphs

    npu_graphs.install()  # mode="reduce-overhead": compiled npu regions replay NPU graphs
    from torch_npu._inductor import gqa_attention

    gqa_attention.install()  # attention reads grouped key / value heads without repeating them


register()
