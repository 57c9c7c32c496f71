// copy/cast and fill: the table of converters between every pair of dtypes.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "convert.h"
#include "dtype_traits.h"
#include "loops.h"
#include "npu/kernels/elementwise.h"

namespace npu::kernels {
namespace detail {
namespace {

template <class From, class To>
void convert_generic(const void* src_v, int64_t ss, void* dst_v, int64_t ds, int64_t n) {
  const From* src = static_cast<const From*>(src_v);
  To* dst = static_cast<To*>(dst_v);
  if (ss == 1 && ds == 1) {
    if constexpr (std::is_same_v<From, Half> && std::is_same_v<To, float>) {
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
      }
      for (; i < n; ++i) dst[i] = half_to_float(src[i]);
    } else if constexpr (std::is_same_v<From, float> && std::is_same_v<To, Half>) {
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
      }
      for (; i < n; ++i) dst[i] = float_to_half(src[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) dst[i] = cast_value<To>(src[i]);
    }
  } else if (ss == 0) {
    To v = cast_value<To>(src[0]);
    for (int64_t i = 0; i < n; ++i) dst[i * ds] = v;
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i * ds] = cast_value<To>(src[i * ss]);
  }
}

// Bool storage may be read from memory PyTorch wrote; read it as a byte and normalise so a
// stray value other than 0/1 cannot become an invalid C++ bool.
template <class To>
void convert_from_bool(const void* src_v, int64_t ss, void* dst_v, int64_t ds, int64_t n) {
  const uint8_t* src = static_cast<const uint8_t*>(src_v);
  To* dst = static_cast<To*>(dst_v);
  if (ss == 1 && ds == 1) {
    // Unit strides (a where's bool condition comes through here 256 elements at a time, as
    // float): GCC leaves the scalar loop a compare, setne and int -> float conversion per
    // element, which was most of where(bool [32000], -inf, float [1, 32000]): 28 -> 9 us a
    // call, host dispatch included.
    int64_t i = 0;
    if constexpr (std::is_same_v<To, float>) {
      const __m256 one = _mm256_set1_ps(1.0f);
      for (; i + 8 <= n; i += 8) {
        const __m256i b = _mm256_cvtepu8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + i)));
        const __m256i zero = _mm256_cmpeq_epi32(b, _mm256_setzero_si256());
        _mm256_storeu_ps(dst + i, _mm256_andnot_ps(_mm256_castsi256_ps(zero), one));
      }
    }
    for (; i < n; ++i) dst[i] = cast_value<To>(src[i] != 0);
  } else if (ss == 0) {
    const To v = cast_value<To>(src[0] != 0);
    for (int64_t i = 0; i < n; ++i) dst[i * ds] = v;
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i * ds] = cast_value<To>(src[i * ss] != 0);
  }
}

using Table = std::array<std::array<ConvertFn, kNumDTypes>, kNumDTypes>;

Table make_table() {
  Table t{};
  for (int f = 0; f < kNumDTypes; ++f) {
    for (int to = 0; to < kNumDTypes; ++to) {
      t[f][to] = dispatch_storage(DType(f), [&]<class From>() {
        return dispatch_storage(DType(to), [&]<class To>() -> ConvertFn {
          if constexpr (std::is_same_v<From, bool>) return &convert_from_bool<To>;
          else return &convert_generic<From, To>;
        });
      });
    }
  }
  return t;
}

}  // namespace

ConvertFn convert_fn(DType from, DType to) {
  static const Table table = make_table();
  return table[static_cast<int>(from)][static_cast<int>(to)];
}

}  // namespace detail

size_t dtype_size(DType t) {
  return detail::dispatch_storage(t, []<class T>() { return sizeof(T); });
}

const char* dtype_name(DType t) {
  static const char* names[kNumDTypes] = {"float32", "float16", "bfloat16", "float64", "int8",
                                          "int16",   "int32",   "int64",    "uint8",   "bool"};
  return names[static_cast<int>(t)];
}

