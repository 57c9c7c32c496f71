// Unary op functors: one small struct per op (see elementwise.h for the op table).
//   kTypes: the compute types the op accepts (TypeMask);
//   kCost: rough work per element, which sets the parallel grain;
//   operator()(T) -> R: the math; R != T for predicates (bool);
//   optional apply(out, n, in): a hand-vectorised float32 body for the costly ops;
//   a (Scalar, Scalar) constructor for ops with parameters.
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>

#include "dtype_traits.h"
#include "vec_math.h"

namespace npu::kernels::detail::ops {

template <class T>
inline bool isnan_(T x) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(x);
  else return false;
}

#define NPU_FLOAT_UNARY(Name, expr)                      \
  template <class T>                                     \
  struct Name {                                          \
    static constexpr unsigned kTypes = kFloating;        \
    static constexpr int kCost = 8;                      \
    T operator()(T x) const { return expr; }             \
  };

NPU_FLOAT_UNARY(Reciprocal, T(1) / x)
NPU_FLOAT_UNARY(Sqrt, std::sqrt(x))
NPU_FLOAT_UNARY(Rsqrt, T(1) / std::sqrt(x))
NPU_FLOAT_UNARY(Exp2, std::exp2(x))
NPU_FLOAT_UNARY(Expm1, std::expm1(x))
NPU_FLOAT_UNARY(Log, std::log(x))
NPU_FLOAT_UNARY(Log2, std::log2(x))
NPU_FLOAT_UNARY(Log10, std::log10(x))
NPU_FLOAT_UNARY(Log1p, std::log1p(x))
NPU_FLOAT_UNARY(Sin, std::sin(x))
NPU_FLOAT_UNARY(Cos, std::cos(x))
NPU_FLOAT_UNARY(Tan, std::tan(x))
NPU_FLOAT_UNARY(Asin, std::asin(x))
NPU_FLOAT_UNARY(Acos, std::acos(x))
NPU_FLOAT_UNARY(Atan, std::atan(x))
NPU_FLOAT_UNARY(Sinh, std::sinh(x))
NPU_FLOAT_UNARY(Cosh, std::cosh(x))
NPU_FLOAT_UNARY(Asinh, std::asinh(x))
NPU_FLOAT_UNARY(Acosh, std::acosh(x))
NPU_FLOAT_UNARY(Atanh, std::atanh(x))
NPU_FLOAT_UNARY(Erf, std::erf(x))
NPU_FLOAT_UNARY(Erfc, std::erfc(x))
NPU_FLOAT_UNARY(Frac, x - std::trunc(x))
NPU_FLOAT_UNARY(Mish, x * std::tanh(std::log1p(std::exp(x))))
NPU_FLOAT_UNARY(Hardsigmoid, std::min(std::max(x + T(3), T(0)), T(6)) / T(6))
NPU_FLOAT_UNARY(Hardswish, x * std::min(std::max(x + T(3), T(0)), T(6)) / T(6))
#undef NPU_FLOAT_UNARY

// lgamma_r: the plain lgamma writes the global `signgam`, a data race between threads.
template <class T>
struct Lgamma {
  static constexpr unsigned kTypes = kFloating;
  static constexpr int kCost = 16;
  T operator()(T x) const {
    int sign;
    if constexpr (std::is_same_v<T, float>) return ::lgammaf_r(x, &sign);
    else return ::lgamma_r(x, &sign);
  }
};

template <class T>
struct Exp {
  static constexpr unsigned kTypes = kFloating;
  static constexpr int kCost = 4;
  T operator()(T x) const { return std::exp(x); }
  void apply(float* out, int64_t n, const float* in) const requires std::is_same_v<T, float> {
    if (has_avx512()) return map16(out, in, n, [](__m512 x) NPU_AVX512 { return exp512(x); });
    map8(out, in, n, exp256);
  }
};

template <class T>
struct Tanh {
  static constexpr unsigned kTypes = kFloating;
  static constexpr int kCost = 4;
  T operator()(T x) const { return std::tanh(x); }
  void apply(float* out, int64_t n, const float* in) const requires std::is_same_v<T, float> {
    map8(out, in, n, tanh256);
  }
};

