"""Caching-allocator statistics through torch.npu, and out-of-memory behaviour."""

import gc
import os
import re

import pytest
import torch
import torch_npu  # noqa: F401

MiB = 1024 * 1024


def setup_function(_):
    # Tensors an earlier test left in reference cycles (an exception's traceback holds its
    # frames) must be freed now, not by a collection in the middle of a measurement.
    gc.collect()
    torch.npu.synchronize()
    torch.npu.empty_cache()


def test_allocated_reserved_and_peaks():
    base = torch.npu.memory_allocated(0)
    x = torch.empty(4 * MiB, dtype=torch.uint8, device="npu:0")
    assert torch.npu.memory_allocated(0) == base + 4 * MiB
    assert torch.npu.memory_reserved(0) >= torch.npu.memory_allocated(0)
    peak = torch.npu.max_memory_allocated(0)
    assert peak >= base + 4 * MiB
    del x
    assert torch.npu.memory_allocated(0) == base
    assert torch.npu.max_memory_allocated(0) == peak  # peaks survive frees
    torch.npu.reset_peak_memory_stats(0)
    assert torch.npu.max_memory_allocated(0) == base
    torch.npu.empty_cache()
    assert torch.npu.memory_reserved(0) == torch.npu.memory_stats(0)["reserved_bytes.all.current"]


def test_small_allocations_round_to_512_bytes():
    base = torch.npu.memory_allocated(0)
    x = torch.empty(10, dtype=torch.uint8, device="npu:0")
    assert torch.npu.memory_allocated(0) - base == 512
    del x


def test_memory_stats_keys_match_torch_cuda():
    stats = torch.npu.memory_stats(0)
    for key in [
        "allocated_bytes.all.current", "allocated_bytes.small_pool.peak",
        "reserved_bytes.large_pool.allocated", "active_bytes.all.freed",
        "inactive_split_bytes.all.current", "requested_bytes.all.current",
        "allocation.all.current", "segment.all.peak", "num_alloc_retries", "num_ooms",
    ]:
        assert key in stats, key


def _release_earlier_tests_memory():
    gc.collect()  # tensors of earlier tests kept alive by reference cycles
    torch.npu.synchronize(0)
    torch.npu.empty_cache()


def test_empty_cache_returns_memory_to_the_device():
    _release_earlier_tests_memory()
    reserved0 = torch.npu.memory_reserved(0)
    free0, _ = torch.npu.mem_get_info(0)
    x = torch.empty(64 * MiB, dtype=torch.uint8, device="npu:0")
    del x
    assert torch.npu.memory_reserved(0) >= 64 * MiB  # cached
    torch.npu.empty_cache()
    free1, _ = torch.npu.mem_get_info(0)
    assert free1 == free0
    assert torch.npu.memory_reserved(0) == reserved0


def test_memory_summary_and_snapshot():
    x = torch.empty(3 * MiB, dtype=torch.uint8, device="npu:0")
    summary = torch.npu.memory_summary(0)
    assert "PyTorch NPU memory summary, device ID 0" in summary
    assert "Allocated memory" in summary and "NPU reserved memory" in summary
    snap = torch.npu.memory_snapshot()
    seg = [s for s in snap if s["address"] <= x.data_ptr() < s["address"] + s["total_size"]]
    assert len(seg) == 1
    assert any(b["state"] == "active_allocated" and b["size"] >= 3 * MiB for b in seg[0]["blocks"])
    del x


def test_out_of_memory_raises_with_the_torch_npu_message():
    torch.npu.set_per_process_memory_fraction(0.01, 0)  # about 655 MiB
    try:
        with pytest.raises(torch.OutOfMemoryError) as info:
            torch.empty(1024 * MiB, dtype=torch.uint8, device="npu:0")
        msg = str(info.value)
        assert re.search(
            r"NPU out of memory\. Tried to allocate 1024\.00 MiB \(NPU 0; 64\.00 GiB total capacity; "
            r".* already allocated; .* free; .* reserved in total by PyTorch\)", msg), msg
        assert "max_split_size_mb" in msg
        assert torch.npu.memory_stats(0)["num_ooms"] >= 1
    finally:
        torch.npu.set_per_process_memory_fraction(1.0, 0)
    x = torch.empty(1024 * MiB, dtype=torch.uint8, device="npu:0")  # fits again
    del x


