"""torch_npu: the SimNPU device "npu" for PyTorch.

``import torch_npu`` (or torch's backend autoload, which imports it at the end of ``import torch``)
registers the PrivateUse1 backend under the name "npu": ``torch.device("npu:0")``, ``Tensor.npu()``,
``Module.npu()``, ``torch.npu``. The kernels run on the host through SimNPU's simulated runtime.

Order matters here: the torch version is checked before the compiled extension is loaded, since
an extension built for another torch fails in obscure ways (missing symbols, crashes).
"""

import os as _os


def _autoload() -> None:
    """Entry point of the `torch.backends` group: torch calls it at the end of `import torch`.

    Importing this module registers everything, so there is nothing left to do. It is defined
    before `import torch` because `import torch_npu` in a fresh interpreter imports torch, whose
    autoload then looks this function up on the half-imported torch_npu.
    """


# ---- `python -m torch_npu.utils.collect_env` ----------------------------------------------------
# The environment check is the tool users run when this package is broken, and `-m` imports this
# package before the tool runs (sys.argv[0] is "-m" while it does). So the tool runs here, before
# anything below can fail, and exits; it imports torch and torch_npu only in a child process.
import sys as _sys  # noqa: E402


def _collect_env_requested() -> bool:
    argv = getattr(_sys, "orig_argv", [])
    return _sys.argv[:1] == ["-m"] and any(
        a == "-m" and argv[i + 1:i + 2] == ["torch_npu.utils.collect_env"]
        for i, a in enumerate(argv))


if _collect_env_requested():
    from torch_npu.utils.collect_env import main as _collect_env_main

    _sys.exit(_collect_env_main(_sys.argv[1:]))
# --------------------------------------------------------------------------------------------------

import torch  # noqa: E402


def _use_installed_compiled_parts() -> None:
    """Lets a source checkout import the compiled parts of the installed simnpu.

    `python -m pytest` from the repository root puts the checkout first on sys.path, so this
    file is imported from the source tree, which holds no compiled extension (torch_npu/_C,
    torch_npu/lib, the generated version.py). The installed package's folder is appended to
    __path__: the Python sources come from the checkout, the compiled parts from the install.
    """
    here = _os.path.dirname(_os.path.abspath(__file__))
    if _os.path.exists(_os.path.join(here, "version.py")):
        return  # an installed (or in-place built) package
    from importlib import metadata

    try:
        installed = _os.path.abspath(str(metadata.distribution("simnpu").locate_file("torch_npu")))
    except metadata.PackageNotFoundError:
        installed = None
    if installed is None or not _os.path.exists(_os.path.join(installed, "version.py")):
        raise ImportError(
            f"torch_npu is imported from the source checkout {here}, which holds no compiled "
            "extension, and simnpu is not installed. Build and install it with "
            "`pip install --no-build-isolation --no-deps .` (or `make setup`)."
        )
    if installed != here:
        __path__.append(installed)  # noqa: F821 (a package's __path__)


def _check_torch_version() -> None:
    from torch_npu.version import torch_version as built_for

    if str(torch.__version__) != built_for:
        raise ImportError(
            f"torch_npu {__version__} was built for torch {built_for}, but torch "
            f"{torch.__version__} is installed. Install torch=={built_for.split('+')[0]} (the "
            f"CPU build) or rebuild simnpu against torch {torch.__version__}."
        )


def _register_backend() -> None:
    if torch._C._get_privateuse1_backend_name() != "npu":
        torch.utils.rename_privateuse1_backend("npu")
    import torch_npu.npu

    if not hasattr(torch, "npu"):
        torch._register_device_module("npu", torch_npu.npu)
    if not hasattr(torch.Tensor, "npu"):
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_storage=True
        )
    # torch.version.cann, as torch_npu sets it: the CANN version (here our runtime's, in CANN's
    # role). accelerate's and transformers' environment reports read it once they see torch_npu.
    torch.version.cann = torch_npu._C._npu_runtimeVersion()


