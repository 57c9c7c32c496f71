// softmax / log_softmax, layer_norm, rms_norm and their backward passes.
//
// All of them work row by row: softmax moves its dim last (a stride permutation), the norms
// take the trailing dims as the row (rows.h). A row is loaded into a contiguous buffer of the
// compute type (or used in place when it already is one), processed by a vectorised loop,
// and stored back with conversion. Rows are spread over the pool.
#include <immintrin.h>

#include <cmath>
#include <memory>
#include <type_traits>
#include <vector>

#include "rows.h"
#include "scratch.h"
#include "vec_math.h"
#include "npu/kernels/normalization.h"
#include "npu/kernels/thread_pool.h"

namespace npu::kernels {
namespace detail {
namespace {

template <class F>
void dispatch_float(DType t, F&& f) {
  if (t == DType::Float64) f.template operator()<double>();
  else f.template operator()<float>();
}

// ---- softmax ----------------------------------------------------------------------------

inline float max_f32(const float* x, int64_t n) {
  __m256 m = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
  float r = hmax256(m);
  for (; i < n; ++i) r = x[i] > r ? x[i] : r;
  return r;
}

// y = exp(x - shift); returns the sum (float lanes, combined in double).
inline double exp_shift_sum_f32(const float* x, float* y, int64_t n, float shift) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
    _mm256_storeu_ps(y + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  double sum = hsum256(acc);
  if (i < n) {
    map8(y + i, x + i, n - i, [&](__m256 v) { return exp256(_mm256_sub_ps(v, s)); });
    for (; i < n; ++i) sum += y[i];
  }
  return sum;
}

// softmax_row on 16 lanes (AVX-512): the same exp per element as the 8-lane path; the row's
// sum is added in 16 float lanes instead of 8 before its combination in double.
NPU_AVX512 void softmax_row_avx512(const float* x, float* y, int64_t n, bool log) {
  __m512 vm = _mm512_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) vm = _mm512_max_ps(vm, _mm512_loadu_ps(x + i));
  if (i < n) vm = _mm512_mask_max_ps(vm, tail_mask16(n - i), vm, _mm512_maskz_loadu_ps(tail_mask16(n - i), x + i));
  const float m = _mm512_reduce_max_ps(vm);
  const __m512 s = _mm512_set1_ps(m);
  __m512 acc = _mm512_setzero_ps();
  for (i = 0; i + 16 <= n; i += 16) {
    __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i), s));
    if (!log) _mm512_storeu_ps(y + i, e);
    acc = _mm512_add_ps(acc, e);
  }
  if (i < n) {
    const __mmask16 k = tail_mask16(n - i);
    __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), s));
    if (!log) _mm512_mask_storeu_ps(y + i, k, e);
    acc = _mm512_mask_add_ps(acc, k, acc, e);
  }
  const double sum = _mm512_reduce_add_ps(acc);
  if (log) {
    const __m512 shift = _mm512_set1_ps(m + static_cast<float>(std::log(sum)));
    map16(y, x, n, [shift](__m512 v) NPU_AVX512 { return _mm512_sub_ps(v, shift); });
  } else {
    const __m512 inv = _mm512_set1_ps(static_cast<float>(1.0 / sum));
    map16(y, y, n, [inv](__m512 v) NPU_AVX512 { return _mm512_mul_ps(v, inv); });
  }
}

void softmax_row(const float* x, float* y, int64_t n, bool log) {
  if (has_avx512()) return softmax_row_avx512(x, y, n, log);
  float m = max_f32(x, n);
  double sum = exp_shift_sum_f32(x, y, n, m);
  if (log) {
    float shift = m + static_cast<float>(std::log(sum));
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] - shift;
  } else {
    float inv = static_cast<float>(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
  }
}

void softmax_row(const double* x, double* y, int64_t n, bool log) {
  double m = -INFINITY, sum = 0;
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  for (int64_t i = 0; i < n; ++i) sum += (y[i] = std::exp(x[i] - m));
  if (log) {
    double shift = m + std::log(sum);
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] - shift;
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] /= sum;
  }
}

// gi = g - exp(y) * s on 16 lanes (log_softmax's backward; the 8-lane path's arithmetic).
NPU_AVX512 void log_softmax_backward_row_avx512(float* gi, const float* g, const float* y,
                                                int64_t n, float s) {
  const __m512 vs = _mm512_set1_ps(s);
  map16_2(gi, g, y, n,
          [vs](__m512 vg, __m512 vy) NPU_AVX512 { return _mm512_fnmadd_ps(exp512(vy), vs, vg); });
}

