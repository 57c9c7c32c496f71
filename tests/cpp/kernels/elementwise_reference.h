// Naive scalar references (double / int64) and input domains for every elementwise op in the
// tables of npu/kernels/elementwise.h. Adding an op: give it a case here (the harness in
// elementwise_test.cpp fails for an op without one).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

#include "npu/kernels.h"

namespace ktest {

using npu::kernels::BinaryOp;
using npu::kernels::Scalar;
using npu::kernels::TernaryOp;
using npu::kernels::UnaryOp;

struct Domain {
  double lo = -5, hi = 5;
  bool quarters = false;  // values on a 0.25 grid: exact in every dtype, for discontinuous ops
  bool special = false;   // mix in NaN / +-inf
};

// ---- unary ------------------------------------------------------------------------------

inline Domain unary_domain(UnaryOp op) {
  switch (op) {
    case UnaryOp::Reciprocal: return {0.1, 10};
    case UnaryOp::PowInt: return {0.2, 4};
    case UnaryOp::Sqrt: case UnaryOp::Rsqrt: return {0.01, 100};
    case UnaryOp::Log: case UnaryOp::Log2: case UnaryOp::Log10: return {0.01, 100};
    case UnaryOp::Log1p: return {-0.9, 10};
    case UnaryOp::Asin: case UnaryOp::Acos: case UnaryOp::Atanh: return {-0.99, 0.99};
    case UnaryOp::Acosh: return {1, 10};
    case UnaryOp::Lgamma: return {0.1, 10};
    case UnaryOp::Exp: return {-80, 80};
    case UnaryOp::Sigmoid: case UnaryOp::Silu: case UnaryOp::Tanh: return {-20, 20};
    case UnaryOp::GeluTanh: case UnaryOp::Gelu: case UnaryOp::Mish: return {-10, 10};
    case UnaryOp::Sinh: case UnaryOp::Cosh: return {-10, 10};
    case UnaryOp::Tan: return {-1.4, 1.4};
    case UnaryOp::Floor: case UnaryOp::Ceil: case UnaryOp::Round: case UnaryOp::Trunc:
    case UnaryOp::Sign: case UnaryOp::Frac: case UnaryOp::Relu: case UnaryOp::Clamp:
    case UnaryOp::Hardsigmoid: case UnaryOp::Hardswish:
      return {-5, 5, true};
    case UnaryOp::IsNan: case UnaryOp::IsInf: case UnaryOp::IsFinite: case UnaryOp::LogicalNot:
      return {-5, 5, true, true};
    default: return {};
  }
}

inline void unary_params(UnaryOp op, Scalar& p0, Scalar& p1) {
  switch (op) {
    case UnaryOp::LeakyRelu: p0 = 0.01; break;
    case UnaryOp::Elu: p0 = 1.5; break;
    case UnaryOp::Softplus: p0 = 2.0; p1 = 5.0; break;
    case UnaryOp::Clamp: p0 = 2; p1 = 15; break;
    case UnaryOp::PowInt: p0 = int64_t(-3); break;
    default: break;
  }
}

inline std::optional<double> ref_unary(UnaryOp op, double x, Scalar p0, Scalar p1) {
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Abs: return std::fabs(x);
    case UnaryOp::Sign: return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0);
    case UnaryOp::Square: return x * x;
    case UnaryOp::Reciprocal: return 1 / x;
    case UnaryOp::Sqrt: return std::sqrt(x);
    case UnaryOp::Rsqrt: return 1 / std::sqrt(x);
    case UnaryOp::Exp: return std::exp(x);
    case UnaryOp::Exp2: return std::exp2(x);
    case UnaryOp::Expm1: return std::expm1(x);
    case UnaryOp::Log: return std::log(x);
    case UnaryOp::Log2: return std::log2(x);
    case UnaryOp::Log10: return std::log10(x);
    case UnaryOp::Log1p: return std::log1p(x);
    case UnaryOp::Sin: return std::sin(x);
    case UnaryOp::Cos: return std::cos(x);
    case UnaryOp::Tan: return std::tan(x);
    case UnaryOp::Asin: return std::asin(x);
    case UnaryOp::Acos: return std::acos(x);
    case UnaryOp::Atan: return std::atan(x);
    case UnaryOp::Sinh: return std::sinh(x);
    case UnaryOp::Cosh: return std::cosh(x);
    case UnaryOp::Tanh: return std::tanh(x);
    case UnaryOp::Asinh: return std::asinh(x);
    case UnaryOp::Acosh: return std::acosh(x);
    case UnaryOp::Atanh: return std::atanh(x);
    case UnaryOp::Erf: return std::erf(x);
    case UnaryOp::Erfc: return std::erfc(x);
    case UnaryOp::Lgamma: return std::lgamma(x);
    case UnaryOp::Floor: return std::floor(x);
    case UnaryOp::Ceil: return std::ceil(x);
    case UnaryOp::Round: return std::nearbyint(x);
    case UnaryOp::Trunc: return std::trunc(x);
    case UnaryOp::Frac: return x - std::trunc(x);
    case UnaryOp::Sigmoid: return 1 / (1 + std::exp(-x));
    case UnaryOp::Relu: return std::isnan(x) ? x : std::max(x, 0.0);
    case UnaryOp::Gelu: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case UnaryOp::GeluTanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case UnaryOp::Silu: return x / (1 + std::exp(-x));
    case UnaryOp::Mish: return x * std::tanh(std::log1p(std::exp(x)));
    case UnaryOp::Hardsigmoid: return std::min(std::max(x + 3, 0.0), 6.0) / 6;
    case UnaryOp::Hardswish: return x * std::min(std::max(x + 3, 0.0), 6.0) / 6;
    case UnaryOp::LeakyRelu: return x > 0 ? x : x * p0.f;
    case UnaryOp::Elu: return x > 0 ? x : p0.f * std::expm1(x);
    case UnaryOp::Softplus: return x * p0.f > p1.f ? x : std::log1p(std::exp(x * p0.f)) / p0.f;
    case UnaryOp::Clamp: return std::isnan(x) ? x : std::min(std::max(x, p0.f), p1.f);
    case UnaryOp::PowInt: return std::pow(x, double(p0.i));
    case UnaryOp::LogicalNot: return x == 0;
    case UnaryOp::IsNan: return std::isnan(x);
    case UnaryOp::IsInf: return std::isinf(x);
    case UnaryOp::IsFinite: return std::isfinite(x);
    case UnaryOp::BitwiseNot: return std::nullopt;
  }
  return std::nullopt;
}