TensorDesc TensorDesc::make(const void* data, DType dtype, const int64_t* sizes, int ndim,
                            const int64_t* strides) {
  NPU_KERNEL_ASSERT(ndim >= 0 && ndim <= kMaxDims, "too many dimensions");
  TensorDesc d;
  d.data = const_cast<void*>(data);
  d.dtype = dtype;
  d.ndim = ndim;
  int64_t expected = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    d.sizes[i] = sizes[i];
    d.strides[i] = strides ? strides[i] : expected;
    expected *= sizes[i];
  }
  return d;
}

TensorDesc TensorDesc::make(const void* data, DType dtype, std::initializer_list<int64_t> sizes,
                            std::initializer_list<int64_t> strides) {
  NPU_KERNEL_ASSERT(strides.size() == 0 || strides.size() == sizes.size(),
                    "sizes and strides differ in length");
  return make(data, dtype, sizes.begin(), static_cast<int>(sizes.size()),
              strides.size() ? strides.begin() : nullptr);
}

TensorDesc TensorDesc::broadcast_scalar(const void* value, DType dtype, const TensorDesc& shape) {
  TensorDesc d = shape;
  d.data = const_cast<void*>(value);
  d.dtype = dtype;
  for (int i = 0; i < d.ndim; ++i) d.strides[i] = 0;
  return d;
}

namespace {

// A copy between tensors of one dtype: whole runs with memcpy, strided runs element by element
// as raw bytes of the element's size (no conversion, no call through the table per run). A
// broadcast source (fill) keeps the converter's store loop.
// Copies n bytes between buffers that do not overlap: runs under 256 bytes (a rotary half or
// an attention head of 16-32 floats, thousands per tensor) with 32- and 16-byte vector moves
// inline, the last move overlapping the one before it, instead of a call to memcpy per run.
inline void copy_bytes(char* d, const char* s, size_t n) {
  if (n >= 256) {
    std::memcpy(d, s, n);
  } else if (n >= 32) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i),
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
    }
    if (i < n) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + n - 32),
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + n - 32)));
    }
  } else if (n >= 16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + n - 16),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + n - 16)));
  } else {
    std::memcpy(d, s, n);
  }
}

template <class Bits>
void copy_same_dtype(const detail::StridedIter<2>& it, detail::ConvertFn convert) {
  detail::for_each_segment(it, 64 * 1024, [&](char* const* p, const int64_t* s, int64_t n) {
    if (s[0] == 1 && s[1] == 1) {
      copy_bytes(p[0], p[1], static_cast<size_t>(n) * sizeof(Bits));
    } else if (s[1] == 0) {
      convert(p[1], s[1], p[0], s[0], n);
    } else {
      Bits* d = reinterpret_cast<Bits*>(p[0]);
      const Bits* v = reinterpret_cast<const Bits*>(p[1]);
      for (int64_t i = 0; i < n; ++i) std::memcpy(d + i * s[0], v + i * s[1], sizeof(Bits));
    }
  });
}

}  // namespace

void copy(const TensorDesc& dst, const TensorDesc& src) {
  const TensorDesc* ops[2] = {&dst, &src};
  auto it = detail::make_iter<2>(ops);
  detail::ConvertFn fn = detail::convert_fn(src.dtype, dst.dtype);
  if (src.dtype == dst.dtype && src.dtype != DType::Bool) {
    switch (dtype_size(src.dtype)) {
      case 1: return copy_same_dtype<uint8_t>(it, fn);
      case 2: return copy_same_dtype<uint16_t>(it, fn);
      case 4: return copy_same_dtype<uint32_t>(it, fn);
      case 8: return copy_same_dtype<uint64_t>(it, fn);
      default: break;
    }
  }
  // Plain memory copies are bandwidth bound: large grains keep thread overhead negligible.
  detail::for_each_segment(it, 64 * 1024, [&](char* const* p, const int64_t* s, int64_t n) {
    fn(p[1], s[1], p[0], s[0], n);
  });
}