// softmax's backward row on 16 lanes: s = sum(g * y) in 8 + 8 double lanes (each product exact
// in double, as sum_products), then gi = y * (g - s) with s rounded to float, as the 8-lane path.
NPU_AVX512 void softmax_backward_row_avx512(float* gi, const float* g, const float* y,
                                            int64_t n) {
  __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 vg = _mm512_loadu_ps(g + i), vy = _mm512_loadu_ps(y + i);
    a0 = _mm512_fmadd_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(vg)),
                         _mm512_cvtps_pd(_mm512_castps512_ps256(vy)), a0);
    a1 = _mm512_fmadd_pd(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(vg), 1))),
                         _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(vy), 1))), a1);
  }
  double s = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
  for (; i < n; ++i) s += double(g[i]) * y[i];
  const __m512 vs = _mm512_set1_ps(static_cast<float>(s));
  map16_2(gi, g, y, n, [vs](__m512 vg, __m512 vy) NPU_AVX512 {
    return _mm512_mul_ps(vy, _mm512_sub_ps(vg, vs));
  });
}

// Runs fn(row, T* const* in_bufs, T* out_buf, n) over the rows of `outs[0]`, loading the
// inputs and storing the output (in place when possible).
template <class T, int NIn, class F>
void for_each_row(const Rows& out, const Rows* const* ins, int64_t cost_per_elem, F&& fn) {
  const int64_t M = out.M(), N = out.N();
  if (M == 0 || N == 0) return;
  parallel_for(0, M, std::max<int64_t>(1, 32768 / (N * cost_per_elem)), [&](int64_t r0, int64_t r1) {
    std::vector<T> bufs(static_cast<size_t>(N) * (NIn + 1));
    for (int64_t r = r0; r < r1; ++r) {
      const T* in[NIn];
      for (int k = 0; k < NIn; ++k) {
        const T* d = ins[k]->template direct<T>(r);
        if (!d) {
          ins[k]->load(r, bufs.data() + k * N);
          d = bufs.data() + k * N;
        }
        in[k] = d;
      }
      T* o = out.template direct<T>(r);
      T* dst = o ? o : bufs.data() + NIn * N;
      fn(r, in, dst, N);
      if (!o) out.store(r, dst);
    }
  });
}

}  // namespace
}  // namespace detail

void softmax(const TensorDesc& out, const TensorDesc& in, int dim, bool log) {
  using namespace detail;
  Rows ro(move_dim_last(out, dim), 1), ri(move_dim_last(in, dim), 1);
  const Rows* ins[1] = {&ri};
  dispatch_float(in.dtype == DType::Float64 || out.dtype == DType::Float64 ? DType::Float64
                                                                           : DType::Float32,
                 [&]<class T>() {
    for_each_row<T, 1>(ro, ins, 4, [&](int64_t, const T* const* x, T* y, int64_t n) {
      softmax_row(x[0], y, n, log);
    });
  });
}

void softmax_backward(const TensorDesc& grad_input, const TensorDesc& grad_output,
                      const TensorDesc& output, int dim, bool log) {
  using namespace detail;
  Rows rgi(move_dim_last(grad_input, dim), 1), rgo(move_dim_last(grad_output, dim), 1),
      ry(move_dim_last(output, dim), 1);
  const Rows* ins[2] = {&rgo, &ry};
  dispatch_float(grad_input.dtype == DType::Float64 ? DType::Float64 : DType::Float32,
                 [&]<class T>() {
    for_each_row<T, 2>(rgi, ins, 2, [&](int64_t, const T* const* in, T* gi, int64_t n) {
      const T* g = in[0];
      const T* y = in[1];
      double s = 0;
      if (log) {
        if constexpr (std::is_same_v<T, float>) s = sum_values(g, n);  // double lanes
        else for (int64_t i = 0; i < n; ++i) s += g[i];
        if constexpr (std::is_same_v<T, float>) {  // exp 8 (16) lanes at a time, as the forward
          if (has_avx512()) {
            log_softmax_backward_row_avx512(gi, g, y, n, static_cast<float>(s));
          } else {
            const __m256 vs = _mm256_set1_ps(static_cast<float>(s));
            map8_2(gi, g, y, n,
                   [&](__m256 vg, __m256 vy) { return _mm256_fnmadd_ps(exp256(vy), vs, vg); });
          }
        } else {
          for (int64_t i = 0; i < n; ++i) gi[i] = g[i] - std::exp(y[i]) * T(s);
        }
      } else {
        // sum(g * y) in double lanes (the products are exact in double), then y * (g - s).
        if constexpr (std::is_same_v<T, float>) {
          if (has_avx512()) return softmax_backward_row_avx512(gi, g, y, n);
          s = sum_products(g, y, n, 0.0);
        } else {
          for (int64_t i = 0; i < n; ++i) s += double(g[i]) * y[i];
        }
        const T ts = T(s);
        for (int64_t i = 0; i < n; ++i) gi[i] = y[i] * (g[i] - ts);
      }
    });
  });
}