// Integer semantics (values small enough that int64 never overflows); is_bool: bool compute.
inline std::optional<int64_t> ref_unary_int(UnaryOp op, int64_t x, Scalar p0, Scalar p1,
                                            bool is_bool) {
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Abs: return x < 0 ? -x : x;
    case UnaryOp::Sign: return (x > 0) - (x < 0);
    case UnaryOp::Square: return x * x;
    case UnaryOp::Floor: case UnaryOp::Ceil: case UnaryOp::Round: case UnaryOp::Trunc:
      return x;
    case UnaryOp::Relu: return x > 0 ? x : 0;
    case UnaryOp::Clamp: return std::min(std::max(x, p0.i), p1.i);
    case UnaryOp::LogicalNot: return x == 0;
    case UnaryOp::BitwiseNot: return is_bool ? int64_t(x == 0) : ~x;
    case UnaryOp::IsNan: case UnaryOp::IsInf: return 0;
    case UnaryOp::IsFinite: return 1;
    default: return std::nullopt;
  }
}

// ---- binary -----------------------------------------------------------------------------

inline void binary_domains(BinaryOp op, Domain& a, Domain& b) {
  switch (op) {
    case BinaryOp::Div: b = {0.5, 4}; break;
    case BinaryOp::DivFloor: case BinaryOp::DivTrunc: case BinaryOp::Remainder:
    case BinaryOp::Fmod:
      a = {-20, 20, true};
      b = {-4, 4, true};
      break;
    case BinaryOp::Pow: a = {0.1, 3}; b = {-2, 2}; break;
    case BinaryOp::Eq: case BinaryOp::Ne: case BinaryOp::Lt: case BinaryOp::Le:
    case BinaryOp::Gt: case BinaryOp::Ge: case BinaryOp::Maximum: case BinaryOp::Minimum:
    case BinaryOp::ThresholdBackward:
      a = {-2, 2, true};
      b = {-2, 2, true};
      break;
    case BinaryOp::ShiftLeft: case BinaryOp::ShiftRight: a = {-100, 100}; b = {-2, 70}; break;
    case BinaryOp::SigmoidBackward: b = {0, 1}; break;
    case BinaryOp::TanhBackward: b = {-1, 1}; break;
    default: break;
  }
}