bool concat(const TensorDesc& out, const TensorDesc* parts, int count, int dim) {
  // Rows of out: every index of the dimensions before `dim`; a part's block of a row (its
  // dimensions from `dim` on) must be contiguous, its rows may be strided any way.
  // Bool is left to copy(), which writes every true byte as 1 (as a same-dtype memcpy would not).
  if (count < 1 || dim < 0 || dim >= out.ndim || !out.is_contiguous() ||
      out.dtype == DType::Bool) {
    return false;
  }
  const int64_t esize = static_cast<int64_t>(dtype_size(out.dtype));
  int64_t inner = 1, rows = 1;
  for (int d = dim + 1; d < out.ndim; ++d) inner *= out.sizes[d];
  for (int d = 0; d < dim; ++d) rows *= out.sizes[d];
  constexpr int kMaxParts = 64;
  if (count > kMaxParts) return false;
  int64_t block_bytes[kMaxParts];
  int64_t columns = 0;
  for (int k = 0; k < count; ++k) {
    const TensorDesc& t = parts[k];
    if (t.dtype != out.dtype || t.ndim != out.ndim) return false;
    int64_t expected = 1;
    for (int d = out.ndim - 1; d >= 0; --d) {
      if (d != dim && t.sizes[d] != out.sizes[d]) return false;
      if (d >= dim && t.sizes[d] != 1 && t.strides[d] != expected) return false;
      if (d >= dim) expected *= t.sizes[d];
    }
    block_bytes[k] = expected * esize;
    columns += t.sizes[dim];
  }
  NPU_KERNEL_ASSERT(columns == out.sizes[dim], "concat: the parts' sizes along dim do not add up");
  const int64_t row_bytes = columns * inner * esize;
  if (rows == 0 || row_bytes == 0) return true;
  // Tasks are whole rows: a few large rows (cat along dim 0) would leave threads idle, so
  // they are left to copy(), which splits long runs.
  if (rows < 2 * num_threads() && rows * row_bytes > (int64_t{1} << 20)) return false;
  char* const base = static_cast<char*>(out.data);
  // Whole rows per task, at least 64 KB of them (a memory copy: large grains).
  const int64_t grain = std::max<int64_t>(1, (64 << 10) / row_bytes);
  parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) {
    // idx: row r0's index over the dimensions before dim; src[k]: part k's block of that row.
    int64_t idx[kMaxDims] = {};
    int64_t rem = r0;
    for (int d = dim - 1; d >= 0; --d) {
      idx[d] = rem % out.sizes[d];
      rem /= out.sizes[d];
    }
    const char* src[kMaxParts];
    for (int k = 0; k < count; ++k) {
      int64_t off = 0;
      for (int d = 0; d < dim; ++d) off += idx[d] * parts[k].strides[d];
      src[k] = static_cast<const char*>(parts[k].data) + off * esize;
    }
    char* dst = base + r0 * row_bytes;
    for (int64_t r = r0; r < r1; ++r) {
      for (int k = 0; k < count; ++k) {
        copy_bytes(dst, src[k], static_cast<size_t>(block_bytes[k]));
        dst += block_bytes[k];
      }
      if (dim == 0) break;  // a single row
      // The next row: the innermost outer dimension steps; one that wraps steps the next one.
      int d = dim - 1;
      ++idx[d];
      for (int k = 0; k < count; ++k) src[k] += parts[k].strides[d] * esize;
      while (d > 0 && idx[d] == out.sizes[d]) {
        for (int k = 0; k < count; ++k) src[k] -= out.sizes[d] * parts[k].strides[d] * esize;
        idx[d] = 0;
        --d;
        ++idx[d];
        for (int k = 0; k < count; ++k) src[k] += parts[k].strides[d] * esize;
      }
    }
  });
  return true;
}

void fill(const TensorDesc& dst, Scalar value) {
  detail::dispatch_storage(dst.dtype, [&]<class T>() {
    using C = detail::compute_t<T>;
    T v;
    if constexpr (std::is_floating_point_v<C>) v = detail::cast_value<T>(value.f);
    else if constexpr (std::is_same_v<C, bool>) v = detail::cast_value<T>(value.i != 0 || value.f != 0);
    else v = detail::cast_value<T>(value.i);
    TensorDesc src = TensorDesc::broadcast_scalar(&v, dst.dtype, dst);
    copy(dst, src);
  });
}

}  // namespace npu::kernels
