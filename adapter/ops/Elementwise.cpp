// Elementwise aten ops on the operator library's unary / binary / ternary kernels.
//
// PyTorch's TensorIterator does the ATen half of the work: broadcasting, type promotion,
// allocating or resizing the output, overlap checks and coalescing dimensions. Its operands
// become kernel descriptors (KernelBridge.h) and the kernel is queued on the stream. What the
// library does not cover (complex dtypes, integer division by a tensor that may hold zeros, ...)
// runs ATen's CPU kernel on the stream instead, with the same results and errors.
#include <ATen/MemoryOverlap.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/add.h>
#include <ATen/ops/addcdiv.h>
#include <ATen/ops/addcmul.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/lerp.h>
#include <ATen/ops/where.h>
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "DeviceCheck.h"
#include "ExecutionPaths.h"
#include "KernelBridge.h"
#include "NPUStream.h"

namespace torch_npu::native {
namespace {
namespace ew {  // named, so calls can be told from ATen's at::xxx_out found by ADL

using UOp = nk::UnaryOp;
using BOp = nk::BinaryOp;
using TOp = nk::TernaryOp;

enum class Kind { Same, Float, Compare };

// The iterators borrow their operands, as ATen's structured CPU kernels do (the caller's tensors
// outlive them). Owning them would copy each input: for a tensor only Python holds, that copy
// makes torch 2.13 take the GIL to keep its PyObject alive, and release it again after the op
// (two GIL round trips per op: a fifth of a 1-element op's host time, measured with callgrind).
at::TensorIterator buildUnary(Kind kind, const at::TensorBase& out, const at::Tensor& self) {
  at::TensorIterator iter;
  if (kind == Kind::Float) {
    iter.build_borrowing_unary_float_op(out, self);
  } else {
    iter.build_borrowing_unary_op(out, self);
  }
  return iter;
}

at::TensorIterator buildBinary(Kind kind, const at::TensorBase& out, const at::Tensor& a,
                               const at::Tensor& b) {
  at::TensorIterator iter;
  switch (kind) {
    case Kind::Float: iter.build_borrowing_binary_float_op(out, a, b); break;
    case Kind::Compare: iter.build_borrowing_comparison_op(out, a, b); break;
    default: iter.build_borrowing_binary_op(out, a, b); break;
  }
  return iter;
}

std::optional<nk::DType> computeDType(const at::TensorIteratorBase& iter) {
  if (!iter.maybe_common_dtype().has_value()) return std::nullopt;
  return toKernelDType(iter.common_dtype());
}

c10::DeviceIndex deviceOf(const at::TensorBase& t) { return t.device().index(); }

// ---- unary ------------------------------------------------------------------------------

template <class Host>
at::Tensor unary(UOp op, Kind kind, at::Tensor out, const at::Tensor& self, const char* name,
                 Host host, nk::Scalar p0 = {}, nk::Scalar p1 = {}) {
  const c10::DeviceGuard guard(self.device());
  at::TensorIterator iter = buildUnary(kind, out, self);
  at::Tensor result = iter.output();
  if (iter.numel() == 0) return result;
  const std::optional<nk::DType> compute = computeDType(iter);
  const NPUStream stream = getCurrentNPUStream(deviceOf(result));
  if (compute && iterSupported(iter) && nk::unary_supports(op, *compute)) {
    launchTask(stream, name,
               [op, o = iterOperand(iter, 0), i = iterOperand(iter, 1), c = *compute, p0, p1] {
                 nk::unary(op, o.get(), i.get(), c, p0, p1);
               });
  } else {
    countHostKernelCall(name);
    launchTask(stream, name, [o = HostArg(result), i = HostArg(self), host] {
      at::Tensor r = o.get();
      host(r, i.get());
    });
  }
  return result;
}

#define NPU_UNARY(fn, OP, KIND)                                                              \
  at::Tensor fn(const at::Tensor& self) {                                                    \
    return unary(UOp::OP, Kind::KIND, at::Tensor(), self, #fn,                               \
                 [](at::Tensor& o, const at::Tensor& i) { at::fn##_out(o, i); });            \
  }                                                                                          \
  at::Tensor& fn##_(at::Tensor& self) {                                                      \
    unary(UOp::OP, Kind::KIND, self, self, #fn,                                              \
          [](at::Tensor& o, const at::Tensor& i) { at::fn##_out(o, i); });                   \
    return self;                                                                             \
  }                                                                                          \
  at::Tensor& fn##_out(const at::Tensor& self, at::Tensor& out) {                            \
    unary(UOp::OP, Kind::KIND, out, self, #fn,                                               \
          [](at::Tensor& o, const at::Tensor& i) { at::fn##_out(o, i); });                   \
    return out;                                                                              \
  }

#define NPU_UNARY_OPS(X)                                                                     \
  X(neg, Neg, Same) X(abs, Abs, Same) X(sign, Sign, Same) X(reciprocal, Reciprocal, Float)   \
  X(sqrt, Sqrt, Float) X(rsqrt, Rsqrt, Float) X(exp, Exp, Float) X(exp2, Exp2, Float)        \
  X(expm1, Expm1, Float) X(log, Log, Float) X(log2, Log2, Float) X(log10, Log10, Float)      \
  X(log1p, Log1p, Float) X(sin, Sin, Float) X(cos, Cos, Float) X(tan, Tan, Float)            \
  X(asin, Asin, Float) X(acos, Acos, Float) X(atan, Atan, Float) X(sinh, Sinh, Float)        \
  X(cosh, Cosh, Float) X(tanh, Tanh, Float) X(asinh, Asinh, Float) X(acosh, Acosh, Float)    \
  X(atanh, Atanh, Float) X(erf, Erf, Float) X(erfc, Erfc, Float) X(lgamma, Lgamma, Float)    \
  X(floor, Floor, Same) X(ceil, Ceil, Same) X(trunc, Trunc, Same) X(frac, Frac, Same)        \
  X(sigmoid, Sigmoid, Float) X(silu, Silu, Same) X(mish, Mish, Same)                         \
  X(hardsigmoid, Hardsigmoid, Same) X(hardswish, Hardswish, Same)                            \
  X(bitwise_not, BitwiseNot, Same)

#define NPU_DEFINE_UNARY(fn, OP, KIND) NPU_UNARY(fn, OP, KIND)
NPU_UNARY_OPS(NPU_DEFINE_UNARY)
#undef NPU_DEFINE_UNARY

// round(decimals=0) only; other decimals go to ATen's kernel.
at::Tensor& round_out(const at::Tensor& self, at::Tensor& out) {
  unary(UOp::Round, Kind::Same, out, self, "round",
        [](at::Tensor& o, const at::Tensor& i) { at::round_out(o, i); });
  return out;
}
at::Tensor round(const at::Tensor& self) {
  return unary(UOp::Round, Kind::Same, at::Tensor(), self, "round",
               [](at::Tensor& o, const at::Tensor& i) { at::round_out(o, i); });
}
at::Tensor& round_(at::Tensor& self) { return ew::round_out(self, self); }

at::Tensor& relu_(at::Tensor& self) {
  unary(UOp::Relu, Kind::Same, self, self, "relu",
        [](at::Tensor& o, const at::Tensor& i) { o.copy_(at::relu(i)); });
  return self;
}
at::Tensor relu(const at::Tensor& self) {
  TORCH_CHECK(self.scalar_type() != at::kBool, "Boolean inputs not supported for relu");
  return unary(UOp::Relu, Kind::Same, at::Tensor(), self, "relu",
               [](at::Tensor& o, const at::Tensor& i) { o.copy_(at::relu(i)); });
}

at::Tensor& logical_not_out(const at::Tensor& self, at::Tensor& out) {
  const c10::DeviceGuard guard(self.device());
  // The CPU kernel's iterator: any output dtype, the input's dtype for the math.
  at::TensorIterator iter = at::TensorIteratorConfig()
                                .check_all_same_dtype(false)
                                .add_output(out)
                                .add_const_input(self)
                                .build();
  if (iter.numel() == 0) return out;
  const std::optional<nk::DType> compute = toKernelDType(self.scalar_type());
  const NPUStream stream = getCurrentNPUStream(deviceOf(out));
  if (compute && iterSupported(iter)) {
    launchTask(stream, "logical_not", [o = iterOperand(iter, 0), i = iterOperand(iter, 1),
                                       c = *compute] {
      nk::unary(UOp::LogicalNot, o.get(), i.get(), c);
    });
  } else {
    countHostKernelCall("logical_not");
    launchTask(stream, "logical_not", [o = HostArg(out), i = HostArg(self)] {
      at::Tensor r = o.get();
      at::logical_not_out(r, i.get());
    });
  }
  return out;
}

at::Tensor gelu(const at::Tensor& self, c10::string_view approximate) {
  const bool tanh = approximate == "tanh";
  TORCH_CHECK(tanh || approximate == "none", "approximate argument must be either none or tanh.");
  return unary(tanh ? UOp::GeluTanh : UOp::Gelu, Kind::Same, at::Tensor(), self, "gelu",
               [a = std::string(approximate)](at::Tensor& o, const at::Tensor& i) {
                 at::gelu_out(o, i, a);
               });
}
at::Tensor& gelu_out(const at::Tensor& self, c10::string_view approximate, at::Tensor& out) {
  const bool tanh = approximate == "tanh";
  TORCH_CHECK(tanh || approximate == "none", "approximate argument must be either none or tanh.");
  unary(tanh ? UOp::GeluTanh : UOp::Gelu, Kind::Same, out, self, "gelu",
        [a = std::string(approximate)](at::Tensor& o, const at::Tensor& i) {
          at::gelu_out(o, i, a);
        });
  return out;
}
at::Tensor& gelu_(at::Tensor& self, c10::string_view approximate) {
  return ew::gelu_out(self, approximate, self);
}

at::Tensor& leaky_relu_out(const at::Tensor& self, const at::Scalar& slope, at::Tensor& out) {
  unary(UOp::LeakyRelu, Kind::Same, out, self, "leaky_relu",
        [slope](at::Tensor& o, const at::Tensor& i) { at::leaky_relu_out(o, i, slope); },
        toKernelScalar(slope));
  return out;
}
at::Tensor leaky_relu(const at::Tensor& self, const at::Scalar& slope) {
  return unary(UOp::LeakyRelu, Kind::Same, at::Tensor(), self, "leaky_relu",
               [slope](at::Tensor& o, const at::Tensor& i) { at::leaky_relu_out(o, i, slope); },
               toKernelScalar(slope));
}
at::Tensor& leaky_relu_(at::Tensor& self, const at::Scalar& slope) {
  return ew::leaky_relu_out(self, slope, self);
}

at::Tensor& softplus_out(const at::Tensor& self, const at::Scalar& beta,
                         const at::Scalar& threshold, at::Tensor& out) {
  unary(UOp::Softplus, Kind::Same, out, self, "softplus",
        [beta, threshold](at::Tensor& o, const at::Tensor& i) {
          at::softplus_out(o, i, beta, threshold);
        },
        toKernelScalar(beta), toKernelScalar(threshold));
  return out;
}
at::Tensor softplus(const at::Tensor& self, const at::Scalar& beta, const at::Scalar& threshold) {
  at::Tensor out;
  return unary(UOp::Softplus, Kind::Same, out, self, "softplus",
               [beta, threshold](at::Tensor& o, const at::Tensor& i) {
                 at::softplus_out(o, i, beta, threshold);
               },
               toKernelScalar(beta), toKernelScalar(threshold));
}

// clamp(min, max) with scalar bounds; a missing bound is +-inf (or the integer limits).
std::pair<nk::Scalar, nk::Scalar> clampBounds(const std::optional<at::Scalar>& min,
                                              const std::optional<at::Scalar>& max) {
  nk::Scalar lo, hi;
  lo.f = -std::numeric_limits<double>::infinity();
  lo.i = std::numeric_limits<int64_t>::min();
  hi.f = std::numeric_limits<double>::infinity();
  hi.i = std::numeric_limits<int64_t>::max();
  if (min) lo = toKernelScalar(*min);
  if (max) hi = toKernelScalar(*max);
  return {lo, hi};
}

// A float bound on an integer tensor promotes (clamp(int_tensor, 0.5) is float): the bound that
// is floating decides the dtype; ATen's kernel computes those.
bool promotingBounds(const at::Tensor& self, const std::optional<at::Scalar>& min,
                     const std::optional<at::Scalar>& max) {
  const bool float_bounds = (min && min->isFloatingPoint()) || (max && max->isFloatingPoint());
  return float_bounds && !at::isFloatingType(self.scalar_type());
}

at::Tensor& clamp_out(const at::Tensor& self, const std::optional<at::Scalar>& min,
                      const std::optional<at::Scalar>& max, at::Tensor& out) {
  TORCH_CHECK(min.has_value() || max.has_value(),
              "torch.clamp: At least one of 'min' or 'max' must not be None");
  auto host = [min, max](at::Tensor& o, const at::Tensor& i) { at::clamp_out(o, i, min, max); };
  if (promotingBounds(self, min, max)) {
    const c10::DeviceGuard guard(self.device());
    // Sized here: the CPU kernel cannot resize a host alias of device memory.
    at::native::resize_output(out, self.sizes());
    countHostKernelCall("clamp");
    launchTask(getCurrentNPUStream(deviceOf(self)), "clamp",
               [o = HostArg(out), i = HostArg(self), host] {
                 at::Tensor r = o.get();
                 host(r, i.get());
               });
    return out;
  }
  const auto [lo, hi] = clampBounds(min, max);
  unary(UOp::Clamp, Kind::Same, out, self, "clamp", host, lo, hi);
  return out;
}
at::Tensor clamp(const at::Tensor& self, const std::optional<at::Scalar>& min,
                 const std::optional<at::Scalar>& max) {
  TORCH_CHECK(min.has_value() || max.has_value(),
              "torch.clamp: At least one of 'min' or 'max' must not be None");
  if (promotingBounds(self, min, max)) {
    const at::Scalar& bound = (min && min->isFloatingPoint()) ? *min : *max;
    at::Tensor out = at::empty({0}, self.options().dtype(at::result_type(self, bound)));
    return ew::clamp_out(self, min, max, out);
  }
  const auto [lo, hi] = clampBounds(min, max);
  return unary(UOp::Clamp, Kind::Same, at::Tensor(), self, "clamp",
               [min, max](at::Tensor& o, const at::Tensor& i) { at::clamp_out(o, i, min, max); },
               lo, hi);
}
at::Tensor& clamp_(at::Tensor& self, const std::optional<at::Scalar>& min,
                   const std::optional<at::Scalar>& max) {
  return ew::clamp_out(self, min, max, self);
}

// ---- binary -----------------------------------------------------------------------------

template <class Host>
at::Tensor binary(BOp op, Kind kind, at::Tensor out, const at::Tensor& a, const at::Tensor& b,
                  const char* name, Host host, nk::Scalar p0 = 1, bool kernel_ok = true) {
  const c10::DeviceGuard guard(a.is_cpu() ? b.device() : a.device());
  at::TensorIterator iter = buildBinary(kind, out, a, b);
  at::Tensor result = iter.output();
  if (iter.numel() == 0) return result;
  const std::optional<nk::DType> compute = computeDType(iter);
  const NPUStream stream = getCurrentNPUStream(deviceOf(result));
  if (kernel_ok && compute && iterSupported(iter) && nk::binary_supports(op, *compute)) {
    launchTask(stream, name,
               [op, o = iterOperand(iter, 0), x = iterOperand(iter, 1), y = iterOperand(iter, 2),
                c = *compute, p0] { nk::binary(op, o.get(), x.get(), y.get(), c, p0); });
  } else {
    countHostKernelCall(name);
    launchTask(stream, name, [o = HostArg(result), x = HostArg(a), y = HostArg(b), host] {
      at::Tensor r = o.get();
      host(r, x.get(), y.get());
    });
  }
  return result;
}

// Integer division and remainder raise ZeroDivisionError on the CPU: ATen's kernel keeps that.
bool integralInputs(const at::Tensor& a, const at::Tensor& b) {
  return at::isIntegralType(at::result_type(a, b), /*includeBool=*/true);
}

#define NPU_BINARY(fn, OP, KIND, KERNEL_OK)                                                  \
  at::Tensor fn(const at::Tensor& self, const at::Tensor& other) {                           \
    return binary(BOp::OP, Kind::KIND, at::Tensor(), self, other, #fn,                       \
                  [](at::Tensor& o, const at::Tensor& a, const at::Tensor& b) {              \
                    at::fn##_out(o, a, b);                                                   \
                  }, 1, KERNEL_OK);                                                          \
  }                                                                                          \
  at::Tensor& fn##_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {   \
    binary(BOp::OP, Kind::KIND, out, self, other, #fn,                                       \
           [](at::Tensor& o, const at::Tensor& a, const at::Tensor& b) {                     \
             at::fn##_out(o, a, b);                                                          \
           }, 1, KERNEL_OK);                                                                 \
    return out;                                                                              \
  }                                                                                          \
  at::Tensor& fn##_(at::Tensor& self, const at::Tensor& other) {                             \
    return ew::fn##_out(self, other, self);                                                      \
  }

#define NPU_BINARY_OPS(X)                                                                    \
  X(mul, Mul, Same, true) X(div, Div, Float, true) X(maximum, Maximum, Same, true)           \
  X(minimum, Minimum, Same, true) X(atan2, Atan2, Float, true) X(hypot, Hypot, Same, true)   \
  X(copysign, Copysign, Float, true)                                                         \
  X(remainder, Remainder, Same, !integralInputs(self, other))                                \
  X(fmod, Fmod, Same, !integralInputs(self, other))                                          \
  X(pow, Pow, Same, true)                                                                    \
  X(bitwise_and, BitwiseAnd, Same, true) X(bitwise_or, BitwiseOr, Same, true)                \
  X(bitwise_xor, BitwiseXor, Same, true)                                                     \
  X(eq, Eq, Compare, true) X(ne, Ne, Compare, true) X(lt, Lt, Compare, true)                 \
  X(le, Le, Compare, true) X(gt, Gt, Compare, true) X(ge, Ge, Compare, true)                 \
  X(logical_and, LogicalAnd, Compare, true) X(logical_or, LogicalOr, Compare, true)          \
  X(logical_xor, LogicalXor, Compare, true)

#define NPU_DEFINE_BINARY(fn, OP, KIND, KERNEL_OK) NPU_BINARY(fn, OP, KIND, KERNEL_OK)
NPU_BINARY_OPS(NPU_DEFINE_BINARY)
#undef NPU_DEFINE_BINARY

// The .Scalar overloads: the scalar becomes a wrapped CPU tensor, as PyTorch's own do.
#define NPU_COMPARE_SCALAR(fn)                                                               \
  at::Tensor fn##_scalar(const at::Tensor& self, const at::Scalar& other) {                  \
    return ew::fn(self, at::native::wrapped_scalar_tensor(other));                               \
  }                                                                                          \
  at::Tensor& fn##_scalar_out(const at::Tensor& self, const at::Scalar& other,               \
                              at::Tensor& out) {                                             \
    return ew::fn##_out(self, at::native::wrapped_scalar_tensor(other), out);                    \
  }                                                                                          \
  at::Tensor& fn##_scalar_(at::Tensor& self, const at::Scalar& other) {                      \
    return ew::fn##_out(self, at::native::wrapped_scalar_tensor(other), self);                   \
  }
NPU_COMPARE_SCALAR(eq) NPU_COMPARE_SCALAR(ne) NPU_COMPARE_SCALAR(lt) NPU_COMPARE_SCALAR(le)
NPU_COMPARE_SCALAR(gt) NPU_COMPARE_SCALAR(ge)

// pow(tensor, scalar): the common exponents are unary kernels.
at::Tensor& pow_scalar_out(const at::Tensor& self, const at::Scalar& exponent, at::Tensor& out) {
  auto host = [exponent](at::Tensor& o, const at::Tensor& i) { at::pow_out(o, i, exponent); };
  const bool float_exp = exponent.isFloatingPoint();
  if (!float_exp || at::isFloatingType(self.scalar_type())) {
    if (exponent.equal(2)) {
      unary(UOp::Square, Kind::Same, out, self, "pow", host);
      return out;
    }
    if (exponent.equal(1) && out.defined() && out.is_same(self)) return out;
  }
  if (float_exp && !at::isFloatingType(self.scalar_type())) {
    // pow(int_tensor, 0.5) is float: promotion, ATen's kernel.
    return ew::pow_out(self, at::native::wrapped_scalar_tensor(exponent), out);
  }
  if (exponent.isFloatingPoint() && exponent.toDouble() == 0.5) {
    unary(UOp::Sqrt, Kind::Same, out, self, "pow", host);
    return out;
  }
  return ew::pow_out(self, at::native::wrapped_scalar_tensor(exponent), out);
}
at::Tensor pow_scalar(const at::Tensor& self, const at::Scalar& exponent) {
  if (exponent.isFloatingPoint() && !at::isFloatingType(self.scalar_type())) {
    return ew::pow(self, at::native::wrapped_scalar_tensor(exponent));
  }
  at::Tensor out = at::empty({0}, self.options());
  return ew::pow_scalar_out(self, exponent, out);
}
at::Tensor& pow_scalar_(at::Tensor& self, const at::Scalar& exponent) {
  return ew::pow_scalar_out(self, exponent, self);
}

at::Tensor& add_out(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha,
                    at::Tensor& out) {
  binary(BOp::Add, Kind::Same, out, self, other, "add",
         [alpha](at::Tensor& o, const at::Tensor& a, const at::Tensor& b) {
           at::add_out(o, a, b, alpha);
         }, toKernelScalar(alpha), !alpha.isComplex());
  return out;
}
at::Tensor add(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  at::native::alpha_check(at::result_type(self, other), alpha);
  return binary(BOp::Add, Kind::Same, at::Tensor(), self, other, "add",
                [alpha](at::Tensor& o, const at::Tensor& a, const at::Tensor& b) {
                  at::add_out(o, a, b, alpha);
                }, toKernelScalar(alpha), !alpha.isComplex());
}
at::Tensor& add_(at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  at::native::alpha_check(at::result_type(self, other), alpha);
  return ew::add_out(self, other, alpha, self);
}

at::Tensor& sub_out(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha,
                    at::Tensor& out) {
  at::native::sub_check(self, other);
  binary(BOp::Sub, Kind::Same, out, self, other, "sub",
         [alpha](at::Tensor& o, const at::Tensor& a, const at::Tensor& b) {
           at::sub_out(o, a, b, alpha);
         }, toKernelScalar(alpha), !alpha.isComplex());
  return out;
}
at::Tensor sub(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  at::native::sub_check(self, other);
  at::native::alpha_check(at::result_type(self, other), alpha);
  return binary(BOp::Sub, Kind::Same, at::Tensor(), self, other, "sub",
                [alpha](at::Tensor& o, const at::Tensor& a, const at::Tensor& b) {
                  at::sub_out(o, a, b, alpha);
                }, toKernelScalar(alpha), !alpha.isComplex());
}
at::Tensor& sub_(at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  at::native::alpha_check(at::result_type(self, other), alpha);
  return ew::sub_out(self, other, alpha, self);
}

// div with rounding_mode "trunc" / "floor" (None is true division).
BOp divMode(std::optional<c10::string_view> mode) {
  if (!mode) return BOp::Div;
  if (*mode == "trunc") return BOp::DivTrunc;
  TORCH_CHECK(*mode == "floor",
              "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '",
              *mode, "'");
  return BOp::DivFloor;
}
at::Tensor& div_mode_out(const at::Tensor& self, const at::Tensor& other,
                         std::optional<c10::string_view> mode, at::Tensor& out) {
  const BOp op = divMode(mode);
  std::optional<std::string> m;
  if (mode) m = std::string(*mode);
  binary(op, op == BOp::Div ? Kind::Float : Kind::Same, out, self, other, "div",
         [m](at::Tensor& o, const at::Tensor& a, const at::Tensor& b) { at::div_out(o, a, b, m); },
         1, op == BOp::Div || !integralInputs(self, other));
  return out;
}
at::Tensor div_mode(const at::Tensor& self, const at::Tensor& other,
                    std::optional<c10::string_view> mode) {
  const BOp op = divMode(mode);
  std::optional<std::string> m;
  if (mode) m = std::string(*mode);
  return binary(op, op == BOp::Div ? Kind::Float : Kind::Same, at::Tensor(), self, other, "div",
                [m](at::Tensor& o, const at::Tensor& a, const at::Tensor& b) {
                  at::div_out(o, a, b, m);
                }, 1, op == BOp::Div || !integralInputs(self, other));
}
at::Tensor& div_mode_(at::Tensor& self, const at::Tensor& other,
                      std::optional<c10::string_view> mode) {
  return ew::div_mode_out(self, other, mode, self);
}

// Activation backward: grad_input = f(grad_output, self or output).
#define NPU_BACKWARD(fn, OP)                                                                 \
  at::Tensor fn(const at::Tensor& grad_output, const at::Tensor& x) {                        \
    return binary(BOp::OP, Kind::Same, at::Tensor(), grad_output, x, #fn,                    \
                  [](at::Tensor& o, const at::Tensor& g, const at::Tensor& v) {              \
                    at::fn##_out(o, g, v);                                                   \
                  });                                                                        \
  }                                                                                          \
  at::Tensor& fn##_grad_input(const at::Tensor& grad_output, const at::Tensor& x,            \
                              at::Tensor& grad_input) {                                      \
    binary(BOp::OP, Kind::Same, grad_input, grad_output, x, #fn,                             \
           [](at::Tensor& o, const at::Tensor& g, const at::Tensor& v) {                     \
             at::fn##_out(o, g, v);                                                          \
           });                                                                               \
    return grad_input;                                                                       \
  }
NPU_BACKWARD(silu_backward, SiluBackward)
NPU_BACKWARD(sigmoid_backward, SigmoidBackward)
NPU_BACKWARD(tanh_backward, TanhBackward)

at::Tensor& threshold_backward_grad_input(const at::Tensor& grad_output, const at::Tensor& self,
                                          const at::Scalar& threshold, at::Tensor& grad_input) {
  binary(BOp::ThresholdBackward, Kind::Same, grad_input, grad_output, self, "threshold_backward",
         [threshold](at::Tensor& o, const at::Tensor& g, const at::Tensor& v) {
           at::threshold_backward_out(o, g, v, threshold);
         }, toKernelScalar(threshold));
  return grad_input;
}
at::Tensor threshold_backward(const at::Tensor& grad_output, const at::Tensor& self,
                              const at::Scalar& threshold) {
  return binary(BOp::ThresholdBackward, Kind::Same, at::Tensor(), grad_output, self,
                "threshold_backward",
                [threshold](at::Tensor& o, const at::Tensor& g, const at::Tensor& v) {
                  at::threshold_backward_out(o, g, v, threshold);
                }, toKernelScalar(threshold));
}

at::Tensor& gelu_backward_grad_input(const at::Tensor& grad_output, const at::Tensor& self,
                                     c10::string_view approximate, at::Tensor& grad_input) {
  const bool tanh = approximate == "tanh";
  binary(tanh ? BOp::GeluTanhBackward : BOp::GeluBackward, Kind::Same, grad_input, grad_output,
         self, "gelu_backward",
         [a = std::string(approximate)](at::Tensor& o, const at::Tensor& g, const at::Tensor& v) {
           at::gelu_backward_out(o, g, v, a);
         });
  return grad_input;
}
at::Tensor gelu_backward(const at::Tensor& grad_output, const at::Tensor& self,
                         c10::string_view approximate) {
  const bool tanh = approximate == "tanh";
  return binary(tanh ? BOp::GeluTanhBackward : BOp::GeluBackward, Kind::Same, at::Tensor(),
                grad_output, self, "gelu_backward",
                [a = std::string(approximate)](at::Tensor& o, const at::Tensor& g,
                                               const at::Tensor& v) {
                  at::gelu_backward_out(o, g, v, a);
                });
}

at::Tensor& leaky_relu_backward_grad_input(const at::Tensor& grad_output, const at::Tensor& self,
                                           const at::Scalar& slope, bool self_is_result,
                                           at::Tensor& grad_input) {
  binary(BOp::LeakyReluBackward, Kind::Same, grad_input, grad_output, self, "leaky_relu_backward",
         [slope, self_is_result](at::Tensor& o, const at::Tensor& g, const at::Tensor& v) {
           at::leaky_relu_backward_out(o, g, v, slope, self_is_result);
         }, toKernelScalar(slope));
  return grad_input;
}
at::Tensor leaky_relu_backward(const at::Tensor& grad_output, const at::Tensor& self,
                               const at::Scalar& slope, bool self_is_result) {
  return binary(BOp::LeakyReluBackward, Kind::Same, at::Tensor(), grad_output, self,
                "leaky_relu_backward",
                [slope, self_is_result](at::Tensor& o, const at::Tensor& g, const at::Tensor& v) {
                  at::leaky_relu_backward_out(o, g, v, slope, self_is_result);
                }, toKernelScalar(slope));
}

// ---- ternary ----------------------------------------------------------------------------

// out = f(a, b, c) with the CPU kernels' iterator: inputs promoted to a common dtype, which is
// cast to the output; `skip_first` leaves the first input (where's condition) out of it.
template <class Host>
at::Tensor ternary(TOp op, at::Tensor out, const at::Tensor& a, const at::Tensor& b,
                   const at::Tensor& c, const char* name, Host host, nk::Scalar p0 = 1) {
  const c10::DeviceGuard guard(a.is_cpu() ? b.device() : a.device());
  const bool where = op == TOp::Where;
  std::optional<at::ScalarType> dtype;
  at::TensorIteratorConfig config;
  if (where) {
    dtype = at::result_type(b, c);
    config.check_all_same_dtype(false).declare_static_dtype(*dtype);
  } else {
    config.promote_inputs_to_common_dtype(true)
        .cast_common_dtype_to_outputs(true)
        .enforce_safe_casting_to_output(true);
  }
  at::TensorIterator iter = config.add_output(out)
                                .add_const_input(a)
                                .add_const_input(b)
                                .add_const_input(c)
                                .allow_cpu_scalars(true)
                                .build();
  at::Tensor result = iter.output();
  if (iter.numel() == 0) return result;
  const std::optional<nk::DType> compute =
      where ? toKernelDType(*dtype) : computeDType(iter);
  const NPUStream stream = getCurrentNPUStream(deviceOf(result));
  if (compute && iterSupported(iter) && nk::ternary_supports(op, *compute)) {
    launchTask(stream, name,
               [op, o = iterOperand(iter, 0), x = iterOperand(iter, 1), y = iterOperand(iter, 2),
                z = iterOperand(iter, 3), k = *compute, p0] {
                 nk::ternary(op, o.get(), x.get(), y.get(), z.get(), k, p0);
               });
  } else {
    countHostKernelCall(name);
    launchTask(stream, name,
               [o = HostArg(result), x = HostArg(a), y = HostArg(b), z = HostArg(c), host] {
                 at::Tensor r = o.get();
                 host(r, x.get(), y.get(), z.get());
               });
  }
  return result;
}

at::Tensor& where_out(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other,
                      at::Tensor& out) {
  TORCH_CHECK(condition.scalar_type() == at::kBool || condition.scalar_type() == at::kByte,
              "where expected condition to be a boolean tensor, but got a tensor with dtype ",
              condition.scalar_type());
  ternary(TOp::Where, out, condition, self, other, "where",
          [](at::Tensor& o, const at::Tensor& c, const at::Tensor& a, const at::Tensor& b) {
            at::where_out(o, c, a, b);
          });
  return out;
}
at::Tensor where(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(condition.scalar_type() == at::kBool || condition.scalar_type() == at::kByte,
              "where expected condition to be a boolean tensor, but got a tensor with dtype ",
              condition.scalar_type());
  return ternary(TOp::Where, at::Tensor(), condition, self, other, "where",
                 [](at::Tensor& o, const at::Tensor& c, const at::Tensor& a, const at::Tensor& b) {
                   at::where_out(o, c, a, b);
                 });
}

at::Tensor& masked_fill_scalar_(at::Tensor& self, const at::Tensor& mask, const at::Scalar& value) {
  // CUDA's rule and words (masked_fill_ is exempt from the generic device check: its value may
  // be a 0-dim tensor on any device, but its mask, even a 0-dim one, must be on self's).
  TORCH_CHECK(self.device() == mask.device(),
              "expected self and mask to be on the same device, but got mask on ", mask.device(),
              " and self on ", self.device());
  TORCH_CHECK(mask.scalar_type() == at::kBool,
              "masked_fill_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  at::Tensor fill = at::native::wrapped_scalar_tensor(value);
  if (!at::isFloatingType(self.scalar_type()) && value.isFloatingPoint()) {
    fill = at::native::wrapped_scalar_tensor(value.toLong());  // masked_fill casts the value
  }
  if (at::has_internal_overlap(self) == at::MemOverlap::Yes) {
    // An expanded self: the CPU kernel accepts it (with its deprecation warning) and writes
    // only where mask is set, which a where() over aliased elements cannot promise.
    return callHostKernel<at::Tensor>(NPU_ATEN_OP("masked_fill_", "Scalar"), self, mask, value),
           self;
  }
  ternary(TOp::Where, self, mask, fill.to(self.scalar_type()), self, "masked_fill",
          [](at::Tensor& o, const at::Tensor& c, const at::Tensor& a, const at::Tensor& b) {
            at::where_out(o, c, a, b);
          });
  return self;
}
at::Tensor& masked_fill_tensor_(at::Tensor& self, const at::Tensor& mask, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0,
              "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  return ew::masked_fill_scalar_(self, mask, value.item());
}

#define NPU_ADDC(fn, OP)                                                                     \
  at::Tensor& fn##_out(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2,   \
                       const at::Scalar& value, at::Tensor& out) {                           \
    ternary(TOp::OP, out, self, t1, t2, #fn,                                                 \
            [value](at::Tensor& o, const at::Tensor& a, const at::Tensor& b,                 \
                    const at::Tensor& c) { at::fn##_out(o, a, b, c, value); },               \
            toKernelScalar(value));                                                          \
    return out;                                                                              \
  }                                                                                          \
  at::Tensor fn(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2,          \
                const at::Scalar& value) {                                                   \
    return ternary(TOp::OP, at::Tensor(), self, t1, t2, #fn,                                 \
                   [value](at::Tensor& o, const at::Tensor& a, const at::Tensor& b,          \
                           const at::Tensor& c) { at::fn##_out(o, a, b, c, value); },        \
                   toKernelScalar(value));                                                   \
  }                                                                                          \
  at::Tensor& fn##_(at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2,            \
                    const at::Scalar& value) {                                               \
    return ew::fn##_out(self, t1, t2, value, self);                                              \
  }
NPU_ADDC(addcmul, Addcmul)
NPU_ADDC(addcdiv, Addcdiv)

at::Tensor& lerp_tensor_out(const at::Tensor& self, const at::Tensor& end,
                            const at::Tensor& weight, at::Tensor& out) {
  ternary(TOp::Lerp, out, self, end, weight, "lerp",
          [](at::Tensor& o, const at::Tensor& a, const at::Tensor& b, const at::Tensor& w) {
            at::lerp_out(o, a, b, w);
          });
  return out;
}
at::Tensor lerp_tensor(const at::Tensor& self, const at::Tensor& end, const at::Tensor& weight) {
  return ternary(TOp::Lerp, at::Tensor(), self, end, weight, "lerp",
                 [](at::Tensor& o, const at::Tensor& a, const at::Tensor& b,
                    const at::Tensor& w) { at::lerp_out(o, a, b, w); });
}
at::Tensor& lerp_tensor_(at::Tensor& self, const at::Tensor& end, const at::Tensor& weight) {
  return ew::lerp_tensor_out(self, end, weight, self);
}
at::Tensor& lerp_scalar_out(const at::Tensor& self, const at::Tensor& end,
                            const at::Scalar& weight, at::Tensor& out) {
  return ew::lerp_tensor_out(self, end, at::native::wrapped_scalar_tensor(weight), out);
}
at::Tensor lerp_scalar(const at::Tensor& self, const at::Tensor& end, const at::Scalar& weight) {
  return ew::lerp_tensor(self, end, at::native::wrapped_scalar_tensor(weight));
}
at::Tensor& lerp_scalar_(at::Tensor& self, const at::Tensor& end, const at::Scalar& weight) {
  return ew::lerp_tensor_out(self, end, at::native::wrapped_scalar_tensor(weight), self);
}


// isneginf / isposinf (the attention mask check of _safe_softmax): a comparison with -inf/+inf.
template <bool kPositive>
at::Tensor& isinf_signed_out(const at::Tensor& self, at::Tensor& out) {
  if (!at::isFloatingType(self.scalar_type())) {
    callHostKernel<at::Tensor>(kPositive ? NPU_ATEN_OP("isposinf", "out")
                                         : NPU_ATEN_OP("isneginf", "out"),
                               self, out);
    return out;
  }
  const double inf = std::numeric_limits<double>::infinity();
  return ew::eq_scalar_out(self, kPositive ? inf : -inf, out);
}

}  // namespace ew
}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
#define NPU_REGISTER_UNARY(fn, OP, KIND)                                                     \
  NPU_IMPL(m, #fn, ew::fn);                                                                  \
  NPU_IMPL(m, #fn "_", ew::fn##_);                                                           \
  NPU_IMPL(m, #fn ".out", ew::fn##_out);
  NPU_UNARY_OPS(NPU_REGISTER_UNARY)
#undef NPU_REGISTER_UNARY
  NPU_IMPL(m, "round", ew::round);
  NPU_IMPL(m, "round_", ew::round_);
  NPU_IMPL(m, "round.out", ew::round_out);
  NPU_IMPL(m, "relu", ew::relu);
  NPU_IMPL(m, "relu_", ew::relu_);
  NPU_IMPL(m, "logical_not.out", ew::logical_not_out);
  NPU_IMPL(m, "gelu", ew::gelu);
  NPU_IMPL(m, "gelu_", ew::gelu_);
  NPU_IMPL(m, "gelu.out", ew::gelu_out);
  NPU_IMPL(m, "leaky_relu", ew::leaky_relu);
  NPU_IMPL(m, "leaky_relu_", ew::leaky_relu_);
  NPU_IMPL(m, "leaky_relu.out", ew::leaky_relu_out);
  NPU_IMPL(m, "softplus", ew::softplus);
  NPU_IMPL(m, "softplus.out", ew::softplus_out);
  NPU_IMPL(m, "clamp", ew::clamp);
  NPU_IMPL(m, "clamp_", ew::clamp_);
  NPU_IMPL(m, "clamp.out", ew::clamp_out);

#define NPU_REGISTER_BINARY(fn, OP, KIND, KERNEL_OK)                                         \
  NPU_IMPL(m, #fn ".Tensor", ew::fn);                                                        \
  NPU_IMPL(m, #fn "_.Tensor", ew::fn##_);                                                    \
  NPU_IMPL(m, #fn ".out", ew::fn##_out);
  // maximum/minimum/logical_*/atan2/hypot/copysign name their overloads differently.
  NPU_REGISTER_BINARY(mul, , , ) NPU_REGISTER_BINARY(div, , , )
  NPU_REGISTER_BINARY(copysign, , , )
#undef NPU_REGISTER_BINARY
  NPU_IMPL(m, "pow.Tensor_Tensor", ew::pow);
  NPU_IMPL(m, "pow_.Tensor", ew::pow_);
  NPU_IMPL(m, "pow.Tensor_Tensor_out", ew::pow_out);
  NPU_IMPL(m, "pow.Tensor_Scalar", ew::pow_scalar);
  NPU_IMPL(m, "pow_.Scalar", ew::pow_scalar_);
  NPU_IMPL(m, "pow.Tensor_Scalar_out", ew::pow_scalar_out);
  NPU_IMPL(m, "maximum", ew::maximum);
  NPU_IMPL(m, "maximum.out", ew::maximum_out);
  NPU_IMPL(m, "minimum", ew::minimum);
  NPU_IMPL(m, "minimum.out", ew::minimum_out);
  NPU_IMPL(m, "atan2", ew::atan2);
  NPU_IMPL(m, "atan2_", ew::atan2_);
  NPU_IMPL(m, "atan2.out", ew::atan2_out);
  NPU_IMPL(m, "hypot", ew::hypot);
  NPU_IMPL(m, "hypot_", ew::hypot_);
  NPU_IMPL(m, "hypot.out", ew::hypot_out);
  NPU_IMPL(m, "logical_and.out", ew::logical_and_out);
  NPU_IMPL(m, "logical_or.out", ew::logical_or_out);
  NPU_IMPL(m, "logical_xor.out", ew::logical_xor_out);
#define NPU_REGISTER_BITWISE(fn)                                                             \
  NPU_IMPL(m, #fn ".Tensor", ew::fn);                                                        \
  NPU_IMPL(m, #fn "_.Tensor", ew::fn##_);                                                    \
  NPU_IMPL(m, #fn ".Tensor_out", ew::fn##_out);
  NPU_REGISTER_BITWISE(bitwise_and) NPU_REGISTER_BITWISE(bitwise_or)
  NPU_REGISTER_BITWISE(bitwise_xor) NPU_REGISTER_BITWISE(remainder) NPU_REGISTER_BITWISE(fmod)
#undef NPU_REGISTER_BITWISE
#define NPU_REGISTER_COMPARE(fn)                                                             \
  NPU_IMPL(m, #fn ".Tensor", ew::fn);                                                        \
  NPU_IMPL(m, #fn "_.Tensor", ew::fn##_);                                                    \
  NPU_IMPL(m, #fn ".Tensor_out", ew::fn##_out);                                              \
  NPU_IMPL(m, #fn ".Scalar", ew::fn##_scalar);                                               \
  NPU_IMPL(m, #fn "_.Scalar", ew::fn##_scalar_);                                             \
  NPU_IMPL(m, #fn ".Scalar_out", ew::fn##_scalar_out);
  NPU_REGISTER_COMPARE(eq) NPU_REGISTER_COMPARE(ne) NPU_REGISTER_COMPARE(lt)
  NPU_REGISTER_COMPARE(le) NPU_REGISTER_COMPARE(gt) NPU_REGISTER_COMPARE(ge)
#undef NPU_REGISTER_COMPARE
  NPU_IMPL(m, "add.Tensor", ew::add);
  NPU_IMPL(m, "add_.Tensor", ew::add_);
  NPU_IMPL(m, "add.out", ew::add_out);
  NPU_IMPL(m, "sub.Tensor", ew::sub);
  NPU_IMPL(m, "sub_.Tensor", ew::sub_);
  NPU_IMPL(m, "sub.out", ew::sub_out);
  NPU_IMPL(m, "div.Tensor_mode", ew::div_mode);
  NPU_IMPL(m, "div_.Tensor_mode", ew::div_mode_);
  NPU_IMPL(m, "div.out_mode", ew::div_mode_out);
  NPU_IMPL(m, "silu_backward", ew::silu_backward);
  NPU_IMPL(m, "silu_backward.grad_input", ew::silu_backward_grad_input);
  NPU_IMPL(m, "sigmoid_backward", ew::sigmoid_backward);
  NPU_IMPL(m, "sigmoid_backward.grad_input", ew::sigmoid_backward_grad_input);
  NPU_IMPL(m, "tanh_backward", ew::tanh_backward);
  NPU_IMPL(m, "tanh_backward.grad_input", ew::tanh_backward_grad_input);
  NPU_IMPL(m, "threshold_backward", ew::threshold_backward);
  NPU_IMPL(m, "threshold_backward.grad_input", ew::threshold_backward_grad_input);
  NPU_IMPL(m, "gelu_backward", ew::gelu_backward);
  NPU_IMPL(m, "gelu_backward.grad_input", ew::gelu_backward_grad_input);
  NPU_IMPL(m, "leaky_relu_backward", ew::leaky_relu_backward);
  NPU_IMPL(m, "leaky_relu_backward.grad_input", ew::leaky_relu_backward_grad_input);

  NPU_IMPL(m, "isneginf.out", ew::isinf_signed_out<false>);
  NPU_IMPL(m, "isposinf.out", ew::isinf_signed_out<true>);
  NPU_IMPL(m, "where.self", ew::where);
  NPU_IMPL(m, "where.self_out", ew::where_out);
  NPU_IMPL(m, "masked_fill_.Scalar", ew::masked_fill_scalar_);
  NPU_IMPL(m, "masked_fill_.Tensor", ew::masked_fill_tensor_);
  NPU_IMPL(m, "addcmul", ew::addcmul);
  NPU_IMPL(m, "addcmul_", ew::addcmul_);
  NPU_IMPL(m, "addcmul.out", ew::addcmul_out);
  NPU_IMPL(m, "addcdiv", ew::addcdiv);
  NPU_IMPL(m, "addcdiv_", ew::addcdiv_);
  NPU_IMPL(m, "addcdiv.out", ew::addcdiv_out);
  NPU_IMPL(m, "lerp.Tensor", ew::lerp_tensor);
  NPU_IMPL(m, "lerp_.Tensor", ew::lerp_tensor_);
  NPU_IMPL(m, "lerp.Tensor_out", ew::lerp_tensor_out);
  NPU_IMPL(m, "lerp.Scalar", ew::lerp_scalar);
  NPU_IMPL(m, "lerp_.Scalar", ew::lerp_scalar_);
  NPU_IMPL(m, "lerp.Scalar_out", ew::lerp_scalar_out);
}

}  // namespace torch_npu::native
