// Binary op functors (see unary_ops.h for the functor conventions and elementwise.h for the
// op table). Integer division by zero yields 0 here instead of trapping: PyTorch raises
// ZeroDivisionError for it, which is the adapter's check to make.
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>

#include "dtype_traits.h"
#include "unary_ops.h"

namespace npu::kernels::detail::ops {

// maximum/minimum propagate NaN from either side (torch.maximum semantics).
template <class T>
inline T max_nan(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  }
  return a > b ? a : b;
}
template <class T>
inline T min_nan(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  }
  return a < b ? a : b;
}

template <class T>
struct Add {
  static constexpr unsigned kTypes = kAll;
  static constexpr int kCost = 1;
  T alpha;
  Add(Scalar p0, Scalar) : alpha(scalar_as<T>(p0)) {}
  T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, bool>) return a || (alpha && b);
    else return T(a + alpha * b);
  }
};

template <class T>
struct Sub {
  static constexpr unsigned kTypes = kAllButBool;
  static constexpr int kCost = 1;
  T alpha;
  Sub(Scalar p0, Scalar) : alpha(scalar_as<T>(p0)) {}
  T operator()(T a, T b) const { return T(a - alpha * b); }
};

template <class T>
struct Mul {
  static constexpr unsigned kTypes = kAll;
  static constexpr int kCost = 1;
  T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, bool>) return a && b;
    else return T(a * b);
  }
};

// True division: floating only (PyTorch promotes integer operands to float first).
template <class T>
struct Div {
  static constexpr unsigned kTypes = kFloating;
  static constexpr int kCost = 1;
  T operator()(T a, T b) const { return a / b; }
};

template <class T>
struct DivTrunc {
  static constexpr unsigned kTypes = kAllButBool;
  static constexpr int kCost = 2;
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      return std::trunc(a / b);
    } else {
      if (b == 0) return 0;
      if constexpr (std::is_signed_v<T>) {
        if (b == T(-1)) return T(-a);  // avoids the INT_MIN / -1 trap; wraps like PyTorch
      }
      return T(a / b);
    }
  }
};

// Floor division with PyTorch's floating algorithm (div_floor_floating), which rounds the
// quotient of the exact remainder rather than flooring a / b.
template <class T>
struct DivFloor {
  static constexpr unsigned kTypes = kAllButBool;
  static constexpr int kCost = 2;
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (b == 0) return a / b;
      T mod = std::fmod(a, b);
      T div = (a - mod) / b;
      if (mod != 0 && (b < 0) != (mod < 0)) div -= T(1);
      T floordiv;
      if (div != 0) {
        floordiv = std::floor(div);
        if (div - floordiv > T(0.5)) floordiv += T(1);
      } else {
        floordiv = std::copysign(T(0), a / b);
      }
      return floordiv;
    } else {
      if (b == 0) return 0;
      if constexpr (std::is_signed_v<T>) {
        if (b == T(-1)) return T(-a);
        T q = T(a / b);
        if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
        return q;
      } else {
        return T(a / b);
      }
    }
  }
};

// Python-style remainder: the result has the sign of the divisor.
template <class T>
struct Remainder {
  static constexpr unsigned kTypes = kAllButBool;
  static constexpr int kCost = 2;
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      T mod = std::fmod(a, b);
      if (mod != 0 && ((b < 0) != (mod < 0))) mod += b;
      return mod;
    } else {
      if (b == 0) return 0;
      if constexpr (std::is_signed_v<T>) {
        if (b == T(-1)) return 0;
        T r = T(a % b);
        if (r != 0 && ((r < 0) != (b < 0))) r = T(r + b);
        return r;
      } else {
        return T(a % b);
      }
    }
  }
};

// C-style remainder: the result has the sign of the dividend.
template <class T>
struct Fmod {
  static constexpr unsigned kTypes = kAllButBool;
  static constexpr int kCost = 2;
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      return std::fmod(a, b);
    } else {
      if (b == 0) return 0;
      if constexpr (std::is_signed_v<T>) {
        if (b == T(-1)) return 0;
      }
      return T(a % b);
    }
  }
};

template <class T>
struct Maximum {
  static constexpr unsigned kTypes = kAll;
  static constexpr int kCost = 1;
  T operator()(T a, T b) const { return max_nan(a, b); }
};

template <class T>
struct Minimum {
  static constexpr unsigned kTypes = kAll;
  static constexpr int kCost = 1;
  T operator()(T a, T b) const { return min_nan(a, b); }
};

// Integer pow by squaring. Negative exponents: only |base| == 1 survives (PyTorch rejects
// integer tensors to negative integer powers; the kernel returns the value 1/base^e truncates to).
template <class T>
inline T int_pow(T base, T exp) {
  if constexpr (std::is_signed_v<T>) {
    if (exp < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exp % 2 == 0) ? T(1) : T(-1);
      return 0;
    }
  }
  using U = std::make_unsigned_t<T>;  // wrap on overflow without UB
  U result = 1, b = static_cast<U>(base);
  auto e = static_cast<std::make_unsigned_t<T>>(exp);
  while (e) {
    if (e & 1) result = U(result * b);
    b = U(b * b);
    e >>= 1;
  }
  return static_cast<T>(result);
}