template <class T>
struct Sigmoid {
  static constexpr unsigned kTypes = kFloating;
  static constexpr int kCost = 4;
  T operator()(T x) const { return T(1) / (T(1) + std::exp(-x)); }
  void apply(float* out, int64_t n, const float* in) const requires std::is_same_v<T, float> {
    if (has_avx512()) {
      return map16(out, in, n, [](__m512 x) NPU_AVX512 { return sigmoid512(x); });
    }
    map8(out, in, n, sigmoid256);
  }
};

template <class T>
struct Silu {
  static constexpr unsigned kTypes = kFloating;
  static constexpr int kCost = 4;
  T operator()(T x) const { return x / (T(1) + std::exp(-x)); }
  void apply(float* out, int64_t n, const float* in) const requires std::is_same_v<T, float> {
    if (has_avx512()) {  // 16 lanes, the same arithmetic per element (vec_math.h)
      return map16(out, in, n,
                   [](__m512 x) NPU_AVX512 { return _mm512_mul_ps(x, sigmoid512(x)); });
    }
    map8(out, in, n, [](__m256 x) { return _mm256_mul_ps(x, sigmoid256(x)); });
  }
};

// gelu(x) = x / 2 (1 + erf(x / sqrt(2))); float32 through erf256 (the CPU's formula). The
// float32 body gives what the CPU device's vectorised GELU gives (the loop every contiguous
// tensor of two or more elements takes there, float16 and bfloat16 through float32): x (1 +
// erf) is formed before it is halved, so inputs from 2^127 up overflow to inf, and gelu(+inf)
// is NaN. The CPU's scalar loop (one element, or a strided view) gives x and inf for those: its
// results depend on the layout; ours follow the common one. float64 matches both (operator()).
template <class T>
struct Gelu {
  static constexpr unsigned kTypes = kFloating;
  static constexpr int kCost = 4;
  T operator()(T x) const { return x * T(0.5) * (T(1) + std::erf(x * T(M_SQRT1_2))); }
  void apply(float* out, int64_t n, const float* in) const requires std::is_same_v<T, float> {
    if (has_avx512()) {  // 16 lanes, the same arithmetic per element (vec_math.h)
      return map16(out, in, n, [](__m512 x) NPU_AVX512 {
        const __m512 cdf = _mm512_add_ps(
            _mm512_set1_ps(1.0f), erf512(_mm512_mul_ps(x, _mm512_set1_ps(float(M_SQRT1_2)))));
        const __m512 y = _mm512_mul_ps(_mm512_mul_ps(x, cdf), _mm512_set1_ps(0.5f));
        const __mmask16 pos_inf = _mm512_cmp_ps_mask(x, _mm512_set1_ps(INFINITY), _CMP_EQ_OQ);
        return _mm512_mask_mov_ps(y, pos_inf, _mm512_set1_ps(NAN));
      });
    }
    map8(out, in, n, [](__m256 x) {
      const __m256 cdf = _mm256_add_ps(
          _mm256_set1_ps(1.0f), erf256(_mm256_mul_ps(x, _mm256_set1_ps(float(M_SQRT1_2)))));
      const __m256 y = _mm256_mul_ps(_mm256_mul_ps(x, cdf), _mm256_set1_ps(0.5f));
      const __m256 pos_inf = _mm256_cmp_ps(x, _mm256_set1_ps(INFINITY), _CMP_EQ_OQ);
      return _mm256_blendv_ps(y, _mm256_set1_ps(NAN), pos_inf);
    });
  }
};

// gelu(approximate='tanh') = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
template <class T>
struct GeluTanh {
  static constexpr unsigned kTypes = kFloating;
  static constexpr int kCost = 4;
  static constexpr double kBeta = 0.7978845608028654;  // sqrt(2/pi)
  static constexpr double kKappa = 0.044715;
  T operator()(T x) const {
    T inner = T(kBeta) * (x + T(kKappa) * x * x * x);
    return T(0.5) * x * (T(1) + std::tanh(inner));
  }
  void apply(float* out, int64_t n, const float* in) const requires std::is_same_v<T, float> {
    map8(out, in, n, [](__m256 x) {
      __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
      __m256 inner = _mm256_mul_ps(_mm256_set1_ps(float(kBeta)),
                                   _mm256_fmadd_ps(_mm256_set1_ps(float(kKappa)), x3, x));
      __m256 t = _mm256_add_ps(_mm256_set1_ps(1.0f), tanh256(inner));
      return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), t);
    });
  }
};

