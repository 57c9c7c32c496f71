"""Caching-allocator statistics and controls: torch.cuda.memory's twin for npu."""

from __future__ import annotations

import collections
import contextlib
import sys
from typing import Any

import torch

import torch_npu._C as _C

from ._device import _check_index, _get_device_index, _lazy_init, is_initialized


def _index(device) -> int:
    _lazy_init()
    return _check_index(_get_device_index(device))


def memory_stats_as_nested_dict(device=None) -> dict[str, Any]:
    """The allocator's statistics as nested dicts (torch.cuda's layout)."""
    return _C._npu_memoryStats(_index(device))


def memory_stats(device=None) -> "collections.OrderedDict[str, Any]":
    """Flat allocator statistics, keys as torch.cuda.memory_stats names them,
    e.g. ``allocated_bytes.all.current``, ``num_alloc_retries``."""
    return _flatten(memory_stats_as_nested_dict(device))


def _flatten(nested: dict) -> "collections.OrderedDict[str, Any]":
    flat = []

    def add(prefix: str, value):
        if isinstance(value, dict):
            for k, v in value.items():
                add(f"{prefix}.{k}" if prefix else k, v)
        else:
            flat.append((prefix, value))

    add("", nested)
    flat.sort()
    return collections.OrderedDict(flat)


def host_memory_stats_as_nested_dict() -> dict[str, Any]:
    """The pinned host allocator's statistics as nested dicts (torch.cuda's layout): blocks
    and bytes it owns (allocations, allocated_bytes) and has handed out (active_requests,
    active_bytes), each current / peak / allocated / freed; num_host_alloc / num_host_free and
    the time spent in them (host_alloc_time / host_free_time, microseconds). {} before the
    device is initialized, as torch.cuda."""
    if not is_initialized():
        return {}
    return _C._npu_hostMemoryStats()


def host_memory_stats() -> "collections.OrderedDict[str, Any]":
    """host_memory_stats_as_nested_dict() flattened, e.g. ``active_bytes.current``."""
    return _flatten(host_memory_stats_as_nested_dict())


def reset_accumulated_host_memory_stats() -> None:
    """Resets the host allocator's "allocated" / "freed" sums and its alloc / free counters."""
    _lazy_init()
    _C._npu_resetAccumulatedHostMemoryStats()


def reset_peak_host_memory_stats() -> None:
    """Resets the host allocator's "peak" statistics to their current values."""
    _lazy_init()
    _C._npu_resetPeakHostMemoryStats()


def memory_allocated(device=None) -> int:
    """Bytes held by tensors on `device` now."""
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device=None) -> int:
    """Peak of memory_allocated since start or reset_peak_memory_stats."""
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device=None) -> int:
    """Bytes the caching allocator holds from the device (used plus cached)."""
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device=None) -> int:
    """Peak of memory_reserved since start or reset_peak_memory_stats."""
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def memory_cached(device=None) -> int:  # deprecated torch.cuda name
    return memory_reserved(device)


def max_memory_cached(device=None) -> int:  # deprecated torch.cuda name
    return max_memory_reserved(device)


def reset_peak_memory_stats(device=None) -> None:
    """Resets every "peak" statistic to its current value."""
    _C._npu_resetPeakMemoryStats(_index(device))


def reset_max_memory_allocated(device=None) -> None:
    reset_peak_memory_stats(device)


def reset_max_memory_cached(device=None) -> None:  # deprecated torch.cuda name
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device=None) -> None:
    """Resets the "allocated" and "freed" running sums and the retry/OOM counters."""
    _C._npu_resetAccumulatedMemoryStats(_index(device))


def empty_cache() -> None:
    """Returns every unused cached block to the device (pages go back to the OS)."""
    if is_initialized():
        _C._npu_emptyCache()


