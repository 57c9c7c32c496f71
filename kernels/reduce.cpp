// Reductions (sum, mean, prod, amax, ...) and arg-reductions: reducer functors on contiguous
// chunks, run by the generic loop of reduce_driver.h.
#include <immintrin.h>

#include <cmath>
#include <limits>
#include <string>

#include "binary_ops.h"
#include "reduce_driver.h"
#include "npu/kernels/reduce.h"

namespace npu::kernels {
namespace detail {

ReduceGeometry make_reduce_geometry(const TensorDesc& in, const TensorDesc* const* outs,
                                    int n_outs) {
  ReduceGeometry g;
  for (int k = 0; k < n_outs; ++k) {
    NPU_KERNEL_ASSERT(outs[k]->ndim == in.ndim, "reduction output must keep the input's ndim");
  }
  for (int d = 0; d < in.ndim; ++d) {
    int64_t s = in.sizes[d];
    bool reduced = outs[0]->sizes[d] == 1 && s != 1;
    for (int k = 0; k < n_outs; ++k) {
      NPU_KERNEL_ASSERT(outs[k]->sizes[d] == (reduced ? 1 : s), "reduction output shape");
    }
    if (s == 1) continue;
    if (reduced) {
      g.R *= s;
      if (g.n_red > 0 && g.red_in[g.n_red - 1] == in.strides[d] * s) {
        g.red_sizes[g.n_red - 1] *= s;  // merge with the previous (outer) reduced dim
        g.red_in[g.n_red - 1] = in.strides[d];
        continue;
      }
      g.red_sizes[g.n_red] = s;
      g.red_in[g.n_red++] = in.strides[d];
    } else {
      g.n_out *= s;
      if (g.n_kept > 0 && g.kept_in[g.n_kept - 1] == in.strides[d] * s) {
        bool mergeable = true;
        for (int k = 0; k < n_outs; ++k) {
          if (g.kept_out[k][g.n_kept - 1] != outs[k]->strides[d] * s) mergeable = false;
        }
        if (mergeable) {
          g.kept_sizes[g.n_kept - 1] *= s;
          g.kept_in[g.n_kept - 1] = in.strides[d];
          for (int k = 0; k < n_outs; ++k) g.kept_out[k][g.n_kept - 1] = outs[k]->strides[d];
          continue;
        }
      }
      g.kept_sizes[g.n_kept] = s;
      g.kept_in[g.n_kept] = in.strides[d];
      for (int k = 0; k < n_outs; ++k) g.kept_out[k][g.n_kept] = outs[k]->strides[d];
      ++g.n_kept;
    }
  }
  if (g.n_red == 0) {  // nothing reduced: rows of one element
    g.red_sizes[0] = 1;
    g.red_in[0] = 0;
    g.n_red = 1;
  }
  return g;
}

namespace red {

// Float32 chunk sums: 32 lanes of float partial sums (each lane sees n/32 values, so the
// error of a 4096-element chunk is that of ~128 sequential adds), lanes added in double.
// Chunks are then combined in double: accurate like PyTorch's cascade sum, at float speed.
// The lanes are widened to double and added as a tree in vectors, and a short rest goes 8 at
// a time into the first lanes: a row of 128 (RMSNorm's mean over the last dim) spent most of
// its time in 32 dependent scalar double adds.
inline double sum_f32(const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(x + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(x + i + 24));
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
  auto wide = [](__m256 v) {
    return _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)),
                         _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
  };
  const __m256d d = _mm256_add_pd(_mm256_add_pd(wide(a0), wide(a1)),
                                  _mm256_add_pd(wide(a2), wide(a3)));
  const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(d), _mm256_extractf128_pd(d, 1));
  double s = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
  for (; i < n; ++i) s += x[i];
  return s;
}

inline double sum_f64(const double* x, int64_t n) {
  __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_add_pd(a0, _mm256_loadu_pd(x + i));
    a1 = _mm256_add_pd(a1, _mm256_loadu_pd(x + i + 4));
    a2 = _mm256_add_pd(a2, _mm256_loadu_pd(x + i + 8));
    a3 = _mm256_add_pd(a3, _mm256_loadu_pd(x + i + 12));
  }
  alignas(32) double lanes[16];
  _mm256_store_pd(lanes, a0);
  _mm256_store_pd(lanes + 4, a1);
  _mm256_store_pd(lanes + 8, a2);
  _mm256_store_pd(lanes + 12, a3);
  double s = 0;
  for (double v : lanes) s += v;
  for (; i < n; ++i) s += x[i];
  return s;
}

