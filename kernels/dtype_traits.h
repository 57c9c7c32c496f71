// Storage types of each DType, value conversion with PyTorch's semantics, and the one place
// where a runtime DType becomes a C++ type (dispatch_storage / dispatch_compute).
#pragma once

#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernel_assert.h"
#include "npu/kernels/tensor_desc.h"

namespace npu::kernels::detail {

// 16-bit floats are stored as raw bits; all arithmetic on them happens in float.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

inline float half_to_float(Half h) { return _cvtsh_ss(h.bits); }
inline Half float_to_half(float f) {
  return Half{static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT))};
}
inline float bf16_to_float(BFloat16 h) { return std::bit_cast<float>(uint32_t(h.bits) << 16); }
inline BFloat16 float_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return BFloat16{0x7fc0};
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return BFloat16{static_cast<uint16_t>(u >> 16)};
}

template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// The C++ type math is done in for storage type T.
template <class T>
using compute_t = std::conditional_t<is_half_v<T>, float, T>;

template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::Float32;
  else if constexpr (std::is_same_v<T, Half>) return DType::Float16;
  else if constexpr (std::is_same_v<T, BFloat16>) return DType::BFloat16;
  else if constexpr (std::is_same_v<T, double>) return DType::Float64;
  else if constexpr (std::is_same_v<T, int8_t>) return DType::Int8;
  else if constexpr (std::is_same_v<T, int16_t>) return DType::Int16;
  else if constexpr (std::is_same_v<T, int32_t>) return DType::Int32;
  else if constexpr (std::is_same_v<T, int64_t>) return DType::Int64;
  else if constexpr (std::is_same_v<T, uint8_t>) return DType::UInt8;
  else {
    static_assert(std::is_same_v<T, bool>);
    return DType::Bool;
  }
}

// Converts one value with PyTorch's rules: floats to integers truncate (going through int64 so
// that out-of-range values wrap as they do in PyTorch), anything to bool is (x != 0).
template <class To, class From>
inline To cast_value(From v) {
  if constexpr (std::is_same_v<From, Half>) {
    return cast_value<To>(half_to_float(v));
  } else if constexpr (std::is_same_v<From, BFloat16>) {
    return cast_value<To>(bf16_to_float(v));
  } else if constexpr (std::is_same_v<To, Half>) {
    return float_to_half(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, BFloat16>) {
    return float_to_bf16(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From> &&
                       sizeof(To) < 8) {
    return static_cast<To>(static_cast<int64_t>(v));
  } else {
    return static_cast<To>(v);
  }
}

// Calls f.template operator()<T>() with T the storage type of `t`.
template <class F>
decltype(auto) dispatch_storage(DType t, F&& f) {
  switch (t) {
    case DType::Float32: return f.template operator()<float>();
    case DType::Float16: return f.template operator()<Half>();
    case DType::BFloat16: return f.template operator()<BFloat16>();
    case DType::Float64: return f.template operator()<double>();
    case DType::Int8: return f.template operator()<int8_t>();
    case DType::Int16: return f.template operator()<int16_t>();
    case DType::Int32: return f.template operator()<int32_t>();
    case DType::Int64: return f.template operator()<int64_t>();
    case DType::UInt8: return f.template operator()<uint8_t>();
    case DType::Bool: return f.template operator()<bool>();
  }
  NPU_KERNEL_ASSERT(false, "unknown dtype");
}

// Calls f.template operator()<T>() with T the compute type of `t` (float for 16-bit floats).
template <class F>
decltype(auto) dispatch_compute(DType t, F&& f) {
  switch (t) {
    case DType::Float32:
    case DType::Float16:
    case DType::BFloat16: return f.template operator()<float>();
    case DType::Float64: return f.template operator()<double>();
    case DType::Int8: return f.template operator()<int8_t>();
    case DType::Int16: return f.template operator()<int16_t>();
    case DType::Int32: return f.template operator()<int32_t>();
    case DType::Int64: return f.template operator()<int64_t>();
    case DType::UInt8: return f.template operator()<uint8_t>();
    case DType::Bool: return f.template operator()<bool>();
  }
  NPU_KERNEL_ASSERT(false, "unknown dtype");
}

// Which compute types an op accepts, as a bit set over the eight compute types.
enum TypeMask : unsigned {
  kF32 = 1, kF64 = 2, kI8 = 4, kI16 = 8, kI32 = 16, kI64 = 32, kU8 = 64, kBool = 128,
  kFloating = kF32 | kF64,
  kIntegral = kI8 | kI16 | kI32 | kI64 | kU8,
  kAllButBool = kFloating | kIntegral,
  kAll = kAllButBool | kBool,
  kIntegralAndBool = kIntegral | kBool,
};
template <class T>
constexpr unsigned type_bit() {
  if constexpr (std::is_same_v<T, float>) return kF32;
  else if constexpr (std::is_same_v<T, double>) return kF64;
  else if constexpr (std::is_same_v<T, int8_t>) return kI8;
  else if constexpr (std::is_same_v<T, int16_t>) return kI16;
  else if constexpr (std::is_same_v<T, int32_t>) return kI32;
  else if constexpr (std::is_same_v<T, int64_t>) return kI64;
  else if constexpr (std::is_same_v<T, uint8_t>) return kU8;
  else return kBool;
}

// Reads element i (in elements, may be strided) of raw memory of dtype `t` as a double, or
// writes it: for the few kernels (indices, scalars) where a per-element switch is fine.
inline int64_t load_index(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::Int32: return static_cast<const int32_t*>(p)[i];
    case DType::Int64: return static_cast<const int64_t*>(p)[i];
    case DType::Int16: return static_cast<const int16_t*>(p)[i];
    case DType::Int8: return static_cast<const int8_t*>(p)[i];
    case DType::UInt8: return static_cast<const uint8_t*>(p)[i];
    default: NPU_KERNEL_ASSERT(false, "index tensors must have an integer dtype");
  }
}

template <class T>
inline T scalar_as(Scalar s) {
  if constexpr (std::is_floating_point_v<T>) return static_cast<T>(s.f);
  else if constexpr (std::is_same_v<T, bool>) return s.i != 0 || s.f != 0;
  else return static_cast<T>(s.i);
}

}  // namespace npu::kernels::detail