inline Scalar binary_param(BinaryOp op) {
  Scalar s;
  switch (op) {
    case BinaryOp::Add: case BinaryOp::Sub: s.f = 2.5; s.i = 2; break;
    case BinaryOp::ThresholdBackward: s.f = 0.5; s.i = 1; break;
    case BinaryOp::LeakyReluBackward: s.f = 0.01; s.i = 0; break;
    default: s = 1; break;
  }
  return s;
}

inline double floor_div_ref(double a, double b) {
  if (b == 0) return a / b;
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0 && (b < 0) != (mod < 0)) div -= 1;
  if (div == 0) return std::copysign(0.0, a / b);
  double f = std::floor(div);
  return div - f > 0.5 ? f + 1 : f;
}

inline std::optional<double> ref_binary(BinaryOp op, double a, double b, Scalar p) {
  switch (op) {
    case BinaryOp::Add: return a + p.f * b;
    case BinaryOp::Sub: return a - p.f * b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
    case BinaryOp::DivFloor: return floor_div_ref(a, b);
    case BinaryOp::DivTrunc: return std::trunc(a / b);
    case BinaryOp::Remainder: {
      if (b == 0) return std::nan("");
      double m = std::fmod(a, b);
      return (m != 0 && (m < 0) != (b < 0)) ? m + b : m;
    }
    case BinaryOp::Fmod: return std::fmod(a, b);
    case BinaryOp::Maximum: return std::max(a, b);
    case BinaryOp::Minimum: return std::min(a, b);
    case BinaryOp::Pow: return std::pow(a, b);
    case BinaryOp::Atan2: return std::atan2(a, b);
    case BinaryOp::Hypot: return std::hypot(a, b);
    case BinaryOp::Copysign: return std::copysign(a, b);
    case BinaryOp::Eq: return a == b;
    case BinaryOp::Ne: return a != b;
    case BinaryOp::Lt: return a < b;
    case BinaryOp::Le: return a <= b;
    case BinaryOp::Gt: return a > b;
    case BinaryOp::Ge: return a >= b;
    case BinaryOp::LogicalAnd: return (a != 0) && (b != 0);
    case BinaryOp::LogicalOr: return (a != 0) || (b != 0);
    case BinaryOp::LogicalXor: return (a != 0) != (b != 0);
    case BinaryOp::ThresholdBackward: return b <= p.f ? 0 : a;
    case BinaryOp::LeakyReluBackward: return b > 0 ? a : a * p.f;
    case BinaryOp::GeluBackward: {
      double cdf = 0.5 * (1 + std::erf(b / std::sqrt(2.0)));
      double pdf = std::exp(-0.5 * b * b) / std::sqrt(2 * M_PI);
      return a * (cdf + b * pdf);
    }
    case BinaryOp::GeluTanhBackward: {
      double k = std::sqrt(2 / M_PI), c = 0.044715;
      double t = std::tanh(k * (b + c * b * b * b));
      return a * (0.5 * (1 + t) + 0.5 * b * (1 - t * t) * k * (1 + 3 * c * b * b));
    }
    case BinaryOp::SiluBackward: {
      double s = 1 / (1 + std::exp(-b));
      return a * s * (1 + b * (1 - s));
    }
    case BinaryOp::SigmoidBackward: return a * (1 - b) * b;
    case BinaryOp::TanhBackward: return a * (1 - b * b);
    default: return std::nullopt;
  }
}