template <class T>
using wide_t = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

template <class T>
struct Sum {
  static constexpr unsigned kTypes = kAll;
  using Acc = wide_t<T>;
  Acc init() const { return 0; }
  Acc reduce(const T* x, int64_t n, int64_t) const {
    if constexpr (std::is_same_v<T, float>) return sum_f32(x, n);
    else if constexpr (std::is_same_v<T, double>) return sum_f64(x, n);
    else {
      int64_t s = 0;
      for (int64_t i = 0; i < n; ++i) s += static_cast<int64_t>(x[i]);
      return s;
    }
  }
  Acc combine(Acc a, Acc b) const { return a + b; }
  Acc finish(Acc a, int64_t) const { return a; }
};

template <class T>
struct Mean : Sum<T> {
  static constexpr unsigned kTypes = kFloating;
  double finish(double a, int64_t n) const { return a / static_cast<double>(n); }
};

template <class T>
struct Prod {
  static constexpr unsigned kTypes = kAll;
  using Acc = wide_t<T>;
  Acc init() const { return 1; }
  Acc reduce(const T* x, int64_t n, int64_t) const {
    Acc p = 1;
    for (int64_t i = 0; i < n; ++i) p *= static_cast<Acc>(x[i]);
    return p;
  }
  Acc combine(Acc a, Acc b) const { return a * b; }
  Acc finish(Acc a, int64_t) const { return a; }
};

template <class T, bool kMax>
struct Extremum {
  static constexpr unsigned kTypes = kAll;
  using Acc = T;
  Acc init() const {
    if constexpr (std::is_floating_point_v<T>) {
      return kMax ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
    } else {
      return kMax ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
    }
  }
  Acc reduce(const T* x, int64_t n, int64_t) const {
    Acc m = init();
    if constexpr (std::is_floating_point_v<T>) {
      bool nan = false;
      for (int64_t i = 0; i < n; ++i) {  // branch-free so the compiler vectorises it
        nan |= std::isnan(x[i]);
        m = kMax ? (x[i] > m ? x[i] : m) : (x[i] < m ? x[i] : m);
      }
      return nan ? std::numeric_limits<T>::quiet_NaN() : m;
    } else {
      for (int64_t i = 0; i < n; ++i) m = kMax ? std::max(m, x[i]) : std::min(m, x[i]);
      return m;
    }
  }
  Acc combine(Acc a, Acc b) const { return kMax ? ops::max_nan(a, b) : ops::min_nan(a, b); }
  Acc finish(Acc a, int64_t) const { return a; }
};
template <class T>
struct Amax : Extremum<T, true> {};
template <class T>
struct Amin : Extremum<T, false> {};

template <class T, bool kAny>
struct AnyAll {
  static constexpr unsigned kTypes = kAll;
  using Acc = bool;
  Acc init() const { return !kAny; }
  Acc reduce(const T* x, int64_t n, int64_t) const {
    for (int64_t i = 0; i < n; ++i) {
      if ((x[i] != T(0)) == kAny) return kAny;
    }
    return !kAny;
  }
  Acc combine(Acc a, Acc b) const { return kAny ? (a || b) : (a && b); }
  Acc finish(Acc a, int64_t) const { return a; }
};
template <class T>
struct Any : AnyAll<T, true> {};
template <class T>
struct All : AnyAll<T, false> {};

template <class T>
struct CountNonzero {
  static constexpr unsigned kTypes = kAll;
  using Acc = int64_t;
  Acc init() const { return 0; }
  Acc reduce(const T* x, int64_t n, int64_t) const {
    int64_t c = 0;
    for (int64_t i = 0; i < n; ++i) c += x[i] != T(0);
    return c;
  }
  Acc combine(Acc a, Acc b) const { return a + b; }
  Acc finish(Acc a, int64_t) const { return a; }
};