// ---- layer norm / rms norm ---------------------------------------------------------------

namespace detail {
namespace {

// Loads an optional per-column vector (weight / bias) as N values of T; 1 (or 0) if absent.
template <class T>
std::vector<T> load_vector(const TensorDesc* t, int64_t N, T absent) {
  std::vector<T> v(static_cast<size_t>(N), absent);
  if (t && t->data) Rows(*t, t->ndim).load(0, v.data());
  return v;
}

template <class T>
void store_scalar(const Rows& r, int64_t i, double v) {
  T x = static_cast<T>(v);
  r.store(i, &x);
}
template <class T>
double load_scalar(const Rows& r, int64_t i) {
  if (const T* p = r.direct<T>(i)) return *p;  // no conversion: read in place
  T x;
  r.load(i, &x);
  return x;
}

// Two rows of scratch for the calling thread (thread_scratch), reused across rows and calls: the
// row functions of column_sums run once per row, and a pair of vectors allocated per row was most
// of a small layer norm's backward.
struct RowScratch;
template <class T>
T* row_scratch(int64_t n) {
  return thread_scratch<RowScratch, T>(static_cast<size_t>(2 * n));
}

// One float32 row of layer norm's grad_input in double lanes (4 + 4): a = mean(g), b =
// mean(g * xhat) with g = dy * w, xhat = (x - mu) * rs; dx = rs * (g - a - xhat * b). The
// scalar double loops it replaces did not vectorise (serial sums): 7x the CPU device's time
// for the GPT-style model's 1024 rows of 32.
inline void layer_norm_backward_row_f32(float* dx, const float* dy, const float* x,
                                        const float* w, int64_t n, double mu, double rs) {
  const __m256d vmu = _mm256_set1_pd(mu), vrs = _mm256_set1_pd(rs);
  __m256d a0 = _mm256_setzero_pd(), a1 = a0, b0 = a0, b1 = a0;
  int64_t i = 0;
  auto lo = [](__m256 v) { return _mm256_cvtps_pd(_mm256_castps256_ps128(v)); };
  auto hi = [](__m256 v) { return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)); };
  for (; i + 8 <= n; i += 8) {
    const __m256 vd = _mm256_loadu_ps(dy + i), vw = _mm256_loadu_ps(w + i),
                 vx = _mm256_loadu_ps(x + i);
    const __m256d g0 = _mm256_mul_pd(lo(vd), lo(vw)), g1 = _mm256_mul_pd(hi(vd), hi(vw));
    a0 = _mm256_add_pd(a0, g0);
    a1 = _mm256_add_pd(a1, g1);
    b0 = _mm256_fmadd_pd(g0, _mm256_mul_pd(_mm256_sub_pd(lo(vx), vmu), vrs), b0);
    b1 = _mm256_fmadd_pd(g1, _mm256_mul_pd(_mm256_sub_pd(hi(vx), vmu), vrs), b1);
  }
  alignas(32) double ta[4], tb[4];
  _mm256_store_pd(ta, _mm256_add_pd(a0, a1));
  _mm256_store_pd(tb, _mm256_add_pd(b0, b1));
  double a = (ta[0] + ta[1]) + (ta[2] + ta[3]), b = (tb[0] + tb[1]) + (tb[2] + tb[3]);
  for (int64_t k = i; k < n; ++k) {
    const double g = double(dy[k]) * w[k];
    a += g;
    b += g * (x[k] - mu) * rs;
  }
  a /= n, b /= n;
  const __m256d va = _mm256_set1_pd(a), vb = _mm256_set1_pd(b);
  for (i = 0; i + 8 <= n; i += 8) {
    const __m256 vd = _mm256_loadu_ps(dy + i), vw = _mm256_loadu_ps(w + i),
                 vx = _mm256_loadu_ps(x + i);
    auto half = [&](__m256d d, __m256d ww, __m256d xx) {
      const __m256d xhat = _mm256_mul_pd(_mm256_sub_pd(xx, vmu), vrs);
      return _mm256_cvtpd_ps(_mm256_mul_pd(
          vrs, _mm256_fnmadd_pd(xhat, vb, _mm256_sub_pd(_mm256_mul_pd(d, ww), va))));
    };
    _mm256_storeu_ps(dx + i, _mm256_set_m128(half(hi(vd), hi(vw), hi(vx)),
                                             half(lo(vd), lo(vw), lo(vx))));
  }
  for (; i < n; ++i) {
    const double xhat = (x[i] - mu) * rs;
    dx[i] = float(rs * (double(dy[i]) * w[i] - a - xhat * b));
  }
}

