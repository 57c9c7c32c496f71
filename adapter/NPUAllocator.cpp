// c10::DeviceAllocator for the npu device: thin forwarding to npu::alloc::CachingAllocator.
// allocate() and the deleter never take the GIL (they run on any thread, including stream
// workers), except to record a Python stack while _record_memory_history asks for one, and
// then only on threads Python runs on (MemoryHistory.h).
#include "NPUAllocator.h"

#include <cstdio>
#include <optional>

#include <c10/util/Exception.h>

#include "NPUException.h"
#include "MemoryHistory.h"
#include "NPUFunctions.h"
#include "NPUStream.h"
#include "Profiler.h"
#include "npu/caching_allocator.h"

namespace torch_npu {
namespace {

namespace alloc = npu::alloc;
constexpr c10::DeviceType kNPU = c10::DeviceType::PrivateUse1;

alloc::CachingAllocator& caching() { return alloc::CachingAllocator::instance(); }

void reportToProfiler(void* ptr, int64_t delta, int device);

void freeBlock(void* ptr) {
  // A child forked from an initialised parent inherits tensors it cannot free: leak them.
  if (ptr == nullptr || isInBadFork()) return;
  try {
    // Profilers get the free too (its size is looked up only while one listens).
    const bool report = profiler::recordsMemory() || c10::memoryProfilingEnabled();
    int device = -1;
    size_t size = 0;
    if (report) caching().findAllocation(ptr, &device, nullptr, &size);
    if (C10_UNLIKELY(memory_history::recording())) memory_history::recordFree(ptr);
    caching().free(ptr);
    if (report && device >= 0) reportToProfiler(ptr, -static_cast<int64_t>(size), device);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "torch_npu: freeing NPU memory %p failed: %s\n", ptr, e.what());
  }
}

void copyStats(const alloc::Stat& from, c10::CachingAllocator::Stat& to) {
  to.current = from.current;
  to.peak = from.peak;
  to.allocated = from.allocated;
  to.freed = from.freed;
}

void copyStatArray(const alloc::StatArray& from, c10::CachingAllocator::StatArray& to) {
  for (int i = 0; i < alloc::kNumStatTypes; ++i) copyStats(from[i], to[i]);
}

c10::CachingDeviceAllocator::DeviceStats toC10(const alloc::DeviceStats& s) {
  c10::CachingDeviceAllocator::DeviceStats out;
  copyStatArray(s.allocation, out.allocation);
  copyStatArray(s.segment, out.segment);
  copyStatArray(s.active, out.active);
  copyStatArray(s.inactive_split, out.inactive_split);
  copyStatArray(s.allocated_bytes, out.allocated_bytes);
  copyStatArray(s.reserved_bytes, out.reserved_bytes);
  copyStatArray(s.active_bytes, out.active_bytes);
  copyStatArray(s.inactive_split_bytes, out.inactive_split_bytes);
  copyStatArray(s.requested_bytes, out.requested_bytes);
  out.num_alloc_retries = s.num_alloc_retries;
  out.num_ooms = s.num_ooms;
  copyStats(s.oversize_allocations, out.oversize_allocations);
  copyStats(s.oversize_segments, out.oversize_segments);
  out.num_sync_all_streams = s.num_sync_all_streams;
  out.num_device_alloc = s.num_device_alloc;
  out.num_device_free = s.num_device_free;
  out.max_split_size = s.max_split_size;
  return out;
}

void reportToProfiler(void* ptr, int64_t delta, int device) {
  if (profiler::recordsMemory()) profiler::recordMemoryEvent(ptr, delta, device);
  if (!c10::memoryProfilingEnabled()) return;
  const alloc::DeviceStats stats = caching().getStats(device);
  c10::reportMemoryUsageToProfiler(
      ptr, delta, static_cast<size_t>(stats.allocated_bytes[alloc::kAggregate].current),
      static_cast<size_t>(stats.reserved_bytes[alloc::kAggregate].current),
      c10::Device(kNPU, static_cast<c10::DeviceIndex>(device)));
}

class NPUDeviceAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    lazyInit();
    const c10::DeviceIndex device = currentDevice();
    const npuStream_t stream = currentStreamHandle(device);
    void* ptr = nullptr;
    std::optional<memory_history::AllocationScope> history_scope;
    if (C10_UNLIKELY(memory_history::recording())) history_scope.emplace();
    try {
      ptr = caching().allocate(nbytes, device, stream);
    } catch (const alloc::OutOfMemoryError& e) {
      TORCH_CHECK_WITH(OutOfMemoryError, false, e.what());
    } catch (const alloc::AllocatorError& e) {
      TORCH_CHECK(false, e.what());
    }
    if (ptr) reportToProfiler(ptr, static_cast<int64_t>(nbytes), device);
    if (C10_UNLIKELY(memory_history::recording())) memory_history::recordAlloc(ptr, device, stream);
    return {ptr, ptr, &freeBlock, c10::Device(kNPU, device)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &freeBlock; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    NPU_CHECK(npuMemcpy(dest, src, count, npuMemcpyDeviceToDevice));
  }