// Vector p-norms, accumulated in double.
template <class T>
struct Norm {
  static constexpr unsigned kTypes = kFloating;
  using Acc = double;
  double p;
  explicit Norm(Scalar p0) : p(p0.f) {}
  Acc init() const { return p == -INFINITY ? INFINITY : 0.0; }
  Acc reduce(const T* x, int64_t n, int64_t) const {
    double s = init();
    for (int64_t i = 0; i < n; ++i) {
      double a = std::fabs(static_cast<double>(x[i]));
      if (p == INFINITY) s = ops::max_nan(s, a);
      else if (p == -INFINITY) s = ops::min_nan(s, a);
      else if (p == 0) s += a != 0;
      else if (p == 1) s += a;
      else if (p == 2) s += a * a;
      else s += std::pow(a, p);
    }
    return s;
  }
  Acc combine(Acc a, Acc b) const {
    if (p == INFINITY) return ops::max_nan(a, b);
    if (p == -INFINITY) return ops::min_nan(a, b);
    return a + b;
  }
  double finish(Acc a, int64_t) const {
    if (p == INFINITY || p == -INFINITY || p == 0 || p == 1) return a;
    if (p == 2) return std::sqrt(a);
    return std::pow(a, 1.0 / p);
  }
};

// Variance: each chunk two-pass (mean, then squared deviations) in double, chunks merged
// with Chan et al.'s pairwise update, which stays accurate when the mean is large.
struct Moments {
  double n = 0, mean = 0, m2 = 0;
};
template <class T, bool kStd>
struct VarStd {
  static constexpr unsigned kTypes = kFloating;
  using Acc = Moments;
  double correction;
  explicit VarStd(Scalar p0) : correction(p0.f) {}
  Acc init() const { return {}; }
  Acc reduce(const T* x, int64_t n, int64_t) const {
    if (n == 0) return {};
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += x[i];
    double mean = s / n, m2 = 0;
    for (int64_t i = 0; i < n; ++i) {
      double d = x[i] - mean;
      m2 += d * d;
    }
    return {double(n), mean, m2};
  }
  Acc combine(Acc a, Acc b) const {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    double n = a.n + b.n, delta = b.mean - a.mean;
    return {n, a.mean + delta * b.n / n, a.m2 + b.m2 + delta * delta * a.n * b.n / n};
  }
  double finish(Acc a, int64_t) const {
    double v = a.m2 / std::max(0.0, a.n - correction);
    return kStd ? std::sqrt(v) : v;
  }
};
template <class T>
struct Var : VarStd<T, false> {
  using VarStd<T, false>::VarStd;
};
template <class T>
struct Std : VarStd<T, true> {
  using VarStd<T, true>::VarStd;
};

// logsumexp = shift + log(sum exp(x - shift)) with shift = max, or 0 when the max is
// infinite (PyTorch's rule: then the plain sum gives inf or log(0) = -inf).
struct LseAcc {
  double shift = 0, sum = 0;
  bool empty = true;
};
template <class T>
struct LogSumExp {
  static constexpr unsigned kTypes = kFloating;
  using Acc = LseAcc;
  Acc init() const { return {}; }
  Acc reduce(const T* x, int64_t n, int64_t) const {
    if (n == 0) return {};
    double m = -INFINITY;
    for (int64_t i = 0; i < n; ++i) m = ops::max_nan(m, double(x[i]));
    double shift = std::isinf(m) ? 0.0 : m, s = 0;
    for (int64_t i = 0; i < n; ++i) s += std::exp(double(x[i]) - shift);
    return {shift, s, false};
  }
  Acc combine(Acc a, Acc b) const {
    if (a.empty) return b;
    if (b.empty) return a;
    double shift = ops::max_nan(a.shift, b.shift);
    return {shift, a.sum * std::exp(a.shift - shift) + b.sum * std::exp(b.shift - shift), false};
  }
  double finish(Acc a, int64_t) const { return a.empty ? -INFINITY : std::log(a.sum) + a.shift; }
};

template <class T>
struct ArgAcc {
  T value;
  int64_t index = -1;
};

