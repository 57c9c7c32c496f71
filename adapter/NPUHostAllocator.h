// Pinned host memory (npuMallocHost) for pin_memory(), is_pinned(), torch.empty(pin_memory=True)
// and DataLoader(pin_memory=True). Registered as the PrivateUse1 host allocator.
#pragma once

#include <ATen/core/CachingHostAllocator.h>

namespace torch_npu {

at::HostAllocator* getNPUHostAllocator();
bool isPinnedPtr(const void* ptr) noexcept;

}  // namespace torch_npu
