// Descriptors shared by every kernel: dtypes, strided tensor views, scalars.
// See npu/kernels.h for the conventions (broadcasting, reductions, scalars).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace npu::kernels {

// Storage dtypes. Bool is stored as one byte holding 0 or 1 (as in PyTorch).
enum class DType : int8_t {
  Float32,
  Float16,
  BFloat16,
  Float64,
  Int8,
  Int16,
  Int32,
  Int64,
  UInt8,
  Bool,
};
constexpr int kNumDTypes = 10;

size_t dtype_size(DType t);
const char* dtype_name(DType t);
inline bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16 ||
         t == DType::Float64;
}
inline bool is_integral(DType t) { return !is_floating(t) && t != DType::Bool; }

constexpr int kMaxDims = 8;

// A strided view of memory. Sizes and strides are in elements; a stride may be 0 (a broadcast
// dimension) but never negative. ndim == 0 is a scalar (one element). Descriptors are plain
// values: kernels never keep them or the memory they point to after returning.
struct TensorDesc {
  void* data = nullptr;
  DType dtype = DType::Float32;
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};

  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= sizes[d];
    return n;
  }
  // Row-major contiguous (size-1 dimensions may have any stride).
  bool is_contiguous() const {
    int64_t expected = 1;
    for (int d = ndim - 1; d >= 0; --d) {
      if (sizes[d] != 1 && strides[d] != expected) return false;
      expected *= sizes[d];
    }
    return true;
  }

  // Builders. `strides` empty means row-major contiguous.
  static TensorDesc make(const void* data, DType dtype, const int64_t* sizes, int ndim,
                         const int64_t* strides = nullptr);
  static TensorDesc make(const void* data, DType dtype, std::initializer_list<int64_t> sizes,
                         std::initializer_list<int64_t> strides = {});
  // A scalar broadcast to `shape` (every stride 0): how to pass a Python number as an operand.
  static TensorDesc broadcast_scalar(const void* value, DType dtype, const TensorDesc& shape);
};

// A scalar parameter (alpha, threshold, clamp bounds, ...). Integer kernels read `i`, floating
// kernels read `f`; both constructors fill both, so callers rarely care.
struct Scalar {
  double f = 0;
  int64_t i = 0;
  Scalar() = default;
  Scalar(double v) : f(v), i(static_cast<int64_t>(v)) {}  // NOLINT: implicit on purpose
  Scalar(float v) : Scalar(static_cast<double>(v)) {}     // NOLINT
  Scalar(int64_t v) : f(static_cast<double>(v)), i(v) {}  // NOLINT
  Scalar(int v) : Scalar(static_cast<int64_t>(v)) {}      // NOLINT
  Scalar(bool v) : Scalar(static_cast<int64_t>(v)) {}     // NOLINT
};

}  // namespace npu::kernels