def empty_virt_addr_cache() -> None:
    """torch_npu's light empty_cache for expandable segments: the unused pages of every
    expandable segment are unmapped, so memory_reserved() drops as after empty_cache (here the
    simulated physical pages, host memory, go back too). Only with
    PYTORCH_NPU_ALLOC_CONF=expandable_segments:True, as torch_npu requires."""
    _lazy_init()
    if not _C._npu_expandableSegments():
        raise RuntimeError("empty_virt_addr_cache needs expandable segments: set "
                           "PYTORCH_NPU_ALLOC_CONF=expandable_segments:True before the first "
                           "npu allocation (or call torch.npu.empty_cache)")
    _C._npu_emptyCache()


def set_per_process_memory_fraction(fraction: float, device=None) -> None:
    """Caps what this process may reserve on `device` at fraction * total memory."""
    if not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    _C._npu_setMemoryFraction(float(fraction), _index(device))


def _set_allocator_settings(env: str) -> None:
    """Changes allocator settings at run time, as torch_npu's (and torch.cuda.memory's) do:
    ``env`` has PYTORCH_NPU_ALLOC_CONF's grammar and keys ("expandable_segments:True",
    "max_split_size_mb:64,garbage_collection_threshold:0.8", ...). Only the keys named change;
    later allocations follow them, existing segments stay. A bad setting raises RuntimeError
    and changes nothing."""
    if not isinstance(env, str):
        raise TypeError(f"torch.npu.memory._set_allocator_settings: env must be a str such as "
                        f"'expandable_segments:True', got {type(env).__name__}")
    _C._npu_setAllocatorSettings(env)


def get_per_process_memory_fraction(device=None) -> float:
    return _C._npu_getMemoryFraction(_index(device))


def mem_get_info(device=None) -> tuple[int, int]:
    """(free, total) bytes of device memory, as the runtime sees it."""
    return tuple(_C._npu_memGetInfo(_index(device)))


def memory_snapshot(mempool_id=None, include_traces: bool = True) -> list[dict[str, Any]]:
    """Every segment the allocator holds, with its blocks (torch.cuda.memory_snapshot); with
    `mempool_id` (a MemPool's id), only that pool's segments. include_traces is torch.cuda's
    argument: segments carry no trace entries here either way."""
    if not is_initialized():
        return []
    segments = _C._npu_memorySnapshot()["segments"]
    if mempool_id is None:
        return segments
    wanted = tuple(mempool_id)
    return [seg for seg in segments if tuple(seg["segment_pool_id"]) == wanted]


# Raw allocations of caching_allocator_alloc, by address: each is a byte tensor the caching
# allocator served, kept alive until caching_allocator_delete gives it back.
_raw_allocations: dict[int, torch.Tensor] = {}


def caching_allocator_alloc(size: int, device=None, stream=None) -> int:
    """`size` bytes from the caching allocator, on `device` for use on `stream` (the current
    ones by default); returns the address. Give it back with caching_allocator_delete."""
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise TypeError(f"caching_allocator_alloc: size must be a non-negative int, got {size!r}")
    index = _index(device)
    from .streams import stream as stream_context

    with torch.npu.device(index), stream_context(stream):
        block = torch.empty(size, dtype=torch.uint8, device=torch.device("npu", index))
    address = block.data_ptr()
    if size:
        _raw_allocations[address] = block
    return address


def caching_allocator_delete(mem_ptr: int) -> None:
    """Returns memory from caching_allocator_alloc to the caching allocator."""
    if mem_ptr == 0:
        return
    if _raw_allocations.pop(mem_ptr, None) is None:
        raise RuntimeError(f"caching_allocator_delete: {mem_ptr:#x} was not returned by "
                           "torch.npu.caching_allocator_alloc (or was deleted already)")


