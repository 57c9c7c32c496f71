"""torch.npu: the device module of the simulated Ascend NPU (torch.cuda's twin).

Everything here is a thin layer over ``torch_npu._C``, the C++ adapter; the runtime underneath
is SimNPU's simulated device runtime. Initialisation is lazy, as in torch.cuda: importing costs
nothing, and the first call that needs a device starts the runtime.
"""

from __future__ import annotations

from ._device import (  # noqa: F401
    _check_index,
    _DeviceLike,
    _get_device_index,
    _is_in_bad_fork,
    _lazy_call,
    _lazy_init,
    _NPUDeviceProperties,
    _sleep,
    current_device,
    device,
    device_count,
    device_of,
    get_amp_supported_dtype,
    get_device_capability,
    get_device_name,
    get_device_properties,
    init,
    is_available,
    is_bf16_supported,
    is_initialized,
    set_device,
    synchronize,
    utilization,
)
from .memory import (  # noqa: F401
    MemPool,
    caching_allocator_alloc,
    caching_allocator_delete,
    empty_cache,
    empty_virt_addr_cache,
    get_per_process_memory_fraction,
    host_memory_stats,
    host_memory_stats_as_nested_dict,
    max_memory_allocated,
    max_memory_cached,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_cached,
    memory_reserved,
    memory_snapshot,
    memory_stats,
    memory_stats_as_nested_dict,
    memory_summary,
    reset_accumulated_host_memory_stats,
    reset_accumulated_memory_stats,
    reset_max_memory_allocated,
    reset_max_memory_cached,
    reset_peak_host_memory_stats,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
    use_mem_pool,
)
from .random import (  # noqa: F401
    _get_generator,
    default_generators,
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from .streams import (  # noqa: F401
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
)
from . import amp, graphs  # noqa: F401
from .amp import (  # noqa: F401
    get_autocast_dtype,
    is_autocast_enabled,
    set_autocast_dtype,
    set_autocast_enabled,
)
from .graphs import (  # noqa: F401
    NPUGraph,
    graph,
    graph_pool_handle,
    is_current_stream_capturing,
    make_graphed_callables,
)
from . import npu_config  # noqa: F401
from .npu_config import (  # noqa: F401
    are_compatible_impl_enabled,
    config,
    conv,
    get_mm_bmm_format_nd,
    is_jit_compile_false,
    matmul,
    set_compile_mode,
    set_mm_bmm_format_nd,
    set_option,
    use_compatible_impl,
)
from ._backends import (  # noqa: F401
    enable_flash_sdp,
    enable_math_sdp,
    enable_mem_efficient_sdp,
    flash_sdp_enabled,
    math_sdp_enabled,
    mem_efficient_sdp_enabled,
    preferred_linalg_library,
    sdp_kernel,
)
from ._legacy_types import *  # noqa: F401,F403  (FloatTensor, ..., FloatStorage, ...)
from .shadow import shadow_mode  # noqa: F401  (SimNPU: NPU_SIM_SHADOW)
from ._recovery import (  # noqa: F401
    _get_uce_addr,
    check_uce_in_memory,
    restart_device,
    stop_device,
)
from .strict import set_strict_mode, strict_mode  # noqa: F401  (SimNPU: NPU_SIM_STRICT)
from . import utils  # noqa: F401
from .utils import (  # noqa: F401
    can_device_access_peer,
    clear_npu_overflow_flag,
    current_blas_handle,
    finalize_dump,
    get_allocator_backend,
    get_npu_overflow_flag,
    get_sync_debug_mode,
    init_dump,
    ipc_collect,
    set_dump,
    set_sync_debug_mode,
)
from ._legacy_types import __all__ as _legacy_types_all

__all__ = [
    "Event", "NPUGraph", "Stream", "StreamContext", "current_device", "current_stream",
    "default_generators", "default_stream", "device", "device_count", "device_of", "empty_cache",
    "get_amp_supported_dtype", "get_autocast_dtype", "get_device_capability", "get_device_name",
    "get_device_properties", "get_rng_state", "get_rng_state_all", "graph", "graph_pool_handle",
    "init", "initial_seed", "is_current_stream_capturing",
    "is_autocast_enabled", "is_available", "is_bf16_supported", "is_initialized",
    "make_graphed_callables", "manual_seed", "manual_seed_all", "max_memory_allocated",
    "max_memory_reserved", "mem_get_info", "memory_allocated", "memory_reserved",
    "memory_snapshot", "memory_stats", "memory_summary", "reset_peak_memory_stats", "seed",
    "seed_all", "set_autocast_dtype", "set_autocast_enabled", "set_device",
    "set_per_process_memory_fraction", "set_rng_state", "set_rng_state_all", "set_stream",
    "stream", "synchronize", "utilization",
    # run-time switches (npu_config.py) and SDPA backend toggles (_backends.py)
    "conv", "enable_flash_sdp", "enable_math_sdp", "enable_mem_efficient_sdp",
    "flash_sdp_enabled", "get_mm_bmm_format_nd", "is_jit_compile_false", "math_sdp_enabled",
    "matmul", "mem_efficient_sdp_enabled", "preferred_linalg_library", "sdp_kernel",
    "set_compile_mode", "set_mm_bmm_format_nd", "set_option",
    "are_compatible_impl_enabled", "use_compatible_impl", "config",
    # torch_npu.npu.utils
    "can_device_access_peer", "clear_npu_overflow_flag", "current_blas_handle", "finalize_dump",
    "get_allocator_backend", "get_npu_overflow_flag", "get_sync_debug_mode", "init_dump",
    "ipc_collect", "set_dump", "set_sync_debug_mode",
    "caching_allocator_alloc", "caching_allocator_delete", "get_per_process_memory_fraction",
    "max_memory_cached", "memory_cached", "memory_stats_as_nested_dict",
    "reset_accumulated_memory_stats", "reset_max_memory_allocated", "reset_max_memory_cached",
    "MemPool", "use_mem_pool", "empty_virt_addr_cache", "host_memory_stats", "host_memory_stats_as_nested_dict",
    "reset_accumulated_host_memory_stats", "reset_peak_host_memory_stats",
    # fault recovery (_recovery.py)
    "check_uce_in_memory", "restart_device", "stop_device",
] + _legacy_types_all


_INDUCTOR_HOOKS = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen")


def __getattr__(name: str):
    # Inductor asks the device module for its backend classes when it first compiles for npu
    # (torch.utils.backend_registration._get_custom_mod_func); importing them here, on demand,
    # keeps `import torch_npu` from importing Inductor.
    if name in _INDUCTOR_HOOKS:
        import torch_npu._inductor as inductor

        return getattr(inductor, name, None)
    raise AttributeError(f"module 'torch.npu' has no attribute '{name}'")