def test_bad_fraction_is_rejected():
    with pytest.raises(ValueError, match="Allowed range"):
        torch.npu.set_per_process_memory_fraction(1.5)


def test_caching_allocator_alloc_and_delete_use_the_caching_allocator():
    torch.npu.synchronize()
    before = torch.npu.memory_allocated()
    ptr = torch.npu.caching_allocator_alloc(1 << 20)
    assert ptr != 0 and torch.npu.memory_allocated() - before >= 1 << 20
    torch.npu.caching_allocator_delete(ptr)
    assert torch.npu.memory_allocated() == before
    with pytest.raises(RuntimeError, match="was not returned by"):
        torch.npu.caching_allocator_delete(ptr)
    with pytest.raises(TypeError, match="non-negative int"):
        torch.npu.caching_allocator_alloc(-1)


def test_memory_snapshot_in_torchs_layout(tmp_path):
    import pickle

    x = torch.ones(1000, device="npu")  # noqa: F841 (held: a segment to see)
    snap = torch.npu.memory._snapshot()
    assert set(snap) == {"segments", "device_traces"}
    assert len(snap["device_traces"]) == torch.npu.device_count()
    assert any(b["state"] == "active_allocated" for s in snap["segments"] for b in s["blocks"])
    path = tmp_path / "snap.pickle"
    torch.npu.memory._dump_snapshot(str(path))
    assert pickle.loads(path.read_bytes())["segments"] == torch.npu.memory._snapshot()["segments"]
    assert all(trace == [] for trace in snap["device_traces"])  # nothing recorded


def _allocate_here(n):
    return torch.empty(n, dtype=torch.uint8, device="npu")


def test_record_memory_history_traces_allocations_with_their_stacks(tmp_path):
    import pickle

    from torch.cuda import _memory_viz

    # Python frames only: stacks="all" (the default, as torch.cuda's) adds the C++ ones.
    torch.npu.memory._record_memory_history(max_entries=1000, stacks="python")
    try:
        kept = _allocate_here(3 * MiB)
        gone = _allocate_here(1000)
        gone_address = gone.data_ptr()
        del gone
        snap = torch.npu.memory._snapshot()
        torch.npu.memory._dump_snapshot(str(tmp_path / "history.pickle"))
    finally:
        torch.npu.memory._record_memory_history(enabled=None)
    # The segments the allocations needed are traced too (test_..._segment_events).
    trace = [e for e in snap["device_traces"][0] if not e["action"].startswith("segment_")]
    actions = [(e["action"], e["addr"]) for e in trace]
    assert actions == [("alloc", kept.data_ptr()), ("alloc", gone_address),
                       ("free_requested", gone_address), ("free_completed", gone_address)]
    assert trace[0]["size"] == 3 * MiB and trace[1]["size"] == 1000  # the requested sizes
    assert all(e["stream"] == trace[0]["stream"] and e["time_us"] > 0 for e in trace)
    test_name = "test_record_memory_history_traces_allocations_with_their_stacks"
    for e in trace:  # innermost frame first: allocations in _allocate_here, the free at `del`
        names = [f["name"] for f in e["frames"]]
        assert e["frames"][0]["filename"] == __file__
        if e["action"] == "alloc":
            assert names[:2] == ["_allocate_here", test_name]
        else:
            assert names[0] == test_name
    block = [b for s in snap["segments"] for b in s["blocks"] if b["address"] == kept.data_ptr()]
    assert block[0]["state"] == "active_allocated"
    assert block[0]["frames"][0]["name"] == "_allocate_here"
    # PyTorch's memory_viz reads the pickle: its text views parse the trace and the segments.
    data = pickle.loads((tmp_path / "history.pickle").read_bytes())
    entries = len(data["device_traces"][0])
    assert f"{entries} entries" in _memory_viz.trace(data)
    assert "segments:" in _memory_viz.segsum(data)
    assert "<html" in _memory_viz.trace_plot(data).lower()
    # Stopped: the history is gone and nothing more is recorded.
    _allocate_here(10)
    assert torch.npu.memory._snapshot()["device_traces"][0] == []


