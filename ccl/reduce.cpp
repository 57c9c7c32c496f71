// How it works: elements are processed in blocks of kBlock. A block of in[0] is loaded into a
// stack array of the accumulation type, every further input is folded into it, and the block
// is finished (AVG's division, rounding of 16-bit floats) and stored. The arrays stay in L1 and
// the inner loops are plain enough for the compiler to vectorise.
#include "reduce.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <type_traits>

namespace npu::ccl {
namespace {

constexpr uint64_t kBlock = 512;

struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
struct Bool {
  uint8_t byte;
};

// Storage type -> accumulation type, with the loads and stores between them.
template <class T>
struct Acc {
  using type = T;
  static void load(const T* src, T* dst, uint64_t n) { std::memcpy(dst, src, n * sizeof(T)); }
  static void store(const T* src, T* dst, uint64_t n) { std::memcpy(dst, src, n * sizeof(T)); }
};

template <>
struct Acc<Half> {
  using type = float;
  static void load(const Half* src, float* dst, uint64_t n) {
    const auto* s = reinterpret_cast<const uint16_t*>(src);
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(dst + i,
                       _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
    }
    for (; i < n; ++i) dst[i] = _cvtsh_ss(s[i]);
  }
  static void store(const float* src, Half* dst, uint64_t n) {
    auto* d = reinterpret_cast<uint16_t*>(dst);
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                       _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; ++i) d[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
  }
};

template <>
struct Acc<BFloat16> {
  using type = float;
  static void load(const BFloat16* src, float* dst, uint64_t n) {
    const auto* s = reinterpret_cast<const uint16_t*>(src);
    for (uint64_t i = 0; i < n; ++i) dst[i] = std::bit_cast<float>(uint32_t(s[i]) << 16);
  }
  static void store(const float* src, BFloat16* dst, uint64_t n) {
    auto* d = reinterpret_cast<uint16_t*>(dst);
    for (uint64_t i = 0; i < n; ++i) {
      const uint32_t u = std::bit_cast<uint32_t>(src[i]);
      const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // nearest, ties to even
      const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
      d[i] = static_cast<uint16_t>(nan ? ((u >> 16) | 0x40u) : rounded);  // keep NaN a NaN
    }
  }
};

template <>
struct Acc<Bool> {
  using type = uint8_t;
  static void load(const Bool* src, uint8_t* dst, uint64_t n) {
    const auto* s = reinterpret_cast<const uint8_t*>(src);
    for (uint64_t i = 0; i < n; ++i) dst[i] = s[i] != 0;
  }
  static void store(const uint8_t* src, Bool* dst, uint64_t n) {
    std::memcpy(dst, src, n);
  }
};

// The binary operations on the accumulation type A. Integer sum and product run in uint64_t
// so that overflow wraps without undefined behaviour.
template <class A, HcclReduceOp Op, bool IsBool>
inline A combine(A a, A b) {
  if constexpr (IsBool) {
    if constexpr (Op == HCCL_REDUCE_SUM || Op == HCCL_REDUCE_MAX) return A(a | b);
    else return A(a & b);
  } else if constexpr (Op == HCCL_REDUCE_SUM || Op == HCCL_REDUCE_AVG) {
    if constexpr (std::is_integral_v<A>) return A(uint64_t(a) + uint64_t(b));
    else return a + b;
  } else if constexpr (Op == HCCL_REDUCE_PROD) {
    if constexpr (std::is_integral_v<A>) return A(uint64_t(a) * uint64_t(b));
    else return a * b;
  } else if constexpr (Op == HCCL_REDUCE_MAX) {
    if constexpr (std::is_floating_point_v<A>) return (a > b || std::isnan(a)) ? a : b;
    else return a > b ? a : b;
  } else {
    if constexpr (std::is_floating_point_v<A>) return (a < b || std::isnan(a)) ? a : b;
    else return a < b ? a : b;
  }
}

// reduceInto's arguments.
struct Reduction {
  void* out;
  const void* const* in;
  int n;
  uint64_t count;
  uint32_t divisor;
  void* copy;
  bool streamCopy;
};

template <class T, HcclReduceOp Op>
void reduceTyped(const Reduction& r) {
  const auto [out, in, n, count, divisor, copy, streamCopy] = r;
  using A = typename Acc<T>::type;
  constexpr bool kBool = std::is_same_v<T, Bool>;
  alignas(64) A acc[kBlock];
  alignas(64) A next[kBlock];
  for (uint64_t base = 0; base < count; base += kBlock) {
    const uint64_t m = std::min(kBlock, count - base);
    Acc<T>::load(static_cast<const T*>(in[0]) + base, acc, m);
    for (int j = 1; j < n; ++j) {
      Acc<T>::load(static_cast<const T*>(in[j]) + base, next, m);
      for (uint64_t i = 0; i < m; ++i) acc[i] = combine<A, Op, kBool>(acc[i], next[i]);
    }
    if constexpr (Op == HCCL_REDUCE_AVG && !kBool) {
      const A d = static_cast<A>(divisor);
      for (uint64_t i = 0; i < m; ++i) acc[i] = static_cast<A>(acc[i] / d);
    }
    T* const stored = static_cast<T*>(out) + base;
    Acc<T>::store(acc, stored, m);
    if (copy && streamCopy) {
      copyStreaming(static_cast<T*>(copy) + base, stored, m * sizeof(T));
    } else if (copy) {
      Acc<T>::store(acc, static_cast<T*>(copy) + base, m);
    }
  }
}

template <class T>
void reduceOp(const Reduction& r, HcclReduceOp op) {
  switch (op) {
    case HCCL_REDUCE_SUM: return reduceTyped<T, HCCL_REDUCE_SUM>(r);
    case HCCL_REDUCE_PROD: return reduceTyped<T, HCCL_REDUCE_PROD>(r);
    case HCCL_REDUCE_MAX: return reduceTyped<T, HCCL_REDUCE_MAX>(r);
    case HCCL_REDUCE_MIN: return reduceTyped<T, HCCL_REDUCE_MIN>(r);
    case HCCL_REDUCE_AVG: return reduceTyped<T, HCCL_REDUCE_AVG>(r);
    default: return;
  }
}

template <class T>
void convertBlocks(const void* in, float* out, uint64_t count) {
  for (uint64_t b = 0; b < count; b += kBlock) {
    Acc<T>::load(static_cast<const T*>(in) + b, out + b, std::min(kBlock, count - b));
  }
}

template <class T>
void storeBlocks(const float* in, void* out, uint64_t count, uint32_t divisor) {
  alignas(64) float tmp[kBlock];
  for (uint64_t b = 0; b < count; b += kBlock) {
    const uint64_t m = std::min(kBlock, count - b);
    for (uint64_t i = 0; i < m; ++i) tmp[i] = divisor ? in[b + i] / float(divisor) : in[b + i];
    Acc<T>::store(tmp, static_cast<T*>(out) + b, m);
  }
}

}  // namespace

void toFloat32(const void* in, HcclDataType dtype, float* out, uint64_t count) {
  if (dtype == HCCL_DATA_TYPE_FP16) return convertBlocks<Half>(in, out, count);
  return convertBlocks<BFloat16>(in, out, count);
}

void fromFloat32(const float* in, void* out, HcclDataType dtype, uint64_t count,
                 uint32_t avgDivisor) {
  if (dtype == HCCL_DATA_TYPE_FP16) return storeBlocks<Half>(in, out, count, avgDivisor);
  return storeBlocks<BFloat16>(in, out, count, avgDivisor);
}

bool reduceSupported(HcclDataType dtype, HcclReduceOp op) {
  if (op < HCCL_REDUCE_SUM || op >= HCCL_REDUCE_RESERVED) return false;
  return !(dtype == HCCL_DATA_TYPE_BOOL && op == HCCL_REDUCE_AVG);
}

void reduceInto(void* out, const void* const* in, int n, uint64_t count, HcclDataType dtype,
                HcclReduceOp op, uint32_t avgDivisor, void* copy, bool streamCopy) {
  const Reduction r{out, in, n, count, avgDivisor, copy, streamCopy};
  switch (dtype) {
    case HCCL_DATA_TYPE_INT8: return reduceOp<int8_t>(r, op);
    case HCCL_DATA_TYPE_INT16: return reduceOp<int16_t>(r, op);
    case HCCL_DATA_TYPE_INT32: return reduceOp<int32_t>(r, op);
    case HCCL_DATA_TYPE_INT64: return reduceOp<int64_t>(r, op);
    case HCCL_DATA_TYPE_UINT8: return reduceOp<uint8_t>(r, op);
    case HCCL_DATA_TYPE_UINT16: return reduceOp<uint16_t>(r, op);
    case HCCL_DATA_TYPE_UINT32: return reduceOp<uint32_t>(r, op);
    case HCCL_DATA_TYPE_UINT64: return reduceOp<uint64_t>(r, op);
    case HCCL_DATA_TYPE_FP16: return reduceOp<Half>(r, op);
    case HCCL_DATA_TYPE_BFP16: return reduceOp<BFloat16>(r, op);
    case HCCL_DATA_TYPE_FP32: return reduceOp<float>(r, op);
    case HCCL_DATA_TYPE_FP64: return reduceOp<double>(r, op);
    case HCCL_DATA_TYPE_BOOL: return reduceOp<Bool>(r, op);
    default: return;
  }
}

void copyStreaming(void* dst, const void* src, uint64_t bytes) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  // Up to the destination's first 64-byte line boundary with ordinary stores.
  const uint64_t head = std::min<uint64_t>(bytes, (64 - reinterpret_cast<uintptr_t>(d) % 64) % 64);
  std::memcpy(d, s, head);
  uint64_t i = head;
  // Whole lines: four 16-byte streaming stores each (SSE2, on every x86-64 CPU; wider ones are
  // no faster, as the line is written to memory as one burst either way).
  for (; i + 64 <= bytes; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  std::memcpy(d + i, s + i, bytes - i);
  _mm_sfence();  // streaming stores are weakly ordered: publish them before anyone is told
}

}  // namespace npu::ccl