// The index ArgExtremum<float>::reduce's loop finds (n >= 1), 16 lanes at a time: the first NaN
// if there is one, else the first element equal to the largest (smallest) value. Two passes:
// the extremum (stopping at a NaN), then the first lane equal to it (-0 and +0 compare equal:
// the loop keeps the first of them too). The loop took 1 ns an element: argmax over a batch of
// 8 rows of 32000 logits (greedy decoding) was 245 us.
NPU_AVX512 inline int64_t arg_extremum512(const float* x, int64_t n, bool max) {
  __m512 best = _mm512_set1_ps(max ? -INFINITY : INFINITY);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    // The first NaN wins (the blocks before this one had none).
    if (const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q)) return i + __builtin_ctz(nan);
    best = max ? _mm512_max_ps(best, v) : _mm512_min_ps(best, v);
  }
  if (i < n) {
    const __mmask16 tail = tail_mask16(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(tail, x + i);
    if (const __mmask16 nan = _mm512_mask_cmp_ps_mask(tail, v, v, _CMP_UNORD_Q)) {
      return i + __builtin_ctz(nan);
    }
    best = max ? _mm512_mask_max_ps(best, tail, best, v) : _mm512_mask_min_ps(best, tail, best, v);
  }
  const float extremum = max ? _mm512_reduce_max_ps(best) : _mm512_reduce_min_ps(best);
  const __m512 target = _mm512_set1_ps(extremum);
  for (i = 0; i < n; i += 16) {
    const __mmask16 in = tail_mask16(n - i);
    const __mmask16 hit =
        _mm512_mask_cmp_ps_mask(in, _mm512_maskz_loadu_ps(in, x + i), target, _CMP_EQ_OQ);
    if (hit) return i + __builtin_ctz(hit);
  }
  return 0;  // not reached: the extremum is one of the elements
}

template <class T, bool kMax>
struct ArgExtremum {
  using Acc = ArgAcc<T>;
  // True when b (later) should replace a (earlier): strictly better, or a NaN over a number.
  static bool better(T b, T a) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a)) return false;
      if (std::isnan(b)) return true;
    }
    return kMax ? b > a : b < a;
  }
  Acc init() const { return {T(0), -1}; }
  Acc reduce(const T* x, int64_t n, int64_t first) const {
    if (n == 0) return {};
    if constexpr (std::is_same_v<T, float>) {
      if (n >= 16 && has_avx512()) {
        const int64_t i = arg_extremum512(x, n, kMax);
        return {x[i], first + i};
      }
    }
    Acc best{x[0], first};
    for (int64_t i = 1; i < n; ++i) {
      if (better(x[i], best.value)) best = {x[i], first + i};
    }
    return best;
  }
  Acc combine(Acc a, Acc b) const {
    if (a.index < 0) return b;
    if (b.index < 0) return a;
    return better(b.value, a.value) ? b : a;
  }
};

}  // namespace red

namespace {

template <template <class> class R, class T>
constexpr bool red_supports() {
  return (R<T>::kTypes & type_bit<T>()) != 0;
}

// Column sums: sum / mean of float32 over the leading dims of a tensor whose kept dims are
// contiguous (a weight's gradient summed over batch and tokens, [B*T, C] -> [C]). Each unit of
// 16 columns walks the rows once, accumulating in 16 double lanes (sequential double sums: more
// accurate than the float chunk sums, and independent of the thread count). The generic tile
// mode gathered and transposed 16 columns per chunk: 12x the CPU device's time for
// [1024, 128] -> [128]. Returns false where it does not apply.
// 64 columns of the column sums on AVX-512: acc[0, 64) = the sequential double sums of x's R
// rows (row stride rs) over columns [0, 64), in the same order as the 16-column AVX2 unit below
// (so the same result), with 8 independent accumulators of 8 lanes instead of 4 of 4: the
// AVX2 unit waits on its add chains (one add per accumulator per row) and converts 4 floats
// per instruction.
NPU_AVX512 void column_sums64_avx512(const float* x, int64_t R, int64_t rs, double* acc) {
  __m512d a[8];
  for (int j = 0; j < 8; ++j) a[j] = _mm512_setzero_pd();
  for (int64_t i = 0; i < R; ++i) {
    const float* p = x + i * rs;
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const __m512 f = _mm512_loadu_ps(p + 16 * v);
      a[2 * v] = _mm512_add_pd(a[2 * v], _mm512_cvtps_pd(_mm512_castps512_ps256(f)));
      a[2 * v + 1] = _mm512_add_pd(a[2 * v + 1], _mm512_cvtps_pd(_mm512_extractf32x8_ps(f, 1)));
    }
  }
  for (int j = 0; j < 8; ++j) _mm512_storeu_pd(acc + 8 * j, a[j]);
}

