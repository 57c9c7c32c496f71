// AVX2 float32 versions of the transcendental functions that dominate common kernels (exp and
// what is built on it: sigmoid, silu, tanh, softmax). Scalar libm calls do not vectorise;
// these run 8 lanes at a time and stay within ~2 ulp of libm over the float range.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace npu::kernels::detail {

// exp(x): Cephes' range reduction x = n*ln2 + r, |r| <= ln2/2, and a degree-5 polynomial.
// Inputs below ln(FLT_MIN) flush to 0 (the true result is subnormal); above ln(FLT_MAX) +inf.
inline __m256 exp256(__m256 x) {
  const __m256 kHi = _mm256_set1_ps(88.72283935546875f);
  const __m256 kLo = _mm256_set1_ps(-87.33654022216797f);
  __m256 xc = _mm256_min_ps(_mm256_max_ps(x, kLo), kHi);
  __m256 fx = _mm256_floor_ps(
      _mm256_fmadd_ps(xc, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n as 2 * 2^(n-1) so that n = 128 (x near ln(FLT_MAX)) does not overflow the exponent.
  __m256i n = _mm256_cvtps_epi32(fx);
  __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(126)), 23);
  __m256 res = _mm256_mul_ps(_mm256_add_ps(y, y), _mm256_castsi256_ps(bits));
  res = _mm256_blendv_ps(res, _mm256_setzero_ps(), _mm256_cmp_ps(x, kLo, _CMP_LT_OQ));
  res = _mm256_blendv_ps(res, _mm256_set1_ps(__builtin_inff()), _mm256_cmp_ps(x, kHi, _CMP_GT_OQ));
  return _mm256_blendv_ps(res, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));  // NaN stays NaN
}

inline __m256 sigmoid256(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return _mm256_div_ps(one, _mm256_add_ps(one, e));
}

// tanh: an odd Taylor polynomial near 0 (where 1 - 2/(e^2x + 1) would cancel), else that.
inline __m256 tanh256(__m256 x) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 ax = _mm256_andnot_ps(sign, x);
  __m256 e = exp256(_mm256_add_ps(ax, ax));
  __m256 big = _mm256_sub_ps(_mm256_set1_ps(1.0f),
                             _mm256_div_ps(_mm256_set1_ps(2.0f),
                                           _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
  big = _mm256_or_ps(big, _mm256_and_ps(sign, x));
  __m256 x2 = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(21844.0f / 6081075.0f);
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-1382.0f / 155925.0f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(62.0f / 2835.0f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-17.0f / 315.0f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(2.0f / 15.0f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-1.0f / 3.0f));
  __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, x2), x, x);
  return _mm256_blendv_ps(big, small, _mm256_cmp_ps(ax, _mm256_set1_ps(0.4f), _CMP_LT_OQ));
}

// erf(x) by Abramowitz & Stegun 7.1.26: sign(x) (1 - t (a1 + t (a2 + ... a5)) e^{-x^2}),
// t = 1 / (1 + p |x|); absolute error <= 1.5e-7 (about one float ulp near +-1, coarser in
// relative terms near 0). The same formula as PyTorch's vectorised CPU erf, so GELU built on
// it agrees with the CPU's to float rounding; the Erf op itself keeps libm's erf.
inline __m256 erf256(__m256 x) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 one = _mm256_set1_ps(1.0f);
  __m256 ax = _mm256_andnot_ps(sign, x);
  __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(0.3275911f), ax, one));
  __m256 p = _mm256_set1_ps(1.061405429f);
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.453152027f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.421413741f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.284496736f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.254829592f));
  __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(ax, ax)));
  __m256 r = _mm256_fnmadd_ps(_mm256_mul_ps(p, t), e, one);
  r = _mm256_or_ps(r, _mm256_and_ps(sign, x));
  return _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));  // NaN stays NaN
}

// out[i] = f(in[i]) with an 8-lane f; the tail goes through a padded vector so that every
// element gets exactly the same arithmetic.
template <class F>
inline void map8(float* out, const float* in, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, f(_mm256_loadu_ps(in + i)));
  if (i < n) {
    alignas(32) float tmp[8] = {};
    std::memcpy(tmp, in + i, (n - i) * sizeof(float));
    _mm256_store_ps(tmp, f(_mm256_load_ps(tmp)));
    std::memcpy(out + i, tmp, (n - i) * sizeof(float));
  }
}

// out[i] = f(a[i], b[i]) with an 8-lane f, the tail through padded vectors (as map8).
template <class F>
inline void map8_2(float* out, const float* a, const float* b, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, f(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  }
  if (i < n) {
    alignas(32) float ta[8] = {}, tb[8] = {};
    std::memcpy(ta, a + i, (n - i) * sizeof(float));
    std::memcpy(tb, b + i, (n - i) * sizeof(float));
    _mm256_store_ps(ta, f(_mm256_load_ps(ta), _mm256_load_ps(tb)));
    std::memcpy(out + i, ta, (n - i) * sizeof(float));
  }
}