inline std::optional<int64_t> ref_binary_int(BinaryOp op, int64_t a, int64_t b, Scalar p,
                                             int bits) {
  auto floordiv = [](int64_t x, int64_t y) {
    int64_t q = x / y;
    return (x % y != 0 && ((x < 0) != (y < 0))) ? q - 1 : q;
  };
  switch (op) {
    case BinaryOp::Add: return a + p.i * b;
    case BinaryOp::Sub: return a - p.i * b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::DivFloor: return b == 0 ? 0 : floordiv(a, b);
    case BinaryOp::DivTrunc: return b == 0 ? 0 : a / b;
    case BinaryOp::Remainder: return b == 0 ? 0 : a - b * floordiv(a, b);
    case BinaryOp::Fmod: return b == 0 ? 0 : a % b;
    case BinaryOp::Maximum: return std::max(a, b);
    case BinaryOp::Minimum: return std::min(a, b);
    case BinaryOp::Pow: {
      if (b < 0) return a == 1 ? 1 : (a == -1 ? (b % 2 ? -1 : 1) : 0);
      int64_t r = 1;
      for (int64_t i = 0; i < b; ++i) r *= a;
      return r;
    }
    case BinaryOp::Eq: return a == b;
    case BinaryOp::Ne: return a != b;
    case BinaryOp::Lt: return a < b;
    case BinaryOp::Le: return a <= b;
    case BinaryOp::Gt: return a > b;
    case BinaryOp::Ge: return a >= b;
    case BinaryOp::LogicalAnd: return (a != 0) && (b != 0);
    case BinaryOp::LogicalOr: return (a != 0) || (b != 0);
    case BinaryOp::LogicalXor: return (a != 0) != (b != 0);
    case BinaryOp::BitwiseAnd: return a & b;
    case BinaryOp::BitwiseOr: return a | b;
    case BinaryOp::BitwiseXor: return a ^ b;
    case BinaryOp::ShiftLeft: return (b < 0 || b >= bits) ? 0 : int64_t(uint64_t(a) << b);
    case BinaryOp::ShiftRight: return (b < 0 || b >= bits) ? (a < 0 ? -1 : 0) : a >> b;
    case BinaryOp::ThresholdBackward: return b <= p.i ? 0 : a;
    default: return std::nullopt;
  }
}

// ---- ternary ----------------------------------------------------------------------------

inline void ternary_domains(TernaryOp op, Domain& a, Domain& b, Domain& c) {
  switch (op) {
    case TernaryOp::Addcdiv: c = {0.5, 4}; break;
    case TernaryOp::Lerp: c = {-0.5, 1.5}; break;
    case TernaryOp::ClampTensor: a = {-5, 5, true}; b = {-3, 0, true}; c = {0, 3, true}; break;
    default: break;
  }
}

inline Scalar ternary_param(TernaryOp op) {
  Scalar s;
  s.f = 0.75;
  s.i = 3;
  return s;
}

inline std::optional<double> ref_ternary(TernaryOp op, double a, double b, double c, Scalar p) {
  switch (op) {
    case TernaryOp::Where: return a != 0 ? b : c;
    case TernaryOp::Addcmul: return a + p.f * b * c;
    case TernaryOp::Addcdiv: return a + p.f * b / c;
    case TernaryOp::Lerp: return a + c * (b - a);
    case TernaryOp::ClampTensor: return std::min(std::max(a, b), c);
  }
  return std::nullopt;
}

inline std::optional<int64_t> ref_ternary_int(TernaryOp op, int64_t a, int64_t b, int64_t c,
                                              Scalar p) {
  switch (op) {
    case TernaryOp::Where: return a != 0 ? b : c;
    case TernaryOp::Addcmul: return a + p.i * b * c;
    case TernaryOp::ClampTensor: return std::min(std::max(a, b), c);
    default: return std::nullopt;
  }
}

}  // namespace ktest