  bool initialized() override { return isInitialized(); }

  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {
    if (!isInitialized()) return;
    caching().emptyCache();
  }

  void recordStream(const c10::DataPtr& data_ptr, c10::Stream stream) override {
    torch_npu::recordDataPtrOnStream(data_ptr, stream);
  }

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    return toC10(caching().getStats(checkedDeviceIndex(device)));
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    caching().resetAccumulatedStats(checkedDeviceIndex(device));
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    caching().resetPeakStats(checkedDeviceIndex(device));
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    lazyInit();
    DeviceSwitch on_device(checkedDeviceIndex(device));
    size_t free_bytes = 0, total_bytes = 0;
    NPU_CHECK(npuMemGetInfo(&free_bytes, &total_bytes));
    return {free_bytes, total_bytes};
  }
};

// Never destroyed: a global object would be destructed at exit while threads PyTorch does not
// join (the autograd engine's device threads, our stream workers) may still reach it, and a
// call through a destructed object's vtable is "pure virtual method called" + std::terminate.
NPUDeviceAllocator* const g_device_allocator = new NPUDeviceAllocator();
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, g_device_allocator)

}  // namespace

c10::DeviceAllocator* getNPUDeviceAllocator() { return g_device_allocator; }

void recordDataPtrOnStream(const c10::DataPtr& data_ptr, c10::Stream stream) {
  if (data_ptr.get_deleter() != &freeBlock || data_ptr.get() == nullptr) return;
  try {
    caching().recordStream(data_ptr.get(), NPUStream(stream).handle());
  } catch (const alloc::AllocatorError& e) {
    TORCH_CHECK(false, e.what());
  }
}

void resizeStorageBytes(c10::StorageImpl* storage, size_t new_bytes) {
  TORCH_CHECK(storage->resizable(), "Trying to resize storage that is not resizable");
  const size_t old_bytes = storage->nbytes();
  if (new_bytes == old_bytes) return;
  c10::Allocator* allocator = storage->allocator();
  TORCH_CHECK(allocator != nullptr, "Trying to resize an npu storage without an allocator");
  const c10::DeviceIndex device = storage->device().index();
  DeviceSwitch on_device(device);
  c10::DataPtr fresh = allocator->allocate(new_bytes);
  const size_t keep = std::min(old_bytes, new_bytes);
  if (keep > 0 && storage->data() != nullptr) {
    // In stream order: the copy sees every write queued before it on the current stream.
    NPU_CHECK(npuMemcpyAsync(fresh.get(), storage->data(), keep, npuMemcpyDeviceToDevice,
                             getCurrentNPUStream(device).handle()));
  }
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(new_bytes);
}

}  // namespace torch_npu
