// The npu device allocator as PyTorch sees it: a c10::DeviceAllocator over the caching
// allocator of allocator/ (npu::alloc::CachingAllocator), registered for PrivateUse1.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Storage.h>
#include <c10/core/Stream.h>

namespace torch_npu {

c10::DeviceAllocator* getNPUDeviceAllocator();

// Marks the block behind `data_ptr` as used by `stream` (no-op for memory the caching allocator
// does not own, such as from_blob tensors).
void recordDataPtrOnStream(const c10::DataPtr& data_ptr, c10::Stream stream);

// Grows or shrinks `storage` to `new_bytes` (UntypedStorage.resize_ and Tensor.resize_): the
// old contents are copied, in stream order, into the new block.
void resizeStorageBytes(c10::StorageImpl* storage, size_t new_bytes);

}  // namespace torch_npu