def _snapshot(device=None) -> dict[str, Any]:
    """torch.cuda.memory._snapshot's layout: {"segments": [...], "device_traces": [...]}. Each
    segment lists its blocks; while _record_memory_history records, each device's trace holds
    its allocations and frees (action, addr, size, stream, time_us, frames) and each live
    block its allocating stack ("frames": [{"filename", "line", "name"}, ...]).
    _dump_snapshot's pickle of it renders in PyTorch's memory_viz."""
    if not is_initialized():
        return {"segments": [], "device_traces": []}
    history = _C._npu_memoryHistory()
    segments = _C._npu_memorySnapshot()["segments"]
    frames = history["block_frames"]
    for segment in segments:
        for block in segment["blocks"]:
            if block["state"] == "active_allocated" and block["address"] in frames:
                block["frames"] = frames[block["address"]]
    return {"segments": segments, "device_traces": history["device_traces"]}


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Writes _snapshot() as a pickle (drag it into https://pytorch.org/memory_viz)."""
    import pickle

    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize,
                           device=None, clear_history=False, **legacy) -> None:
    """torch.cuda.memory._record_memory_history's twin. enabled: None (stop and forget),
    "state" (the stack of each live allocation) or "all" (also a trace of every allocation and
    free and of the allocator's segment_alloc / segment_free / segment_map / segment_unmap /
    oom, the last max_entries per device); context: None, "state", "alloc" (stacks of
    allocations) or "all" (of frees too); stacks: "python" (Python frames) or "all" (C++ frames
    too). The old form (True / False with trace_alloc_max_entries=...) is accepted, as
    torch.cuda accepts it."""
    if isinstance(enabled, bool):  # _record_memory_history(True, trace_alloc_max_entries=...)
        max_entries = legacy.pop("trace_alloc_max_entries", 1)
        record_context = legacy.pop("record_context", True)
        trace_alloc = legacy.pop("trace_alloc_record_context", False)
        legacy.pop("_enable_expandable_segments", None)
        legacy.pop("record_context_cpp", None)
        enabled = ("all" if trace_alloc or max_entries > 1 else "state") if enabled else None
        context = "all" if record_context else None
    if legacy:
        raise TypeError(f"_record_memory_history() got unexpected keyword arguments "
                        f"{sorted(legacy)}")
    if enabled not in (None, "state", "all"):
        raise ValueError(f"_record_memory_history: enabled must be None, 'state' or 'all', got "
                         f"{enabled!r}")
    if context not in (None, "state", "alloc", "all"):
        raise ValueError(f"_record_memory_history: context must be None, 'state', 'alloc' or "
                         f"'all', got {context!r}")
    if stacks not in ("python", "all"):
        raise ValueError(f"_record_memory_history: stacks must be 'python' or 'all', got "
                         f"{stacks!r}")
    if enabled is not None:
        _lazy_init()
    _C._npu_recordMemoryHistory(enabled or "", context or "", stacks, int(max_entries),
                                bool(clear_history))


class MemPool:
    """torch.cuda.MemPool's twin: a pool of the caching allocator. Inside use_mem_pool(pool),
    what the current thread allocates on the pool's device comes from the pool's own segments,
    and blocks freed return to it; while the MemPool lives, empty_cache leaves its segments;
    once it is gone they go back to the device (as the CUDA MemPool's destructor empties its
    pool). use_on_oom: an allocation elsewhere that would run out of memory may take the pool's
    free blocks; no_split: the pool's blocks are handed out whole. Its id can also be given to
    torch.npu.graph(pool=...)."""

    def __init__(self, allocator=None, use_on_oom: bool = False, no_split: bool = False):
        if allocator is not None:
            raise NotImplementedError(
                "torch.npu.MemPool: allocator= (a pluggable allocator) is not supported by "
                "SimNPU, which has no NPUPluggableAllocator; pass None to use the caching "
                "allocator")
        self._device = _index(None)
        self._id = tuple(_C._npu_createMemPool(self._device, bool(use_on_oom), bool(no_split)))

    @property
    def id(self) -> tuple[int, int]:
        """The pool's id, (0, n)."""
        return self._id

    @property
    def allocator(self):
        """None: the pool's memory comes from the caching allocator."""
        return None

    def use_count(self) -> int:
        """This object, plus each use_mem_pool block (or graph capture) using the pool now."""
        return _C._npu_memPoolUseCount(self._device, self._id)

    def snapshot(self, include_traces: bool = True) -> list[dict[str, Any]]:
        """memory_snapshot of this pool's segments only."""
        return memory_snapshot(self._id, include_traces=include_traces)

    def __del__(self):
        device, pool_id = getattr(self, "_device", None), getattr(self, "_id", None)
        if pool_id is not None and _C is not None:
            try:
                _C._npu_destroyMemPool(device, pool_id)
            except Exception:  # interpreter shutdown: the allocator may be gone already
                pass