template <class T>
struct Neg {
  static constexpr unsigned kTypes = kAllButBool;
  static constexpr int kCost = 1;
  T operator()(T x) const { return T(-x); }
};

template <class T>
struct Abs {
  static constexpr unsigned kTypes = kAllButBool;
  static constexpr int kCost = 1;
  T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return std::fabs(x);
    else if constexpr (std::is_unsigned_v<T>) return x;
    else return x < 0 ? T(-x) : x;
  }
};

// sign(NaN) = 0 in PyTorch's CPU kernel, which is what (0 < x) - (x < 0) gives.
template <class T>
struct Sign {
  static constexpr unsigned kTypes = kAllButBool;
  static constexpr int kCost = 1;
  T operator()(T x) const { return T((T(0) < x) - (x < T(0))); }
};

template <class T>
struct Square {
  static constexpr unsigned kTypes = kAllButBool;
  static constexpr int kCost = 1;
  T operator()(T x) const { return T(x * x); }
};

// pow(x, e) for an integer exponent e (p0.i; the adapter sends |e| <= 64 here): 3 and -2 as the
// CPU device computes them (x * x * x, 1 / (x * x) in float); float32 and the 16-bit types
// otherwise as x^|e| by squaring in double, then 1 / that for e < 0, rounded once. Each
// double product errs by at most 2^-53, so the result is within 2|e| * 2^-53 of the true power
// before its one rounding to float: std::pow's result to the float ulp (the CPU device's pow
// takes x*x*x, 1/x, ... for a few exponents and std::pow for the rest). x^0 is never sent (the
// CPU gives 1 even for NaN; that is ones_like). float64 keeps std::pow.
template <class T>
struct PowInt {
  static constexpr unsigned kTypes = kFloating;
  static constexpr int kCost = 2;
  int64_t e;
  PowInt(Scalar p0, Scalar) : e(p0.i) {}
  T operator()(T x) const {
    if constexpr (std::is_same_v<T, double>) {
      return std::pow(x, static_cast<double>(e));
    } else {
      if (e == 3) return x * x * x;  // the CPU device's own formulas for 3 and -2
      if (e == -2) return T(1) / (x * x);
      double b = x, r = 1.0;
      for (uint64_t k = e < 0 ? uint64_t(0) - uint64_t(e) : uint64_t(e); k; k >>= 1) {
        if (k & 1) r *= b;
        b *= b;
      }
      return static_cast<T>(e < 0 ? 1.0 / r : r);
    }
  }
  // 4 + 4 double lanes, the same products in the same order as operator().
  void apply(float* out, int64_t n, const float* in) const requires std::is_same_v<T, float> {
    const int64_t ex = e;
    if (ex == 3) {  // float products, as operator(): vectorised by the compiler
      for (int64_t i = 0; i < n; ++i) out[i] = in[i] * in[i] * in[i];
      return;
    }
    if (ex == -2) {
      for (int64_t i = 0; i < n; ++i) out[i] = 1.0f / (in[i] * in[i]);
      return;
    }
    map8(out, in, n, [ex](__m256 x) {
      const __m256d one = _mm256_set1_pd(1.0);
      __m256d b0 = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
      __m256d b1 = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
      __m256d r0 = one, r1 = one;
      for (uint64_t k = ex < 0 ? uint64_t(0) - uint64_t(ex) : uint64_t(ex); k; k >>= 1) {
        if (k & 1) r0 = _mm256_mul_pd(r0, b0), r1 = _mm256_mul_pd(r1, b1);
        b0 = _mm256_mul_pd(b0, b0);
        b1 = _mm256_mul_pd(b1, b1);
      }
      if (ex < 0) r0 = _mm256_div_pd(one, r0), r1 = _mm256_div_pd(one, r1);
      return _mm256_set_m128(_mm256_cvtpd_ps(r1), _mm256_cvtpd_ps(r0));
    });
  }
};

