// Allocation history of the npu allocator, for torch.npu.memory._record_memory_history /
// _snapshot / _dump_snapshot (the pickle PyTorch's memory_viz reads), as torch.cuda records it:
//  - while recording, each allocation and free of the npu allocator becomes a trace entry
//    (action, address, size, stream, time), kept per device in a ring of max_entries;
//  - with a context, the Python stack of the call is captured (CapturedTraceback) and
//    symbolized only when a snapshot asks, so recording costs a stack walk, not a lookup;
//  - the stack of each live allocation is kept too, for the snapshot's blocks;
//  - the allocator's dealings with the runtime (segment_alloc / segment_free, segment_map /
//    segment_unmap of expandable segments, oom) come through its trace observer, with the stack
//    of the allocation that caused them when there is one (AllocationScope);
//  - stacks="all" adds the C++ frames to the Python ones.
// Stacks are taken only on threads Python runs on (taking the GIL for the walk): allocations
// and frees also happen on stream workers, which must never wait for it (NPUAllocator.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <pybind11/pybind11.h>

namespace torch_npu::memory_history {

// enabled: "state" (live allocations' stacks only) or "all" (and the trace), "" to stop;
// context: "" none, "state", "alloc" (stacks of allocations), "all" (and of frees).
// Throws c10::Error naming a bad value.
// stacks: "python" or "all" (C++ frames too).
void configure(const std::string& enabled, const std::string& context, const std::string& stacks,
               size_t max_entries, bool clear);
bool recording() noexcept;

// Around an allocation while recording: the allocation's stack is taken once, before the
// allocator runs, and serves the segment it may obtain as well as the allocation's own entry.
class AllocationScope {
 public:
  AllocationScope();
  ~AllocationScope();
  AllocationScope(const AllocationScope&) = delete;
  AllocationScope& operator=(const AllocationScope&) = delete;
};

void recordAlloc(void* ptr, int device, void* stream);
void recordFree(void* ptr);

// {"device_traces": [[entry, ...] per device], "block_frames": {address: frames}} with each
// stack symbolized into [{"filename", "line", "name"}, ...]. Needs the GIL.
pybind11::dict snapshot(int device_count);

}  // namespace torch_npu::memory_history
