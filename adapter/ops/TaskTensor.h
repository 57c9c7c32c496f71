// How a kernel that runs later, on a stream worker, sees an npu tensor: the device memory is
// host-addressable, so the task wraps it in a CPU tensor (at::from_blob, no copy) and runs
// ATen's own CPU kernel on it.
//
// A TaskTensor records the pointer and the geometry at launch time. It does not keep device
// memory alive: as with CUDA, memory freed on the host is only reused by work queued later on
// the same stream. Host memory (pageable or pinned) that a task reads or writes is kept alive by
// keepAliveUntilDone instead, since it is not ordered by any stream.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>

#include <vector>

#include "NPUStream.h"

namespace torch_npu {

struct TaskTensor {
  void* data = nullptr;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  bool conj = false;
  bool neg = false;

  explicit TaskTensor(const at::Tensor& tensor);
  at::Tensor cpu() const;  // a CPU tensor over the same memory
};

// Holds `storage` until the work queued on `stream` so far has run.
void keepAliveUntilDone(const NPUStream& stream, c10::Storage storage);

// True when `a` and `b` have one memory layout (dtype, sizes, strides of non-trivial dims and
// conj / neg bits) and `a` covers its memory densely, so a byte copy of the span is the copy.
bool sameDenseLayout(const at::Tensor& a, const at::Tensor& b);

}  // namespace torch_npu
