// The profiler bridge: host operators (RecordFunction), allocator events and the runtime's
// device activity records, gathered for torch_npu.profiler; and a Kineto plugin that feeds the
// same device records into torch.profiler (ProfilerActivity.PrivateUse1).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace pybind11 {
class module_;
}

namespace torch_npu::profiler {

// True while a torch_npu.profiler session with profile_memory=True is open. The allocator reads
// it on every allocation and free, so it is a plain relaxed load.
extern std::atomic<bool> g_record_memory;
inline bool recordsMemory() { return g_record_memory.load(std::memory_order_relaxed); }

// One allocator event: `delta_bytes` > 0 for an allocation, < 0 for a free. Never throws and
// never takes the GIL (called from any thread, stream workers included).
void recordMemoryEvent(const void* ptr, int64_t delta_bytes, int device) noexcept;

// Whether torch has Kineto and our plugin is registered with it (KinetoPlugin.cpp).
bool hasKinetoPlugin();

// Adds the _npu_profiler_* functions to torch_npu._C.
void initProfilerBindings(pybind11::module_& m);

}  // namespace torch_npu::profiler