def test_record_memory_history_options():
    torch.npu.memory._record_memory_history(max_entries=2, context=None, stacks="python")
    try:
        for _ in range(3):
            _allocate_here(100)
        trace = torch.npu.memory._snapshot()["device_traces"][0]
        assert len(trace) == 2 and all(e["frames"] == [] for e in trace)  # the last two entries
        torch.npu.memory._record_memory_history("state", stacks="python")  # live blocks only
        x = _allocate_here(100)
        snap = torch.npu.memory._snapshot()
        assert len(snap["device_traces"][0]) == 2
        block = [b for s in snap["segments"] for b in s["blocks"] if b["address"] == x.data_ptr()]
        assert block[0]["frames"][0]["name"] == "_allocate_here"
        torch.npu.memory._record_memory_history(True, trace_alloc_max_entries=5)  # the old form
        assert len(torch.npu.memory._snapshot()["device_traces"][0]) == 2
    finally:
        torch.npu.memory._record_memory_history(enabled=None)
    with pytest.raises(ValueError, match="enabled must be None, 'state' or 'all'"):
        torch.npu.memory._record_memory_history("yes")
    with pytest.raises(ValueError, match="context must be"):
        torch.npu.memory._record_memory_history(context="python")
    with pytest.raises(ValueError, match="stacks must be 'python' or 'all'"):
        torch.npu.memory._record_memory_history(stacks="cpp")


def test_record_memory_history_traces_segment_events(python):
    # A fresh process: which allocations need a new segment depends on what is cached.
    r = python("""
import pickle, torch, torch_npu
from torch.cuda import _memory_viz
MiB = 1 << 20
def allocate_here(n):
    return torch.empty(n, dtype=torch.uint8, device="npu")
torch.npu.memory._record_memory_history(max_entries=100, stacks="python")
x = allocate_here(3 * MiB)
address = x.data_ptr()
del x
torch.npu.empty_cache()
try:
    torch.empty(1 << 50, dtype=torch.uint8, device="npu")
except torch.OutOfMemoryError:
    pass
snap = torch.npu.memory._snapshot()
trace = snap["device_traces"][0]
print([e["action"] for e in trace])
seg_alloc, alloc, _, _, seg_free, oom = trace
assert seg_alloc["addr"] == seg_free["addr"] == alloc["addr"] == address
assert seg_alloc["size"] == seg_free["size"] == 20 * MiB
# The segment was obtained for the allocation: it carries the allocation's stack.
assert [f["name"] for f in seg_alloc["frames"][:2]] == ["allocate_here", "<module>"]
assert oom["size"] == 1 << 50 and oom["device_free"] > 0
text = _memory_viz.trace(pickle.loads(pickle.dumps(snap)))
assert "cudaMalloc(" in text and "cudaFree(" in text and "raise OutOfMemoryError" in text, text
""")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[0] == str(["segment_alloc", "alloc", "free_requested",
                                             "free_completed", "segment_free", "oom"])
    r = python("""
import torch, torch_npu
torch.npu.memory._record_memory_history(max_entries=100, context=None)
x = torch.empty(3 << 20, dtype=torch.uint8, device="npu")
del x
torch.npu.empty_cache()
print([e["action"] for e in torch.npu.memory._snapshot()["device_traces"][0]])
""", env={"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[0] == str(["segment_map", "alloc", "free_requested",
                                             "free_completed", "segment_unmap"])


