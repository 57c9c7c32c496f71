"""The device allocator (c10::DeviceAllocator over the caching allocator) and the pinned host
allocator, as PyTorch and torch_npu._C see them."""

import re

import torch
from torch.utils.data import DataLoader, TensorDataset

import torch_npu

C = torch_npu._C
MiB = 1 << 20
POOLS = {"all", "small_pool", "large_pool"}
STAT = {"current", "peak", "allocated", "freed"}
STAT_ARRAYS = ["allocation", "segment", "active", "inactive_split", "allocated_bytes",
               "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes"]
COUNTS = ["num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc",
          "num_device_free", "max_split_size"]


def allocated(device=0):
    return C._npu_memoryStats(device)["allocated_bytes"]["all"]["current"]


def test_memory_stats_have_torch_cuda_structure():
    stats = C._npu_memoryStats(0)
    assert set(stats) == set(STAT_ARRAYS) | set(COUNTS) | {"oversize_allocations",
                                                           "oversize_segments"}
    for name in STAT_ARRAYS:
        assert set(stats[name]) == POOLS, name
        for pool in POOLS:
            assert set(stats[name][pool]) == STAT
    assert set(stats["oversize_allocations"]) == STAT


def test_allocation_is_counted_and_freed():
    base = allocated(1)
    x = torch.empty(3 * MiB, dtype=torch.uint8, device="npu:1")
    assert allocated(1) - base == 3 * MiB
    assert C._npu_memoryStats(1)["allocated_bytes"]["large_pool"]["current"] >= 3 * MiB
    assert torch.accelerator.memory_allocated(1) == allocated(1)  # through c10::DeviceAllocator
    del x
    assert allocated(1) == base
    assert C._npu_memoryStats(1)["allocated_bytes"]["all"]["peak"] >= base + 3 * MiB
    C._npu_resetPeakMemoryStats(1)
    assert C._npu_memoryStats(1)["allocated_bytes"]["all"]["peak"] == base


def test_snapshot_shows_the_block_of_a_tensor():
    x = torch.empty(5 * MiB, dtype=torch.uint8, device="npu:2")
    snap = C._npu_memorySnapshot()
    assert snap["device_traces"] == []
    blocks = [(seg, b) for seg in snap["segments"] for b in seg["blocks"]
              if b["address"] == x.data_ptr()]
    assert len(blocks) == 1
    seg, block = blocks[0]
    assert seg["device"] == 2 and seg["segment_type"] == "large"
    assert block["state"] == "active_allocated" and block["size"] >= 5 * MiB
    assert block["requested_size"] == 5 * MiB
    assert seg["total_size"] >= sum(b["size"] for b in seg["blocks"]) - 1
    assert isinstance(seg["stream"], int) and seg["is_expandable"] in (True, False)


def test_empty_cache_returns_unused_segments():
    x = torch.empty(30 * MiB, dtype=torch.uint8, device="npu:3")
    reserved = C._npu_memoryStats(3)["reserved_bytes"]["all"]["current"]
    assert reserved >= 30 * MiB
    del x
    C._npu_emptyCache()
    assert C._npu_memoryStats(3)["reserved_bytes"]["all"]["current"] <= reserved - 30 * MiB


def test_memory_fraction_round_trip():
    C._npu_setMemoryFraction(0.5, 4)
    assert C._npu_getMemoryFraction(4) == 0.5
    C._npu_setMemoryFraction(1.0, 4)
    assert C._npu_getMemoryFraction(4) == 1.0


def test_out_of_memory_is_torch_out_of_memory_error(python):
    code = """
import torch, torch_npu
try:
    torch.empty(2 << 30, dtype=torch.uint8, device='npu')
    print("allocated")
except torch.OutOfMemoryError as e:
    print(type(e).__name__, isinstance(e, RuntimeError))
    print(str(e).splitlines()[0])
small = torch.ones(1024, device='npu')        # the device is still usable
print(small.sum().item(), torch_npu._C._npu_memoryStats(0)['num_ooms'])
"""
    r = python(code, env={"NPU_SIM_HBM_GB": "1"})
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == "OutOfMemoryError True", r.stdout
    assert re.match(r"NPU out of memory\. Tried to allocate 2\.00 GiB \(NPU 0; 1024\.00 MiB total "
                    r"capacity; .* already allocated; .* free; .* reserved in total by "
                    r"PyTorch\) If reserved memory is >> allocated memory try setting "
                    r"max_split_size_mb to avoid fragmentation\.", out[1]), out[1]
    assert out[2] == "1024.0 1"


def test_pin_memory_and_is_pinned():
    device_bytes = allocated(0)
    x = torch.randn(64, 64)
    assert not x.is_pinned()
    p = x.pin_memory()
    assert p.is_pinned() and torch.equal(p, x)
    assert p.data_ptr() != x.data_ptr()
    e = torch.empty(1000, pin_memory=True)
    assert e.is_pinned()
    assert not torch.ones(3, device="npu").is_pinned()
    assert allocated(0) == device_bytes  # pinned memory is host memory, not device memory
    view = p[10:]
    assert view.is_pinned()  # a pointer inside a pinned block


def test_dataloader_pin_memory():
    ds = TensorDataset(torch.arange(40.0).reshape(20, 2), torch.arange(20))
    batches = list(DataLoader(ds, batch_size=8, pin_memory=True))
    assert all(xb.is_pinned() and yb.is_pinned() for xb, yb in batches)
    assert torch.equal(torch.cat([xb for xb, _ in batches]), ds.tensors[0])


def test_pinned_memory_is_recycled():
    a = torch.empty(4096, dtype=torch.uint8, pin_memory=True)
    ptr = a.data_ptr()
    del a
    b = torch.empty(4096, dtype=torch.uint8, pin_memory=True)
    assert b.data_ptr() == ptr  # the host allocator's cache hands the block out again