// sum(x[i] - shift)^2 accumulated in double (4 + 4 lanes): the row statistic of RMS norms
// (shift 0) and layer norms (shift = the row's mean).
inline double sum_squares(const float* x, int64_t n, double shift = 0.0) {
  const __m256d c = _mm256_set1_pd(shift);
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    __m256d lo = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), c);
    __m256d hi = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), c);
    a0 = _mm256_fmadd_pd(lo, lo, a0);
    a1 = _mm256_fmadd_pd(hi, hi, a1);
  }
  alignas(32) double t[4];
  _mm256_store_pd(t, _mm256_add_pd(a0, a1));
  double s = (t[0] + t[1]) + (t[2] + t[3]);
  for (; i < n; ++i) s += (double(x[i]) - shift) * (double(x[i]) - shift);
  return s;
}

// sum(x[i]) accumulated in double (4 + 4 lanes).
inline double sum_values(const float* x, int64_t n) {
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
  }
  alignas(32) double t[4];
  _mm256_store_pd(t, _mm256_add_pd(a0, a1));
  double s = (t[0] + t[1]) + (t[2] + t[3]);
  for (; i < n; ++i) s += x[i];
  return s;
}

// sum(dy[i] * (x[i] - shift)) accumulated in double (4 + 4 lanes): batch norm backward's
// projection of the output gradient on the centred input.
inline double sum_products(const float* dy, const float* x, int64_t n, double shift) {
  const __m256d c = _mm256_set1_pd(shift);
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 g = _mm256_loadu_ps(dy + i), v = _mm256_loadu_ps(x + i);
    __m256d lo = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), c);
    __m256d hi = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), c);
    a0 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(g)), lo, a0);
    a1 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(g, 1)), hi, a1);
  }
  alignas(32) double t[4];
  _mm256_store_pd(t, _mm256_add_pd(a0, a1));
  double s = (t[0] + t[1]) + (t[2] + t[3]);
  for (; i < n; ++i) s += double(dy[i]) * (double(x[i]) - shift);
  return s;
}

// y[i] = (x[i] * a) * w[i], the same rounding as the scalar expression.
inline void scale_mul(const float* x, float a, const float* w, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), va),
                                          _mm256_loadu_ps(w + i)));
  }
  for (; i < n; ++i) y[i] = x[i] * a * w[i];
}

// ---- AVX-512 twins ----------------------------------------------------------------------
// The library's baseline is AVX2 (kernels/CMakeLists.txt); these 16-lane versions are only
// called behind has_avx512(). Each does, lane by lane, exactly the operations of its 8-lane
// twin above (same constants, same order, same rounding), so an element's result does not
// depend on which path ran; only sums over many lanes change their order of addition.
#define NPU_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,fma")))

inline bool has_avx512() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw");
  return ok;
}

NPU_AVX512 inline __m512 exp512(__m512 x) {
  const __m512 kHi = _mm512_set1_ps(88.72283935546875f);
  const __m512 kLo = _mm512_set1_ps(-87.33654022216797f);
  __m512 xc = _mm512_min_ps(_mm512_max_ps(x, kLo), kHi);
  __m512 fx = _mm512_roundscale_ps(
      _mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f)),
      _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  __m512i n = _mm512_cvtps_epi32(fx);
  __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(n, _mm512_set1_epi32(126)), 23);
  __m512 res = _mm512_mul_ps(_mm512_add_ps(y, y), _mm512_castsi512_ps(bits));
  res = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, kLo, _CMP_LT_OQ), res, _mm512_setzero_ps());
  res = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, kHi, _CMP_GT_OQ), res,
                             _mm512_set1_ps(__builtin_inff()));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), res, x);  // NaN stays NaN
}

NPU_AVX512 inline __m512 sigmoid512(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), x));
  return _mm512_div_ps(one, _mm512_add_ps(one, e));
}

// erf256's formula and order of operations on 16 lanes.
NPU_AVX512 inline __m512 erf512(__m512 x) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 ax = _mm512_andnot_ps(sign, x);
  __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(_mm512_set1_ps(0.3275911f), ax, one));
  __m512 p = _mm512_set1_ps(1.061405429f);
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.453152027f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.421413741f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.284496736f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.254829592f));
  __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(ax, ax)));
  __m512 r = _mm512_fnmadd_ps(_mm512_mul_ps(p, t), e, one);
  r = _mm512_or_ps(r, _mm512_and_ps(sign, x));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), r, x);  // NaN stays NaN
}

// The first k of 16 lanes, k >= 0; all 16 for k >= 16 (a row's remaining length may be passed
// as it is).
NPU_AVX512 inline __mmask16 tail_mask16(int64_t k) {
  return static_cast<__mmask16>(k >= 16 ? 0xFFFFu : (1u << k) - 1u);
}

// map8 / map8_2 on 16 lanes; the tail is a masked load and store (the masked-off lanes read as
// 0 and are computed but never written, as map8's padding).
template <class F>
NPU_AVX512 inline void map16(float* out, const float* in, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, f(_mm512_loadu_ps(in + i)));
  if (i < n) {
    const __mmask16 m = tail_mask16(n - i);
    _mm512_mask_storeu_ps(out + i, m, f(_mm512_maskz_loadu_ps(m, in + i)));
  }
}

template <class F>
NPU_AVX512 inline void map16_2(float* out, const float* a, const float* b, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(out + i, f(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
  }
  if (i < n) {
    const __mmask16 m = tail_mask16(n - i);
    _mm512_mask_storeu_ps(out + i, m,
                          f(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
  }
}

inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float hmax256(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace npu::kernels::detail