def test_record_memory_history_stacks_all_adds_cpp_frames():
    def last_alloc_frames():
        trace = torch.npu.memory._snapshot()["device_traces"][0]
        return [e for e in trace if e["action"] == "alloc"][-1]["frames"]

    torch.npu.memory._record_memory_history(max_entries=10, stacks="python")
    try:
        kept = [_allocate_here(100)]
        python_only = last_alloc_frames()
        torch.npu.memory._record_memory_history(max_entries=10, stacks="all")
        kept.append(_allocate_here(100))
        both = last_alloc_frames()
    finally:
        torch.npu.memory._record_memory_history(enabled=None)
    python_names = [f["name"] for f in python_only]
    assert python_names[:2] == ["_allocate_here",
                                "test_record_memory_history_stacks_all_adds_cpp_frames"]
    # C++ frames (the allocation inside ATen's empty, the interpreter's own) come with them.
    names = [f["name"] for f in both]
    assert len(both) > len(python_only) and "_allocate_here" in names
    assert any("empty" in n for n in names if n not in python_names), names


# ---- user memory pools (torch.npu.MemPool / use_mem_pool) ---------------------------------

def _segment_pool(t):
    for s in torch.npu.memory_snapshot():
        if s["address"] <= t.data_ptr() < s["address"] + s["total_size"]:
            return tuple(s["segment_pool_id"])
    raise AssertionError("no segment holds the tensor")


def test_mem_pool_routes_allocations_and_keeps_its_freed_blocks():
    pool = torch.npu.MemPool()
    other = torch.npu.MemPool()
    assert isinstance(pool.id, tuple) and len(pool.id) == 2 and pool.id != other.id
    assert pool.allocator is None and pool.use_count() == 1
    with torch.npu.use_mem_pool(pool):
        assert pool.use_count() == 2
        x = torch.empty(3 * MiB, dtype=torch.uint8, device="npu")
    assert pool.use_count() == 1
    y = torch.empty(3 * MiB, dtype=torch.uint8, device="npu")
    assert _segment_pool(x) == pool.id and _segment_pool(y) == (0, 0)
    assert [s["address"] for s in pool.snapshot()] == [
        s["address"] for s in torch.npu.memory_snapshot() if tuple(s["segment_pool_id"]) == pool.id]
    assert len(pool.snapshot()) == 1 and other.snapshot() == []
    # A freed block goes back to its pool: the pool reuses it, nothing else does.
    address = x.data_ptr()
    del x
    z = torch.empty(3 * MiB, dtype=torch.uint8, device="npu")
    assert z.data_ptr() != address
    with torch.npu.use_mem_pool(pool):
        w = torch.empty(3 * MiB, dtype=torch.uint8, device="npu")
    assert w.data_ptr() == address
    del w, y, z


def test_mem_pool_segments_survive_empty_cache_until_the_pool_goes():
    pool = torch.npu.MemPool()
    with torch.npu.use_mem_pool(pool):
        x = torch.empty(3 * MiB, dtype=torch.uint8, device="npu")
    del x
    torch.npu.empty_cache()
    (segment,) = pool.snapshot()
    assert segment["allocated_size"] == 0 and segment["total_size"] == 20 * MiB
    reserved = torch.npu.memory_reserved()
    pool_id = pool.id
    del pool
    gc.collect()
    assert not [s for s in torch.npu.memory_snapshot() if tuple(s["segment_pool_id"]) == pool_id]
    assert torch.npu.memory_reserved() == reserved - 20 * MiB


def test_use_mem_pool_routes_only_the_current_thread():
    import threading

    pool = torch.npu.MemPool()
    seen = {}

    def elsewhere():
        seen["t"] = torch.empty(3 * MiB, dtype=torch.uint8, device="npu")

    with torch.npu.use_mem_pool(pool):
        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join()
        mine = torch.empty(3 * MiB, dtype=torch.uint8, device="npu")
    assert _segment_pool(mine) == pool.id and _segment_pool(seen["t"]) == (0, 0)


def test_mem_pool_no_split_and_refusals():
    pool = torch.npu.MemPool(no_split=True)
    with torch.npu.use_mem_pool(pool):
        x = torch.empty(3 * MiB, dtype=torch.uint8, device="npu")  # noqa: F841
    (segment,) = pool.snapshot()
    assert [b["size"] for b in segment["blocks"]] == [20 * MiB]  # handed out whole
    with pytest.raises(NotImplementedError, match="allocator= \\(a pluggable allocator\\)"):
        torch.npu.MemPool(allocator=object())
    with pytest.raises(TypeError, match="pool must be a torch.npu.MemPool"):
        with torch.npu.use_mem_pool((0, 1)):
            pass


