// Small helpers shared by the neural-network kernel families (loss, batch_norm, pooling,
// conv, sort): dtype dispatch for floating kernels, per-channel vectors, strided offsets.
#pragma once

#include <cstdint>
#include <vector>

#include "dtype_traits.h"
#include "rows.h"
#include "npu/kernels/tensor_desc.h"

namespace npu::kernels::detail {

// The floating dtypes these families accept: Float32, Float64, and Float16 / BFloat16
// (converted to float32 on load and rounded once on store).
inline bool is_nn_float(DType t) { return is_floating(t); }

// Calls f.template operator()<S, T>() with S the storage type of floating dtype `t` and T its
// compute type (float for the 16-bit floats).
template <class F>
decltype(auto) dispatch_nn_float(DType t, F&& f) {
  switch (t) {
    case DType::Float32: return f.template operator()<float, float>();
    case DType::Float64: return f.template operator()<double, double>();
    case DType::Float16: return f.template operator()<Half, float>();
    case DType::BFloat16: return f.template operator()<BFloat16, float>();
    default: break;
  }
  NPU_KERNEL_ASSERT(false, std::string("floating dtype expected, got ") + dtype_name(t) +
                               " (the caller must check *_supports)");
}

// The C++ compute type for a floating dtype (double for Float64, float otherwise).
template <class F>
decltype(auto) dispatch_compute_float(DType t, F&& f) {
  if (t == DType::Float64) return f.template operator()<double>();
  return f.template operator()<float>();
}

// An optional 1-D vector (weight, bias, running stats: any shape, read in row-major order)
// as n values of T; `absent` everywhere when t is null or has no data.
template <class T>
std::vector<T> load_vector(const TensorDesc* t, int64_t n, T absent) {
  std::vector<T> v(static_cast<size_t>(n), absent);
  if (t && t->data && n > 0) Rows(*t, t->ndim).load(0, v.data());
  return v;
}
// Writes n values of T into t (any shape, row-major order, converted to t's dtype).
template <class T>
void store_vector(const TensorDesc& t, const T* v) {
  if (t.data && t.numel() > 0) Rows(t, t.ndim).store(0, v);
}

inline bool has_data(const TensorDesc* t) { return t && t->data; }

// Byte pointer to the element at element offset `off` of t.
inline char* elem_ptr(const TensorDesc& t, int64_t off) {
  return static_cast<char*>(t.data) + off * static_cast<int64_t>(dtype_size(t.dtype));
}

// Element offset of flat row-major index `i` over dims [first, t.ndim) of t.
inline int64_t flat_offset(const TensorDesc& t, int first, int64_t i) {
  int64_t off = 0;
  for (int d = t.ndim - 1; d >= first; --d) {
    off += (i % t.sizes[d]) * t.strides[d];
    i /= t.sizes[d];
  }
  return off;
}

}  // namespace npu::kernels::detail

namespace npu::kernels::detail {

// One element of t at element offset `off`, read as / written from a double (a per-element
// dtype switch: for the kernels that touch O(samples) elements, not inner loops).
inline double load_as_double(const TensorDesc& t, int64_t off) {
  return dispatch_storage(t.dtype, [&]<class S>() {
    return static_cast<double>(cast_value<compute_t<S>>(static_cast<const S*>(t.data)[off]));
  });
}
inline void store_from_double(const TensorDesc& t, int64_t off, double v) {
  dispatch_storage(t.dtype, [&]<class S>() {
    static_cast<S*>(t.data)[off] = cast_value<S>(static_cast<compute_t<S>>(v));
  });
}

}  // namespace npu::kernels::detail