template <class T>
struct Pow {
  static constexpr unsigned kTypes = kAllButBool;
  static constexpr int kCost = 8;
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) return std::pow(a, b);
    else return int_pow(a, b);
  }
};

template <class T>
struct Atan2 {
  static constexpr unsigned kTypes = kFloating;
  static constexpr int kCost = 8;
  T operator()(T a, T b) const { return std::atan2(a, b); }
};

template <class T>
struct Hypot {
  static constexpr unsigned kTypes = kFloating;
  static constexpr int kCost = 4;
  T operator()(T a, T b) const { return std::hypot(a, b); }
};

template <class T>
struct Copysign {
  static constexpr unsigned kTypes = kFloating;
  static constexpr int kCost = 1;
  T operator()(T a, T b) const { return std::copysign(a, b); }
};

#define NPU_COMPARE_OP(Name, expr)                  \
  template <class T>                                \
  struct Name {                                     \
    static constexpr unsigned kTypes = kAll;        \
    static constexpr int kCost = 1;                 \
    bool operator()(T a, T b) const { return expr; } \
  };
NPU_COMPARE_OP(Eq, a == b)
NPU_COMPARE_OP(Ne, a != b)
NPU_COMPARE_OP(Lt, a < b)
NPU_COMPARE_OP(Le, a <= b)
NPU_COMPARE_OP(Gt, a > b)
NPU_COMPARE_OP(Ge, a >= b)
NPU_COMPARE_OP(LogicalAnd, (a != T(0)) && (b != T(0)))
NPU_COMPARE_OP(LogicalOr, (a != T(0)) || (b != T(0)))
NPU_COMPARE_OP(LogicalXor, (a != T(0)) != (b != T(0)))
#undef NPU_COMPARE_OP

#define NPU_BITWISE_OP(Name, op)                                 \
  template <class T>                                             \
  struct Name {                                                  \
    static constexpr unsigned kTypes = kIntegralAndBool;         \
    static constexpr int kCost = 1;                              \
    T operator()(T a, T b) const { return T(a op b); }           \
  };
NPU_BITWISE_OP(BitwiseAnd, &)
NPU_BITWISE_OP(BitwiseOr, |)
NPU_BITWISE_OP(BitwiseXor, ^)
#undef NPU_BITWISE_OP

// Shifts by a negative amount or by >= the bit width give 0 (left) or the sign (right), as in
// PyTorch, instead of C++'s undefined behaviour.
template <class T>
struct ShiftLeft {
  static constexpr unsigned kTypes = kIntegral;
  static constexpr int kCost = 1;
  T operator()(T a, T b) const {
    constexpr T kBits = T(sizeof(T) * 8);
    if (b < 0 || b >= kBits) return 0;
    return static_cast<T>(static_cast<std::make_unsigned_t<T>>(a) << b);
  }
};

template <class T>
struct ShiftRight {
  static constexpr unsigned kTypes = kIntegral;
  static constexpr int kCost = 1;
  T operator()(T a, T b) const {
    constexpr T kBits = T(sizeof(T) * 8);
    if (b < 0 || b >= kBits) return a < 0 ? T(-1) : T(0);
    return T(a >> b);
  }
};

// ---- activation backward: a = grad_output ----------------------------------------------

template <class T>
struct ThresholdBackward {  // b = self
  static constexpr unsigned kTypes = kAllButBool;
  static constexpr int kCost = 1;
  T threshold;
  ThresholdBackward(Scalar p0, Scalar) : threshold(scalar_as<T>(p0)) {}
  T operator()(T g, T x) const { return x <= threshold ? T(0) : g; }
};

template <class T>
struct LeakyReluBackward {  // b = self
  static constexpr unsigned kTypes = kFloating;
  static constexpr int kCost = 1;
  T slope;
  LeakyReluBackward(Scalar p0, Scalar) : slope(scalar_as<T>(p0)) {}
  T operator()(T g, T x) const { return x > T(0) ? g : g * slope; }
};

