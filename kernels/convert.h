// Array conversion between any two dtypes: the inner loop of copy() and of every kernel that
// loads operands of a dtype other than its compute type.
#pragma once

#include <cstdint>

#include "npu/kernels/tensor_desc.h"

namespace npu::kernels::detail {

// Converts n elements; strides are in elements of the respective dtype.
using ConvertFn = void (*)(const void* src, int64_t src_stride, void* dst, int64_t dst_stride,
                           int64_t n);

ConvertFn convert_fn(DType from, DType to);

}  // namespace npu::kernels::detail