@contextlib.contextmanager
def use_mem_pool(pool: MemPool, device=None):
    """Routes the current thread's allocations on `device` (the current device by default) to
    `pool` inside the block, as torch.cuda.use_mem_pool. Other threads (an autograd backward
    thread started inside, say) keep allocating as before."""
    if not isinstance(pool, MemPool):
        raise TypeError(f"torch.npu.use_mem_pool: pool must be a torch.npu.MemPool, got "
                        f"{type(pool).__name__}")
    index = _index(device)
    _C._npu_beginAllocateCurrentThreadToPool(index, pool.id)
    try:
        yield
    finally:
        _C._npu_endAllocateCurrentThreadToPool(index, pool.id)
        _C._npu_releasePool(index, pool.id)


def _format_size(num: int) -> str:
    for unit in ("B  ", "KiB", "MiB", "GiB", "TiB"):
        if abs(num) < 1024 or unit == "TiB":
            return f"{num:6d} {unit}" if unit == "B  " else f"{num:6.0f} {unit}"
        num /= 1024.0
    return str(num)


def _format_count(num: int) -> str:
    for unit in (" ", "K", "M"):
        if abs(num) < 1000 or unit == "M":
            return f"{num:7d} {unit}" if unit == " " else f"{num:7.0f} {unit}"
        num /= 1000.0
    return str(num)


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A readable table of the allocator statistics of `device`."""
    index = _index(device)
    stats = memory_stats(index)
    rows = [
        ("allocated_bytes", "Allocated memory", _format_size),
        ("active_bytes", "Active memory", _format_size),
        ("requested_bytes", "Requested memory", _format_size),
        ("reserved_bytes", "NPU reserved memory", _format_size),
        ("inactive_split_bytes", "Non-releasable memory", _format_size),
        ("allocation", "Allocations", _format_count),
        ("active", "Active allocs", _format_count),
        ("segment", "NPU reserved segments", _format_count),
        ("inactive_split", "Non-releasable allocs", _format_count),
    ]
    width = 75
    line = "|" + "=" * width + "|"
    thin = "|" + "-" * width + "|"
    out = [line, "|{:^75}|".format(f"PyTorch NPU memory summary, device ID {index}"), thin]
    out.append(
        "|{:^75}|".format(
            f"NPU OOMs: {stats.get('num_ooms', 0):<12d}|  npuMalloc retries: "
            f"{stats.get('num_alloc_retries', 0):<12d}"
        )
    )
    out += [line, "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |", thin]
    pools = [("all", "")] if abbreviated else [("all", ""), ("large_pool", "from large pool"), ("small_pool", "from small pool")]
    for key, title, fmt in rows:
        for pool, suffix in pools:
            name = title if not suffix else f"      {suffix}"
            cells = [fmt(stats.get(f"{key}.{pool}.{f}", 0)) for f in ("current", "peak", "allocated", "freed")]
            out.append("| {:<21} | {} | {} | {} | {} |".format(name, *cells))
        out.append(thin)
    out.append(
        "| {:<21} | {} | {} | {} | {} |".format(
            "Oversize allocations",
            *[_format_count(stats.get(f"oversize_allocations.{f}", 0)) for f in ("current", "peak", "allocated", "freed")],
        )
    )
    out.append(
        "| {:<21} | {} | {} | {} | {} |".format(
            "Oversize NPU segments",
            *[_format_count(stats.get(f"oversize_segments.{f}", 0)) for f in ("current", "peak", "allocated", "freed")],
        )
    )
    out.append(line)
    return "\n".join(out) + "\n"