def test_mem_pool_use_on_oom(python):
    code = """
import torch, torch_npu
MiB = 1 << 20
total = torch.npu.get_device_properties(0).total_memory
torch.npu.set_per_process_memory_fraction(100 * MiB / total)
pool = torch.npu.MemPool(use_on_oom={use_on_oom})
with torch.npu.use_mem_pool(pool):
    x = torch.empty(60 * MiB, dtype=torch.uint8, device="npu")
address = x.data_ptr()
del x
y = torch.empty(60 * MiB, dtype=torch.uint8, device="npu")  # no room for a second segment
print(y.data_ptr() == address)
"""
    r = python(code.format(use_on_oom=True))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True"]
    r = python(code.format(use_on_oom=False))
    assert r.returncode != 0 and "NPU out of memory" in r.stderr


# ---- allocator settings at run time (torch.npu.memory._set_allocator_settings) ----------------

_SEGMENT_OF = """
import torch, torch_npu
MiB = 1 << 20
def segment_of(t):
    for s in torch.npu.memory_snapshot():
        if s["address"] <= t.data_ptr() < s["address"] + s["total_size"]:
            return s
    raise AssertionError("no segment holds the tensor")
"""


def test_set_allocator_settings_changes_later_segments(python):
    # In a fresh process: the cache of this one may hold a free block a request fits in.
    r = python(_SEGMENT_OF + """
torch.npu.memory._set_allocator_settings("large_segment_size_mb:40")
x = torch.empty(3 * MiB, dtype=torch.uint8, device="npu")
print(segment_of(x)["total_size"] // MiB)
torch.npu.memory._set_allocator_settings("expandable_segments:True")
y = torch.empty(300 * MiB, dtype=torch.uint8, device="npu")
print(segment_of(y)["is_expandable"], segment_of(x)["is_expandable"])
torch.npu.memory._set_allocator_settings("expandable_segments:False,large_segment_size_mb:20")
del x, y
torch.npu.empty_cache()
z = torch.empty(3 * MiB, dtype=torch.uint8, device="npu")
print(segment_of(z)["total_size"] // MiB)
""")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["40", "True", "False", "20"]


def test_set_allocator_settings_refuses_bad_settings_and_changes_nothing(python):
    with pytest.raises(RuntimeError, match="_set_allocator_settings: bad value 'Maybe' for "
                                           "expandable_segments; expected True or False"):
        torch.npu.memory._set_allocator_settings(
            "large_segment_size_mb:64,expandable_segments:Maybe")
    with pytest.raises(RuntimeError, match="unknown key 'bogus'"):
        torch.npu.memory._set_allocator_settings("bogus:1")
    with pytest.raises(TypeError, match="must be a str"):
        torch.npu.memory._set_allocator_settings(64)
    r = python(_SEGMENT_OF + """
try:
    torch.npu.memory._set_allocator_settings("large_segment_size_mb:64,expandable_segments:Maybe")
except RuntimeError:
    pass
x = torch.empty(3 * MiB, dtype=torch.uint8, device="npu")
print(segment_of(x)["total_size"] // MiB)  # the valid first key was not applied
""")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["20"]