template <class T, class Red>
bool column_sums(const Red& r, const ReduceGeometry& g, const TensorDesc& out,
                 const TensorDesc& in) {
  if constexpr (!std::is_same_v<T, float> || !std::is_base_of_v<red::Sum<float>, Red>) {
    return false;
  } else {
    if (in.dtype != DType::Float32 || g.n_kept != 1 || g.kept_in[0] != 1 || g.n_red != 1 ||
        g.R < 2) {
      return false;
    }
    const int64_t C = g.kept_sizes[0], R = g.R, rs = g.red_in[0];
    const float* x = static_cast<const float*>(in.data);
    ConvertFn store = convert_fn(DType::Float64, out.dtype);
    char* obase = static_cast<char*>(out.data);
    const int64_t osize = static_cast<int64_t>(dtype_size(out.dtype));
    constexpr int64_t W = 16;
    // AVX-512: units of 64 columns while 64 remain (the rest in 16-column units).
    const bool wide = has_avx512() && C >= 64;
    const int64_t wide_units = wide ? C / 64 : 0, c_rest = wide_units * 64;
    const int64_t units = wide_units + (C - c_rest + W - 1) / W;
    parallel_for(0, units, std::max<int64_t>(1, 65536 / (W * R)),
                 [&](int64_t u0, int64_t u1) {
      for (int64_t u = u0; u < u1; ++u) {
        if (u < wide_units) {
          alignas(64) double acc[64];
          column_sums64_avx512(x + u * 64, R, rs, acc);
          for (int64_t k = 0; k < 64; ++k) {
            const double v = r.finish(acc[k], R);
            store(&v, 1, obase + g.out_offset(0, u * 64 + k) * osize, 1, 1);
          }
          continue;
        }
        const int64_t c0 = c_rest + (u - wide_units) * W, w = std::min(W, C - c0);
        alignas(32) double acc[W] = {};
        if (w == W) {
          __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
          for (int64_t i = 0; i < R; ++i) {
            const float* p = x + i * rs + c0;
            const __m256 v0 = _mm256_loadu_ps(p), v1 = _mm256_loadu_ps(p + 8);
            a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(v0)));
            a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(v0, 1)));
            a2 = _mm256_add_pd(a2, _mm256_cvtps_pd(_mm256_castps256_ps128(v1)));
            a3 = _mm256_add_pd(a3, _mm256_cvtps_pd(_mm256_extractf128_ps(v1, 1)));
          }
          _mm256_store_pd(acc, a0);
          _mm256_store_pd(acc + 4, a1);
          _mm256_store_pd(acc + 8, a2);
          _mm256_store_pd(acc + 12, a3);
        } else {
          for (int64_t i = 0; i < R; ++i) {
            for (int64_t k = 0; k < w; ++k) acc[k] += x[i * rs + c0 + k];
          }
        }
        for (int64_t k = 0; k < w; ++k) {
          const double v = r.finish(acc[k], R);
          store(&v, 1, obase + g.out_offset(0, c0 + k) * osize, 1, 1);
        }
      }
    });
    return true;
  }
}

// Row sums: sum / mean of float32 over a contiguous last dim of at most one chunk (4096), into
// a float32 output (RMSNorm's x.pow(2).mean(-1), softmax-like row sums of a backward). The same
// sums as run_reduce's (one chunk: sum_f32 of the row), without its per-output cursor, offset
// divisions and converter call, which cost more than the sum of a 128-value row. Returns false
// where it does not apply.
template <class T, class Red>
bool row_sums(const Red& r, const ReduceGeometry& g, const TensorDesc& out, const TensorDesc& in) {
  if constexpr (!std::is_same_v<T, float> || !std::is_base_of_v<red::Sum<float>, Red>) {
    return false;
  } else {
    if (in.dtype != DType::Float32 || out.dtype != DType::Float32 || g.n_kept != 1 ||
        g.n_red != 1 || g.red_in[0] != 1 || g.R < 1 || g.R > 4096) {
      return false;
    }
    const int64_t R = g.R, rows = g.kept_sizes[0], rs = g.kept_in[0], os = g.kept_out[0][0];
    const float* x = static_cast<const float*>(in.data);
    float* o = static_cast<float*>(out.data);
    parallel_for(0, rows, std::max<int64_t>(1, 32768 / R), [&](int64_t r0, int64_t r1) {
      for (int64_t i = r0; i < r1; ++i) {
        o[i * os] = static_cast<float>(r.finish(r.combine(r.init(), r.reduce(x + i * rs, R, 0)), R));
      }
    });
    return true;
  }
}

