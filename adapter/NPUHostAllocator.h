// Pinned host memory (npuMallocHost) for pin_memory(), is_pinned(), torch.empty(pin_memory=True)
// and DataLoader(pin_memory=True). Registered as the PrivateUse1 host allocator.
#pragma once

#include <ATen/core/CachingHostAllocator.h>

namespace torch_npu {

at::HostAllocator* getNPUHostAllocator();
bool isPinnedPtr(const void* ptr) noexcept;
// An npu tensor on memory outside the device caching allocator
// (torch_npu.empty_with_swapped_memory).
at::Tensor emptyWithSwappedMemory(at::IntArrayRef size, at::ScalarType dtype,
                                  c10::DeviceIndex device);

}  // namespace torch_npu