def test_torch_npus_alloc_conf_keys_from_the_environment(python):
    r = python("""
import torch, torch_npu
x = torch.empty(3 << 20, dtype=torch.uint8, device="npu")
seg = [s for s in torch.npu.memory_snapshot()
       if s["address"] <= x.data_ptr() < s["address"] + s["total_size"]][0]
print(torch.npu.get_per_process_memory_fraction(), seg["total_size"] >> 20)
""", env={"PYTORCH_NPU_ALLOC_CONF": "per_process_memory_fraction:0.5,large_segment_size_mb:64,"
                                    "multi_stream_lazy_reclaim:True,base_addr_aligned_kb:0"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0.5", "64"]
    r = python("import torch, torch_npu; torch.ones(1, device='npu')",
               env={"PYTORCH_NPU_ALLOC_CONF": "segment_size_mb:1000"})
    assert r.returncode != 0 and "segment_size_mb; expected an integer number of MiB in [20, 512]" \
        in r.stderr


def test_pytorch_alloc_conf_is_read_as_torch_npu_reads_it(python):
    code = """
import torch, torch_npu
x = torch.empty(3 << 20, dtype=torch.uint8, device="npu")
seg = [s for s in torch.npu.memory_snapshot()
       if s["address"] <= x.data_ptr() < s["address"] + s["total_size"]][0]
print(seg["total_size"] >> 20)
"""
    r = python(code, env={"PYTORCH_ALLOC_CONF": "large_segment_size_mb:64,"
                                                "pinned_reserve_segment_size_mb:32"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["64"]
    r = python(code, env={"PYTORCH_ALLOC_CONF": "large_segment_size_mb:64",
                          "PYTORCH_NPU_ALLOC_CONF": "large_segment_size_mb:64"})
    assert r.returncode != 0 and "are both set" in r.stderr and "set only one of them" in r.stderr
    r = python(code, env={"PYTORCH_ALLOC_CONF": "bogus:1"})
    assert r.returncode != 0 and "PYTORCH_ALLOC_CONF: unknown key 'bogus'" in r.stderr


def test_host_memory_stats_follow_pinned_allocations():
    """torch.npu.host_memory_stats as torch.cuda's: a pinned tensor is an active request of its
    power-of-two block; freeing it keeps the block cached (owned, not active); resets clear the
    sums and peaks."""
    torch.npu.init()
    torch.npu.reset_accumulated_host_memory_stats()
    before = torch.npu.host_memory_stats()
    x = torch.empty(3000, dtype=torch.uint8).pin_memory()
    assert x.is_pinned()
    s = torch.npu.host_memory_stats()
    assert s["active_requests.current"] == before["active_requests.current"] + 1
    assert s["active_bytes.current"] == before["active_bytes.current"] + 4096  # 3000 -> 2^12
    # A new block (1) unless an earlier test left one of that size cached (0).
    grown = s["num_host_alloc"]
    assert grown in (0, 1) and s["host_alloc_time.count"] == grown
    assert s["allocations.current"] == before["allocations.current"] + grown
    assert s["allocated_bytes.current"] == before["allocated_bytes.current"] + 4096 * grown
    del x
    s = torch.npu.host_memory_stats()
    assert s["active_requests.current"] == before["active_requests.current"]
    assert s["allocated_bytes.current"] == before["allocated_bytes.current"] + 4096 * grown
    assert torch.npu.host_memory_stats_as_nested_dict()["active_bytes"]["peak"] >= 4096
    torch.npu.reset_peak_host_memory_stats()
    torch.npu.reset_accumulated_host_memory_stats()
    s = torch.npu.host_memory_stats()
    assert s["active_bytes.peak"] == s["active_bytes.current"]
    assert s["num_host_alloc"] == 0 and s["active_requests.allocated"] == 0


def test_empty_virt_addr_cache_needs_and_empties_expandable_segments():
    import subprocess
    import sys
    code = """
import torch, torch_npu
x = torch.empty(64 * 1024 * 1024, dtype=torch.uint8, device="npu")
del x
reserved = torch.npu.memory_reserved()
assert reserved >= 64 * 1024 * 1024, reserved
torch.npu.empty_virt_addr_cache()
assert torch.npu.memory_reserved() == 0, torch.npu.memory_reserved()
assert torch.npu.max_memory_reserved() == reserved
print("ok")
"""
    env = dict(os.environ, PYTORCH_NPU_ALLOC_CONF="expandable_segments:True")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
    env.pop("PYTORCH_NPU_ALLOC_CONF")
    env.pop("PYTORCH_ALLOC_CONF", None)
    r = subprocess.run([sys.executable, "-c", "import torch, torch_npu; "
                        "torch.npu.empty_virt_addr_cache()"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0 and "needs expandable segments" in r.stderr, r.stderr