// floor/ceil/round/trunc are the identity on integers (PyTorch allows them there).
#define NPU_ROUNDING_UNARY(Name, fn)                                   \
  template <class T>                                                   \
  struct Name {                                                        \
    static constexpr unsigned kTypes = kAllButBool;                    \
    static constexpr int kCost = 1;                                    \
    T operator()(T x) const {                                          \
      if constexpr (std::is_floating_point_v<T>) return fn(x);         \
      else return x;                                                   \
    }                                                                  \
  };
NPU_ROUNDING_UNARY(Floor, std::floor)
NPU_ROUNDING_UNARY(Ceil, std::ceil)
NPU_ROUNDING_UNARY(Round, std::nearbyint)  // half to even under the default rounding mode
NPU_ROUNDING_UNARY(Trunc, std::trunc)
#undef NPU_ROUNDING_UNARY

// relu(NaN) = NaN, as PyTorch's clamp_min(0) gives.
template <class T>
struct Relu {
  static constexpr unsigned kTypes = kAllButBool;
  static constexpr int kCost = 1;
  T operator()(T x) const { return (x > T(0) || isnan_(x)) ? x : T(0); }
};

template <class T>
struct LeakyRelu {
  static constexpr unsigned kTypes = kFloating;
  static constexpr int kCost = 1;
  T slope;
  LeakyRelu(Scalar p0, Scalar) : slope(scalar_as<T>(p0)) {}
  T operator()(T x) const { return x > T(0) ? x : x * slope; }
};

template <class T>
struct Elu {
  static constexpr unsigned kTypes = kFloating;
  static constexpr int kCost = 8;
  T alpha;
  Elu(Scalar p0, Scalar) : alpha(scalar_as<T>(p0)) {}
  T operator()(T x) const { return x > T(0) ? x : alpha * std::expm1(x); }
};

template <class T>
struct Softplus {
  static constexpr unsigned kTypes = kFloating;
  static constexpr int kCost = 8;
  T beta, threshold;
  Softplus(Scalar p0, Scalar p1) : beta(scalar_as<T>(p0)), threshold(scalar_as<T>(p1)) {}
  T operator()(T x) const {
    return x * beta > threshold ? x : std::log1p(std::exp(x * beta)) / beta;
  }
};

// clamp(x, min, max) = min(max(x, lo), hi); NaN in x propagates.
template <class T>
struct Clamp {
  static constexpr unsigned kTypes = kAllButBool;
  static constexpr int kCost = 1;
  T lo, hi;
  Clamp(Scalar p0, Scalar p1) : lo(scalar_as<T>(p0)), hi(scalar_as<T>(p1)) {}
  T operator()(T x) const {
    if (isnan_(x)) return x;
    return x < lo ? lo : (x > hi ? hi : x);
  }
};

template <class T>
struct LogicalNot {
  static constexpr unsigned kTypes = kAll;
  static constexpr int kCost = 1;
  bool operator()(T x) const { return !(x != T(0)); }
};

template <class T>
struct BitwiseNot {
  static constexpr unsigned kTypes = kIntegralAndBool;
  static constexpr int kCost = 1;
  T operator()(T x) const {
    if constexpr (std::is_same_v<T, bool>) return !x;
    else return T(~x);
  }
};

template <class T>
struct IsNan {
  static constexpr unsigned kTypes = kAll;
  static constexpr int kCost = 1;
  bool operator()(T x) const { return isnan_(x); }
};

template <class T>
struct IsInf {
  static constexpr unsigned kTypes = kAll;
  static constexpr int kCost = 1;
  bool operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return std::isinf(x);
    else return false;
  }
};

template <class T>
struct IsFinite {
  static constexpr unsigned kTypes = kAll;
  static constexpr int kCost = 1;
  bool operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return std::isfinite(x);
    else return true;
  }
};

}  // namespace npu::kernels::detail::ops
