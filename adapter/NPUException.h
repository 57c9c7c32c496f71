// The one check macro of the adapter: every runtime call at the adapter edge goes through it.
//
//   NPU_CHECK(npuSetDevice(index));
//
// A failing call throws c10::AcceleratorError (Python: torch.AcceleratorError, a RuntimeError)
// with the text "NPU error: <npuGetErrorName>: <npuGetLastErrorMessage()>"; an exhausted memory
// error throws c10::OutOfMemoryError (Python: torch.OutOfMemoryError) instead.
#pragma once

#include <c10/macros/Macros.h>

#include "npu/runtime.h"

namespace torch_npu::detail {
[[noreturn]] void throwNpuError(npuError_t error, const char* expr, const char* file, int line);
}  // namespace torch_npu::detail

#define NPU_CHECK(expr)                                                               \
  do {                                                                                \
    const npuError_t npu_check_error_ = (expr);                                       \
    if (C10_UNLIKELY(npu_check_error_ != npuSuccess)) {                               \
      ::torch_npu::detail::throwNpuError(npu_check_error_, #expr, __FILE__, __LINE__); \
    }                                                                                 \
  } while (0)
