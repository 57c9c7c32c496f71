// Host tensors for the kernel tests: any dtype, any layout, read and written as doubles or
// int64 through conversions written here (independent of the library's own conversions).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "npu/kernels.h"

namespace ktest {

using npu::kernels::DType;
using npu::kernels::TensorDesc;

inline uint16_t float_to_half_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t sign = (x >> 16) & 0x8000;
  if (std::isnan(f)) return sign | 0x7e00;
  float a = std::fabs(f);
  if (a >= 65520.0f) return sign | 0x7c00;
  if (a < 6.103515625e-05f) return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  int e;
  std::frexp(a, &e);
  float s = std::nearbyint(std::ldexp(a, 11 - e));
  int exp = e - 1;
  if (s == 2048.0f) s = 1024.0f, ++exp;
  if (exp > 15) return sign | 0x7c00;
  return sign | static_cast<uint16_t>(((exp + 15) << 10) | (static_cast<int>(s) - 1024));
}
inline float half_bits_to_float(uint16_t h) {
  int sign = (h >> 15) ? -1 : 1;
  int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0x1f) return man ? NAN : sign * INFINITY;
  if (exp == 0) return sign * std::ldexp(float(man), -24);
  return sign * std::ldexp(float(man + 1024), exp - 25);
}
inline uint16_t float_to_bf16_bits(float f) {
  if (std::isnan(f)) return 0x7fc0;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_bits_to_float(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline size_t elem_size(DType t) { return npu::kernels::dtype_size(t); }

// Rounds a double to what dtype `t` can hold (for generating exactly representable inputs).
inline double round_to(DType t, double v) {
  switch (t) {
    case DType::Float32: return static_cast<float>(v);
    case DType::Float16: return half_bits_to_float(float_to_half_bits(static_cast<float>(v)));
    case DType::BFloat16: return bf16_bits_to_float(float_to_bf16_bits(static_cast<float>(v)));
    default: return v;
  }
}

// What an integer compute type makes of an int64 value (two's complement wrap; bool: != 0).
inline int64_t wrap_to(DType t, int64_t v) {
  switch (t) {
    case DType::Int8: return static_cast<int8_t>(v);
    case DType::Int16: return static_cast<int16_t>(v);
    case DType::Int32: return static_cast<int32_t>(v);
    case DType::UInt8: return static_cast<uint8_t>(v);
    case DType::Bool: return v != 0;
    default: return v;
  }
}

enum class Layout { Contiguous, Transposed };

struct HostTensor {
  DType dtype = DType::Float32;
  std::vector<int64_t> sizes, strides;
  std::vector<unsigned char> buf;

  HostTensor() = default;
  // Transposed: the memory order of dimensions is reversed (a column-major tensor).
  HostTensor(DType t, std::vector<int64_t> s, Layout layout = Layout::Contiguous)
      : dtype(t), sizes(std::move(s)), strides(sizes.size()) {
    int64_t n = 1;
    int nd = static_cast<int>(sizes.size());
    for (int i = 0; i < nd; ++i) {
      int d = layout == Layout::Contiguous ? nd - 1 - i : i;
      strides[d] = n;
      n *= std::max<int64_t>(sizes[d], 1);
    }
    buf.assign(static_cast<size_t>(std::max<int64_t>(n, 1)) * elem_size(t), 0);
    if (numel() == 0) buf.assign(elem_size(t), 0);
  }

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
  int ndim() const { return static_cast<int>(sizes.size()); }

  // A view of this tensor with dimension `dim` (of size 1) broadcast to `size` (stride 0).
  HostTensor expanded(int dim, int64_t size) const {
    HostTensor v = *this;
    v.sizes[dim] = size;
    v.strides[dim] = 0;
    return v;
  }

  TensorDesc desc() const {
    return TensorDesc::make(buf.data(), dtype, sizes.data(), ndim(), strides.data());
  }

  // Offset in elements of logical (row-major) element `linear`.
  int64_t offset(int64_t linear) const {
    int64_t off = 0;
    for (int d = ndim() - 1; d >= 0; --d) {
      off += (linear % sizes[d]) * strides[d];
      linear /= sizes[d];
    }
    return off;
  }

  template <class T>
  T* at(int64_t linear) {
    return reinterpret_cast<T*>(buf.data()) + offset(linear);
  }
  template <class T>
  const T* at(int64_t linear) const {
    return reinterpret_cast<const T*>(buf.data()) + offset(linear);
  }

  double get(int64_t i) const {
    switch (dtype) {
      case DType::Float32: return *at<float>(i);
      case DType::Float64: return *at<double>(i);
      case DType::Float16: return half_bits_to_float(*at<uint16_t>(i));
      case DType::BFloat16: return bf16_bits_to_float(*at<uint16_t>(i));
      case DType::Int8: return *at<int8_t>(i);
      case DType::Int16: return *at<int16_t>(i);
      case DType::Int32: return *at<int32_t>(i);
      case DType::Int64: return static_cast<double>(*at<int64_t>(i));
      case DType::UInt8: return *at<uint8_t>(i);
      case DType::Bool: return *at<uint8_t>(i) != 0;
    }
    return 0;
  }
  int64_t get_int(int64_t i) const {
    if (dtype == DType::Int64) return *at<int64_t>(i);
    return static_cast<int64_t>(get(i));
  }
  // Stores with PyTorch's conversion rules (float -> int truncates, wrapping via int64).
  void set(int64_t i, double v) {
    switch (dtype) {
      case DType::Float32: *at<float>(i) = static_cast<float>(v); return;
      case DType::Float64: *at<double>(i) = v; return;
      case DType::Float16: *at<uint16_t>(i) = float_to_half_bits(static_cast<float>(v)); return;
      case DType::BFloat16: *at<uint16_t>(i) = float_to_bf16_bits(static_cast<float>(v)); return;
      case DType::Bool: *at<uint8_t>(i) = v != 0; return;
      default: set_int(i, static_cast<int64_t>(v)); return;
    }
  }
  void set_int(int64_t i, int64_t v) {
    switch (dtype) {
      case DType::Int8: *at<int8_t>(i) = static_cast<int8_t>(v); return;
      case DType::Int16: *at<int16_t>(i) = static_cast<int16_t>(v); return;
      case DType::Int32: *at<int32_t>(i) = static_cast<int32_t>(v); return;
      case DType::Int64: *at<int64_t>(i) = v; return;
      case DType::UInt8: *at<uint8_t>(i) = static_cast<uint8_t>(v); return;
      case DType::Bool: *at<uint8_t>(i) = v != 0; return;
      default: set(i, static_cast<double>(v)); return;
    }
  }
};

inline std::mt19937_64& rng() {
  static thread_local std::mt19937_64 gen(12345);
  return gen;
}

// Fills with uniform values in [lo, hi], rounded to the dtype (integers: uniform integers).
inline void fill_uniform(HostTensor& t, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (npu::kernels::is_floating(t.dtype)) {
      t.set(i, u(rng()));
    } else if (t.dtype == DType::Bool) {
      t.set_int(i, rng()() & 1);
    } else {
      std::uniform_int_distribution<int64_t> ui(static_cast<int64_t>(std::ceil(lo)),
                                                static_cast<int64_t>(std::floor(hi)));
      t.set_int(i, ui(rng()));
    }
  }
}

// Relative tolerance one would accept for a result rounded to `t` after float math.
inline double default_rtol(DType t) {
  switch (t) {
    case DType::Float32: return 1e-5;
    case DType::Float64: return 1e-12;
    case DType::Float16: return 2e-3;
    case DType::BFloat16: return 1.6e-2;
    default: return 0;
  }
}

// Compares every element; NaN equals NaN, infinities must match exactly. Reports the first
// few mismatches.
inline ::testing::AssertionResult all_close(const HostTensor& actual, const HostTensor& expected,
                                            double rtol, double atol) {
  if (actual.numel() != expected.numel()) {
    return ::testing::AssertionFailure() << "numel " << actual.numel() << " vs "
                                         << expected.numel();
  }
  int bad = 0;
  std::string msg;
  for (int64_t i = 0; i < actual.numel(); ++i) {
    double a = actual.get(i), e = expected.get(i);
    bool ok;
    if (std::isnan(e)) ok = std::isnan(a);
    else if (std::isinf(e)) ok = a == e;
    else if (actual.dtype == DType::Int64 && expected.dtype == DType::Int64)
      ok = actual.get_int(i) == expected.get_int(i);
    else ok = std::fabs(a - e) <= atol + rtol * std::fabs(e);
    if (!ok) {
      if (bad < 5) {
        msg += "\n  [" + std::to_string(i) + "] got " + std::to_string(a) + " want " +
               std::to_string(e);
      }
      ++bad;
    }
  }
  if (bad) {
    return ::testing::AssertionFailure() << bad << " of " << actual.numel()
                                         << " elements differ:" << msg;
  }
  return ::testing::AssertionSuccess();
}

inline std::string dtype_str(DType t) { return npu::kernels::dtype_name(t); }

}  // namespace ktest