// Column sums over rows, in parallel: each task accumulates its rows into its own double
// partials, which are then added in task order (deterministic for a given thread count).
template <class RowFn>
void column_sums(int64_t M, int64_t N, int ncols, RowFn&& fn, std::vector<double>* out) {
  int64_t tasks = std::min<int64_t>(M, 4 * num_threads());
  std::vector<std::vector<double>> part(static_cast<size_t>(tasks * ncols));
  parallel_for(0, tasks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      std::vector<double>* acc = &part[t * ncols];
      for (int c = 0; c < ncols; ++c) acc[c].assign(static_cast<size_t>(N), 0.0);
      for (int64_t r = M * t / tasks; r < M * (t + 1) / tasks; ++r) fn(r, acc);
    }
  });
  for (int c = 0; c < ncols; ++c) {
    out[c].assign(static_cast<size_t>(N), 0.0);
    for (int64_t t = 0; t < tasks; ++t) {
      for (int64_t j = 0; j < N; ++j) out[c][j] += part[t * ncols + c][j];
    }
  }
}

}  // namespace
}  // namespace detail

void layer_norm(const TensorDesc& out, const TensorDesc& mean, const TensorDesc& rstd,
                const TensorDesc& in, const TensorDesc* weight, const TensorDesc* bias,
                int normalized_ndim, double eps) {
  using namespace detail;
  Rows ro(out, normalized_ndim), ri(in, normalized_ndim), rm(mean, 0), rr(rstd, 0);
  const Rows* ins[1] = {&ri};
  dispatch_float(in.dtype, [&]<class T>() {
    const int64_t N = ri.N();
    std::vector<T> w = load_vector<T>(weight, N, T(1)), b = load_vector<T>(bias, N, T(0));
    for_each_row<T, 1>(ro, ins, 2, [&](int64_t r, const T* const* x, T* y, int64_t n) {
      double mu, m2 = 0;
      if constexpr (std::is_same_v<T, float>) {  // double lanes: the same sums, vectorised
        mu = sum_values(x[0], n) / n;
        m2 = sum_squares(x[0], n, mu);
      } else {
        double s = 0;
        for (int64_t i = 0; i < n; ++i) s += x[0][i];
        mu = s / n;
        for (int64_t i = 0; i < n; ++i) m2 += (x[0][i] - mu) * (x[0][i] - mu);
      }
      double rs = 1.0 / std::sqrt(m2 / n + eps);
      const T tm = T(mu), tr = T(rs);
      for (int64_t i = 0; i < n; ++i) y[i] = (x[0][i] - tm) * tr * w[i] + b[i];
      if (mean.data) store_scalar<T>(rm, r, mu);
      if (rstd.data) store_scalar<T>(rr, r, rs);
    });
  });
}

void layer_norm_backward(const TensorDesc* grad_input, const TensorDesc* grad_weight,
                         const TensorDesc* grad_bias, const TensorDesc& grad_output,
                         const TensorDesc& in, const TensorDesc& mean, const TensorDesc& rstd,
                         const TensorDesc* weight, int normalized_ndim) {
  using namespace detail;
  Rows rgo(grad_output, normalized_ndim), ri(in, normalized_ndim), rm(mean, 0), rr(rstd, 0);
  dispatch_float(in.dtype, [&]<class T>() {
    const int64_t M = ri.M(), N = ri.N();
    std::vector<T> w = load_vector<T>(weight, N, T(1));
    if (grad_input && grad_input->data) {
      Rows rgi(*grad_input, normalized_ndim);
      const Rows* ins[2] = {&rgo, &ri};
      for_each_row<T, 2>(rgi, ins, 4, [&](int64_t r, const T* const* v, T* dx, int64_t n) {
        const T* dy = v[0];
        const T* x = v[1];
        const double mu = load_scalar<T>(rm, r), rs = load_scalar<T>(rr, r);
        if constexpr (std::is_same_v<T, float>) {
          return layer_norm_backward_row_f32(dx, dy, x, w.data(), n, mu, rs);
        }
        double a = 0, b = 0;  // mean(g), mean(g * xhat) with g = dy * w
        for (int64_t i = 0; i < n; ++i) {
          double g = double(dy[i]) * w[i];
          a += g;
          b += g * (x[i] - mu) * rs;
        }
        a /= n, b /= n;
        for (int64_t i = 0; i < n; ++i) {
          double xhat = (x[i] - mu) * rs;
          dx[i] = T(rs * (double(dy[i]) * w[i] - a - xhat * b));
        }
      });
    }
    const bool want_w = grad_weight && grad_weight->data, want_b = grad_bias && grad_bias->data;
    if (!want_w && !want_b) return;
    std::vector<double> sums[2];
    column_sums(M, N, 2, [&](int64_t r, std::vector<double>* acc) {
      T* const buf = row_scratch<T>(N);
      const T* dy = rgo.template direct<T>(r);  // contiguous rows of T in place
      const T* x = ri.template direct<T>(r);
      if (!dy) rgo.load(r, buf), dy = buf;
      if (!x) ri.load(r, buf + N), x = buf + N;
      const double mu = load_scalar<T>(rm, r), rs = load_scalar<T>(rr, r);
      double* const aw = acc[0].data();
      double* const ab = acc[1].data();
      for (int64_t j = 0; j < N; ++j) {
        aw[j] += double(dy[j]) * (x[j] - mu) * rs;
        ab[j] += dy[j];
      }
    }, sums);
    if (want_w) Rows(*grad_weight, grad_weight->ndim).store(0, sums[0].data());
    if (want_b) Rows(*grad_bias, grad_bias->ndim).store(0, sums[1].data());
  });
}