def _drain_devices_at_exit() -> None:
    """Before the interpreter shuts down: waits for the queued work of every device that was used
    and for its autograd thread to finish what it was doing, so that no thread of ours or
    PyTorch's still releases Python objects while Python is being torn down (adapter/AtExit.cpp
    says why that would abort the process)."""
    _C._npu_quiesceAtExit()


def _transfer_to_npu_from_env() -> None:
    """TORCH_TRANSFER_TO_NPU=1: the same as `from torch_npu.contrib import transfer_to_npu`; with
    torch's backend autoload, an unmodified CUDA-style script that only does `import torch` gets
    it too."""
    value = _os.environ.get("TORCH_TRANSFER_TO_NPU", "")
    if value == "1":
        import torch_npu.contrib.transfer_to_npu  # noqa: F401
    elif value not in ("", "0"):
        import warnings

        warnings.warn(f"TORCH_TRANSFER_TO_NPU={value!r} is ignored: set it to 1 to run CUDA-style "
                      "code on npu, or 0 (or unset) to leave torch.cuda alone", stacklevel=3)


def _init() -> None:
    """Everything `import torch_npu` does, in order. Each step needs the ones before it."""
    global __version__
    _use_installed_compiled_parts()           # the compiled parts may live in the install
    from torch_npu.version import __version__
    _check_torch_version()                    # before loading an extension built for another torch
    import torch_npu._C  # noqa: F401         # registers guard, hooks, allocators, kernels
    _register_backend()                       # "npu" in torch: device module, Tensor.npu(), ...
    torch_npu.npu.strict._init()              # NPU_SIM_STRICT and the card check's rules
    import atexit

    atexit.register(_drain_devices_at_exit)
    import torch_npu.profiler
    import torch_npu.utils  # noqa: F401
    import torch_npu.optim  # noqa: F401        # NpuFusedAdamW, ... on the fused kernels
    import torch_npu.distributed  # noqa: F401  # the "hccl" backend of torch.distributed
    from torch_npu.profiler import _profiling_mode

    _profiling_mode.enable_from_environment()  # TORCH_NPU_PROFILING_MODE / PROFILING_MODE=true
    torch_npu.npu.shadow.install_cost_model()  # NPU_SIM_SHADOW=1: the card's simulated clock
    torch_npu.npu._recovery.install_fault_hooks()  # NPU_SIM_FAULTS: step= triggers
    import torch_npu.npu._sanitizer

    torch_npu.npu._sanitizer._enable_from_environment()  # TORCH_NPU_SANITIZER=1
    _transfer_to_npu_from_env()


_init()

# The public names of the package (bound by _init's imports; listed here for readers and tools).
from torch_npu import _C, npu, profiler, utils  # noqa: E402
# torch_npu._C._npu_getOption: the run-time options live in Python here (npu_config.py).
_C._npu_getOption = npu.npu_config._npu_get_option
# torch_npu's fused LLM operators (torch.ops.npu.*, with autograd): torch_npu.npu_rms_norm, ...
from torch_npu._fused_ops import *  # noqa: E402,F401,F403
from torch_npu._fused_ops import __all__ as _fused_ops_all  # noqa: E402
# torch_npu's general-purpose operators (npu_silu, npu_transpose, npu_max, ...), composites
from torch_npu._utility_ops import *  # noqa: E402,F401,F403
from torch_npu._utility_ops import __all__ as _utility_ops_all  # noqa: E402
from torch_npu._utility_ops import Format  # noqa: E402,F401  (torch_npu.Format: ACL formats)

# torch_npu's detection / bounding-box operators (npu_iou, npu_roi_align, npu_nms_v4, ...)
from torch_npu._detection_ops import *  # noqa: E402,F401,F403
from torch_npu._detection_ops import __all__ as _detection_ops_all  # noqa: E402
# torch_npu's SyncBatchNorm operators (batch_norm_reduce, batch_norm_gather_stats_update)
from torch_npu._sync_batch_norm_ops import *  # noqa: E402,F401,F403
from torch_npu._sync_batch_norm_ops import __all__ as _sync_batch_norm_ops_all  # noqa: E402

__all__ = (["npu", "profiler", "utils", "__version__"] + _fused_ops_all + _utility_ops_all
           + _detection_ops_all + _sync_batch_norm_ops_all)
