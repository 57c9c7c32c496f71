// Ternary ops: functors and entry points (a short family, so both live here).
#include <cmath>

#include "binary_ops.h"
#include "elementwise_dispatch.h"
#include "npu/kernels/elementwise.h"

namespace npu::kernels {
namespace detail::ops {

// The condition arrives converted to the compute type; any nonzero value selects b.
template <class T>
struct Where {
  static constexpr unsigned kTypes = kAll;
  static constexpr int kCost = 1;
  T operator()(T cond, T b, T c) const { return cond != T(0) ? b : c; }
};

template <class T>
struct Addcmul {
  static constexpr unsigned kTypes = kAllButBool;
  static constexpr int kCost = 1;
  T value;
  Addcmul(Scalar p0, Scalar) : value(scalar_as<T>(p0)) {}
  T operator()(T a, T b, T c) const { return T(a + value * b * c); }
};

template <class T>
struct Addcdiv {
  static constexpr unsigned kTypes = kFloating;
  static constexpr int kCost = 1;
  T value;
  Addcdiv(Scalar p0, Scalar) : value(scalar_as<T>(p0)) {}
  T operator()(T a, T b, T c) const { return a + value * b / c; }
};

// PyTorch's lerp: the formula switches at |w| = 0.5 so that w = 1 gives exactly `end`.
template <class T>
struct Lerp {
  static constexpr unsigned kTypes = kFloating;
  static constexpr int kCost = 1;
  T operator()(T start, T end, T w) const {
    T diff = end - start;
    return std::abs(w) < T(0.5) ? start + w * diff : end - diff * (T(1) - w);
  }
};

template <class T>
struct ClampTensor {
  static constexpr unsigned kTypes = kAllButBool;
  static constexpr int kCost = 1;
  T operator()(T x, T lo, T hi) const { return min_nan(max_nan(x, lo), hi); }
};

}  // namespace detail::ops

const char* op_name(TernaryOp op) {
#define NPU_NAME(name, str) \
  case TernaryOp::name: return str;
  switch (op) { NPU_KERNELS_TERNARY_OPS(NPU_NAME) }
#undef NPU_NAME
  return "?";
}

bool ternary_supports(TernaryOp op, DType compute) {
#define NPU_SUPPORTS(name, str) \
  case TernaryOp::name: return detail::op_supports<detail::ops::name>(compute);
  switch (op) { NPU_KERNELS_TERNARY_OPS(NPU_SUPPORTS) }
#undef NPU_SUPPORTS
  return false;
}

void ternary(TernaryOp op, const TensorDesc& out, const TensorDesc& a, const TensorDesc& b,
             const TensorDesc& c, DType compute, Scalar p0) {
  const TensorDesc* ops[4] = {&out, &a, &b, &c};
#define NPU_RUN(name, str) \
  case TernaryOp::name: return detail::run_op<detail::ops::name, 3>(str, ops, compute, p0, {});
  switch (op) { NPU_KERNELS_TERNARY_OPS(NPU_RUN) }
#undef NPU_RUN
  NPU_KERNEL_ASSERT(false, "unknown ternary op");
}

}  // namespace npu::kernels