template <class T>
struct GeluBackward {  // b = self
  static constexpr unsigned kTypes = kFloating;
  static constexpr int kCost = 8;
  T operator()(T g, T x) const {
    T cdf = T(0.5) * (T(1) + std::erf(x * T(M_SQRT1_2)));
    T pdf = std::exp(T(-0.5) * x * x) * T(0.3989422804014327);  // 1/sqrt(2 pi)
    return g * (cdf + x * pdf);
  }
  // The same formula 8 lanes at a time (scalar erf / exp were most of a GPT step's backward
  // GELU).
  void apply(float* out, int64_t n, const float* g, const float* x) const
    requires std::is_same_v<T, float>
  {
    if (has_avx512()) {  // 16 lanes, the same arithmetic per element (vec_math.h)
      return map16_2(out, g, x, n, [](__m512 vg, __m512 vx) NPU_AVX512 {
        const __m512 half = _mm512_set1_ps(0.5f);
        const __m512 cdf = _mm512_mul_ps(
            half, _mm512_add_ps(_mm512_set1_ps(1.0f),
                                erf512(_mm512_mul_ps(vx, _mm512_set1_ps(float(M_SQRT1_2))))));
        const __m512 pdf = _mm512_mul_ps(
            exp512(_mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(-0.5f), vx), vx)),
            _mm512_set1_ps(0.3989422804014327f));
        return _mm512_mul_ps(vg, _mm512_fmadd_ps(vx, pdf, cdf));
      });
    }
    map8_2(out, g, x, n, [](__m256 vg, __m256 vx) {
      const __m256 half = _mm256_set1_ps(0.5f);
      const __m256 cdf = _mm256_mul_ps(
          half, _mm256_add_ps(_mm256_set1_ps(1.0f),
                              erf256(_mm256_mul_ps(vx, _mm256_set1_ps(float(M_SQRT1_2))))));
      const __m256 pdf = _mm256_mul_ps(
          exp256(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(-0.5f), vx), vx)),
          _mm256_set1_ps(0.3989422804014327f));
      return _mm256_mul_ps(vg, _mm256_fmadd_ps(vx, pdf, cdf));
    });
  }
};

template <class T>
struct GeluTanhBackward {  // b = self
  static constexpr unsigned kTypes = kFloating;
  static constexpr int kCost = 8;
  T operator()(T g, T x) const {
    const T beta = T(0.7978845608028654), kappa = T(0.044715);
    T x2 = x * x;
    T t = std::tanh(beta * (x + kappa * x2 * x));
    T left = T(0.5) * x, right = T(1) + t;
    T left_d = T(0.5) * right;
    T right_d = left * (T(1) - t * t) * beta * (T(1) + T(3) * kappa * x2);
    return g * (left_d + right_d);
  }
  void apply(float* out, int64_t n, const float* g, const float* x) const
    requires std::is_same_v<T, float>
  {
    map8_2(out, g, x, n, [](__m256 vg, __m256 vx) {
      const __m256 beta = _mm256_set1_ps(0.7978845608028654f), kappa = _mm256_set1_ps(0.044715f);
      const __m256 one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f);
      const __m256 x2 = _mm256_mul_ps(vx, vx);
      const __m256 t = tanh256(
          _mm256_mul_ps(beta, _mm256_add_ps(vx, _mm256_mul_ps(_mm256_mul_ps(kappa, x2), vx))));
      const __m256 left_d = _mm256_mul_ps(half, _mm256_add_ps(one, t));
      const __m256 sech2 = _mm256_sub_ps(one, _mm256_mul_ps(t, t));
      const __m256 inner_d =
          _mm256_add_ps(one, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(3.0f), kappa), x2));
      const __m256 right_d =
          _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(half, vx), sech2), beta),
                        inner_d);
      return _mm256_mul_ps(vg, _mm256_add_ps(left_d, right_d));
    });
  }
};

template <class T>
struct SiluBackward {  // b = self
  static constexpr unsigned kTypes = kFloating;
  static constexpr int kCost = 4;
  T operator()(T g, T x) const {
    T s = T(1) / (T(1) + std::exp(-x));
    return g * s * (T(1) + x * (T(1) - s));
  }
  // 8 lanes at a time through sigmoid256, as the forward Silu (the scalar exp was 0.5 ms of a
  // 350k-element MLP's backward).
  void apply(float* out, int64_t n, const float* g, const float* x) const
    requires std::is_same_v<T, float>
  {
    if (has_avx512()) {  // 16 lanes, the same arithmetic per element (vec_math.h)
      return map16_2(out, g, x, n, [](__m512 vg, __m512 vx) NPU_AVX512 {
        const __m512 one = _mm512_set1_ps(1.0f);
        const __m512 s = sigmoid512(vx);
        return _mm512_mul_ps(_mm512_mul_ps(vg, s),
                             _mm512_fmadd_ps(vx, _mm512_sub_ps(one, s), one));
      });
    }
    map8_2(out, g, x, n, [](__m256 vg, __m256 vx) {
      const __m256 one = _mm256_set1_ps(1.0f);
      const __m256 s = sigmoid256(vx);
      return _mm256_mul_ps(_mm256_mul_ps(vg, s),
                           _mm256_fmadd_ps(vx, _mm256_sub_ps(one, s), one));
    });
  }
};

template <class T>
struct SigmoidBackward {  // b = output
  static constexpr unsigned kTypes = kFloating;
  static constexpr int kCost = 1;
  T operator()(T g, T y) const { return g * (T(1) - y) * y; }
};

template <class T>
struct TanhBackward {  // b = output
  static constexpr unsigned kTypes = kFloating;
  static constexpr int kCost = 1;
  T operator()(T g, T y) const { return g * (T(1) - y * y); }
};

}  // namespace npu::kernels::detail::ops
