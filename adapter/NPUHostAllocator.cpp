// A small cache over npuMallocHost.
//
// How it works:
//  - Requests are rounded up to a power of two (at least 512 bytes); a freed block goes to the
//    free list of its size and is handed out again for the next request of that size.
//  - Copies that read or write pinned memory asynchronously keep the tensor's storage alive until
//    they ran (see ops/Copy.cpp), so a block is only freed, and reused, when no queued copy
//    touches it; record_event has nothing left to do.
//  - empty_cache returns every free block to the runtime.
#include "NPUHostAllocator.h"

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <c10/util/Exception.h>
#include <c10/util/llvmMathExtras.h>
#include <ATen/EmptyTensor.h>

#include "NPUException.h"
#include "npu/runtime.h"

namespace torch_npu {
namespace {

constexpr size_t kMinBlock = 512;

class NPUHostAllocator final : public at::HostAllocator {
 public:
  at::DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return {nullptr, nullptr, &freeHostBlock, c10::DeviceType::CPU};
    const size_t size = std::max(kMinBlock, c10::llvm::PowerOf2Ceil(nbytes));
    void* ptr = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& free_list = free_[size];
      if (!free_list.empty()) {
        ptr = free_list.back();
        free_list.pop_back();
      }
    }
    if (ptr == nullptr) {
      const auto start = std::chrono::steady_clock::now();
      NPU_CHECK(npuMallocHost(&ptr, size));
      const int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::steady_clock::now() - start).count();
      std::lock_guard<std::mutex> lock(mutex_);
      sizes_[ptr] = size;
      stats_.allocations.increase(1);
      stats_.allocated_bytes.increase(size);
      stats_.num_host_alloc += 1;
      stats_.host_alloc_time.increase(us);
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.active_requests.increase(1);
      stats_.active_bytes.increase(size);
    }
    return {ptr, ptr, &freeHostBlock, c10::DeviceType::CPU};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &freeHostBlock; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  bool record_event(void* /*ptr*/, void* /*ctx*/, c10::Stream /*stream*/) override {
    return true;
  }

  void empty_cache() override {
    std::vector<void*> release;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& [size, list] : free_) {
        for (void* ptr : list) {
          release.push_back(ptr);
          sizes_.erase(ptr);
          stats_.allocations.decrease(1);
          stats_.allocated_bytes.decrease(size);
          stats_.num_host_free += 1;
        }
        list.clear();
      }
    }
    for (void* ptr : release) {
      const auto start = std::chrono::steady_clock::now();
      (void)npuFreeHost(ptr);
      const int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::steady_clock::now() - start).count();
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.host_free_time.increase(us);
    }
  }

  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void reset_accumulated_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto* stat : {&stats_.active_requests, &stats_.active_bytes, &stats_.allocations,
                       &stats_.allocated_bytes}) {
      stat->reset_accumulated();
    }
    stats_.num_host_alloc = 0;
    stats_.num_host_free = 0;
    stats_.host_alloc_time.reset_accumulated();
    stats_.host_free_time.reset_accumulated();
  }

  void reset_peak_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto* stat : {&stats_.active_requests, &stats_.active_bytes, &stats_.allocations,
                       &stats_.allocated_bytes}) {
      stat->reset_peak();
    }
    stats_.host_alloc_time.reset_peak();
    stats_.host_free_time.reset_peak();
  }

  void release(void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = sizes_.find(ptr);
    TORCH_INTERNAL_ASSERT(it != sizes_.end(), "bug: freeing pinned block ", ptr,
                          " that the host allocator does not own");
    free_[it->second].push_back(ptr);
    stats_.active_requests.decrease(1);
    stats_.active_bytes.decrease(it->second);
  }

 private:
  static void freeHostBlock(void* ptr);

  std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;  // size -> cached free blocks
  std::unordered_map<void*, size_t> sizes_;     // every block we own -> its size
  at::HostStats stats_;
};

// Never destroyed: pinned tensors may be freed by other static destructors at exit.
NPUHostAllocator* const g_host_allocator = new NPUHostAllocator();

void NPUHostAllocator::freeHostBlock(void* ptr) {
  if (ptr) g_host_allocator->release(ptr);
}

REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, g_host_allocator)

}  // namespace

at::HostAllocator* getNPUHostAllocator() { return g_host_allocator; }

namespace {

// torch_npu.empty_with_swapped_memory's memory: on a card, host pages the device maps. Here
// every device page already is host memory, so it is a runtime allocation of its own (npuMalloc,
// which kernels accept; npuMallocHost pages they refuse as not device memory), outside the
// caching allocator: it counts in neither memory_allocated nor memory_reserved.
void freeSwapped(void* ptr) {
  if (ptr) (void)npuFree(ptr);
}

}  // namespace

at::Tensor emptyWithSwappedMemory(at::IntArrayRef size, at::ScalarType dtype,
                                  c10::DeviceIndex device) {
  struct SwappedAllocator final : c10::Allocator {
    c10::DeviceIndex device = 0;
    at::DataPtr allocate(size_t nbytes) override {
      void* ptr = nullptr;
      if (nbytes > 0) {
        int current = 0;
        NPU_CHECK(npuGetDevice(&current));
        NPU_CHECK(npuSetDevice(device));
        const npuError_t err = npuMalloc(&ptr, nbytes);
        NPU_CHECK(npuSetDevice(current));
        NPU_CHECK(err);
      }
      return {ptr, ptr, &freeSwapped, c10::Device(c10::DeviceType::PrivateUse1, device)};
    }
    c10::DeleterFnPtr raw_deleter() const override { return &freeSwapped; }
    void copy_data(void* dest, const void* src, std::size_t count) const override {
      std::memcpy(dest, src, count);
    }
  };
  SwappedAllocator allocator;  // empty_generic allocates once, here; the deleter is static
  allocator.device = device;
  return at::detail::empty_generic(size, &allocator,
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype,
                                   std::nullopt);
}

bool isPinnedPtr(const void* ptr) noexcept {
  if (ptr == nullptr) return false;
  npuPointerAttributes attributes{};
  if (npuPointerGetAttributes(&attributes, ptr) != npuSuccess) return false;
  return attributes.type == npuMemoryTypeHost;
}

}  // namespace torch_npu