template <class T, class Red>
void reduce_with(const Red& r, const TensorDesc& out, const TensorDesc& in) {
  const TensorDesc* outs[1] = {&out};
  ReduceGeometry g = make_reduce_geometry(in, outs, 1);
  if (column_sums<T>(r, g, out, in)) return;
  if (row_sums<T>(r, g, out, in)) return;
  using Value = decltype(r.finish(r.init(), 0));
  ConvertFn store = convert_fn(dtype_of<Value>(), out.dtype);
  char* obase = static_cast<char*>(out.data);
  const int64_t osize = static_cast<int64_t>(dtype_size(out.dtype));
  run_reduce<T>(r, g, in, [&](int64_t o, const typename Red::Acc& acc) {
    Value v = r.finish(acc, g.R);
    store(&v, 1, obase + g.out_offset(0, o) * osize, 1, 1);
  });
}

template <template <class> class R>
void reduce_op(const char* name, const TensorDesc& out, const TensorDesc& in, DType compute,
               Scalar p0) {
  dispatch_compute(compute, [&]<class T>() {
    if constexpr (red_supports<R, T>()) {
      if constexpr (std::is_constructible_v<R<T>, Scalar>) reduce_with<T>(R<T>(p0), out, in);
      else reduce_with<T>(R<T>{}, out, in);
    } else {
      NPU_KERNEL_ASSERT(false, std::string(name) + " does not support compute dtype " +
                                   dtype_name(compute));
    }
  });
}

}  // namespace
}  // namespace detail

const char* op_name(ReduceOp op) {
#define NPU_NAME(name, str) \
  case ReduceOp::name: return str;
  switch (op) { NPU_KERNELS_REDUCE_OPS(NPU_NAME) }
#undef NPU_NAME
  return "?";
}

bool reduce_supports(ReduceOp op, DType compute) {
#define NPU_SUPPORTS(name, str)                                                         \
  case ReduceOp::name:                                                                  \
    return detail::dispatch_compute(                                                    \
        compute, []<class T>() { return detail::red_supports<detail::red::name, T>(); });
  switch (op) { NPU_KERNELS_REDUCE_OPS(NPU_SUPPORTS) }
#undef NPU_SUPPORTS
  return false;
}

void reduce(ReduceOp op, const TensorDesc& out, const TensorDesc& in, DType compute, Scalar p0) {
#define NPU_RUN(name, str) \
  case ReduceOp::name: return detail::reduce_op<detail::red::name>(str, out, in, compute, p0);
  switch (op) { NPU_KERNELS_REDUCE_OPS(NPU_RUN) }
#undef NPU_RUN
  NPU_KERNEL_ASSERT(false, "unknown reduce op");
}

bool arg_reduce_supports(DType compute) { return compute != DType::Bool; }

void arg_reduce(ArgReduceOp op, const TensorDesc& values, const TensorDesc& indices,
                const TensorDesc& in, DType compute) {
  NPU_KERNEL_ASSERT(indices.dtype == DType::Int64, "indices must be Int64");
  const bool with_values = values.data != nullptr;
  const TensorDesc* outs[2] = {&indices, &values};
  detail::ReduceGeometry g = detail::make_reduce_geometry(in, outs, with_values ? 2 : 1);
  detail::dispatch_compute(compute, [&]<class T>() {
    if constexpr (std::is_same_v<T, bool>) {
      NPU_KERNEL_ASSERT(false, "arg_reduce of bool");
    } else {
      auto run = [&](const auto& r) {
        detail::ConvertFn store_v = detail::convert_fn(detail::dtype_of<T>(), values.dtype);
        const int64_t vsize = static_cast<int64_t>(dtype_size(values.dtype));
        detail::run_reduce<T>(r, g, in, [&](int64_t o, const detail::red::ArgAcc<T>& acc) {
          int64_t idx = acc.index < 0 ? 0 : acc.index;
          static_cast<int64_t*>(indices.data)[g.out_offset(0, o)] = idx;
          if (with_values) {
            store_v(&acc.value, 1, static_cast<char*>(values.data) + g.out_offset(1, o) * vsize,
                    1, 1);
          }
        });
      };
      if (op == ArgReduceOp::Max) run(detail::red::ArgExtremum<T, true>{});
      else run(detail::red::ArgExtremum<T, false>{});
    }
  });
}

}  // namespace npu::kernels