void rms_norm(const TensorDesc& out, const TensorDesc& rstd, const TensorDesc& in,
              const TensorDesc* weight, int normalized_ndim, double eps) {
  using namespace detail;
  Rows ro(out, normalized_ndim), ri(in, normalized_ndim), rr(rstd, 0);
  const Rows* ins[1] = {&ri};
  dispatch_float(in.dtype, [&]<class T>() {
    std::vector<T> w = load_vector<T>(weight, ri.N(), T(1));
    for_each_row<T, 1>(ro, ins, 2, [&](int64_t r, const T* const* x, T* y, int64_t n) {
      double ss = 0;
      if constexpr (std::is_same_v<T, float>) {
        ss = sum_squares(x[0], n);
      } else {
        for (int64_t i = 0; i < n; ++i) ss += double(x[0][i]) * x[0][i];
      }
      double rs = 1.0 / std::sqrt(ss / n + eps);
      const T tr = T(rs);
      if constexpr (std::is_same_v<T, float>) {
        scale_mul(x[0], tr, w.data(), y, n);
      } else {
        for (int64_t i = 0; i < n; ++i) y[i] = x[0][i] * tr * w[i];
      }
      if (rstd.data) store_scalar<T>(rr, r, rs);
    });
  });
}

void rms_norm_backward(const TensorDesc* grad_input, const TensorDesc* grad_weight,
                       const TensorDesc& grad_output, const TensorDesc& in,
                       const TensorDesc& rstd, const TensorDesc* weight, int normalized_ndim) {
  using namespace detail;
  Rows rgo(grad_output, normalized_ndim), ri(in, normalized_ndim), rr(rstd, 0);
  dispatch_float(in.dtype, [&]<class T>() {
    const int64_t M = ri.M(), N = ri.N();
    std::vector<T> w = load_vector<T>(weight, N, T(1));
    if (grad_input && grad_input->data) {
      Rows rgi(*grad_input, normalized_ndim);
      const Rows* ins[2] = {&rgo, &ri};
      for_each_row<T, 2>(rgi, ins, 4, [&](int64_t r, const T* const* v, T* dx, int64_t n) {
        const T* dy = v[0];
        const T* x = v[1];
        const double rs = load_scalar<T>(rr, r);
        double b = 0;  // mean(g * xhat), g = dy * w, xhat = x * rstd
        for (int64_t i = 0; i < n; ++i) b += double(dy[i]) * w[i] * x[i] * rs;
        b /= n;
        for (int64_t i = 0; i < n; ++i) dx[i] = T(rs * (double(dy[i]) * w[i] - x[i] * rs * b));
      });
    }
    if (!grad_weight || !grad_weight->data) return;
    std::vector<double> sums[1];
    column_sums(M, N, 1, [&](int64_t r, std::vector<double>* acc) {
      T* const dy = row_scratch<T>(N);
      T* const x = dy + N;
      rgo.load(r, dy);
      ri.load(r, x);
      const double rs = load_scalar<T>(rr, r);
      for (int64_t j = 0; j < N; ++j) acc[0][j] += double(dy[j]) * x[j] * rs;
    }, sums);
    Rows(*grad_weight, grad_weight->ndim).store(0, sums[0].data());
  });
}

}  // namespace npu::kernels
