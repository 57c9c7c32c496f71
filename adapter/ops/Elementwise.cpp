// Elementwise aten ops on the operator library's unary / binary / ternary kernels.
//
// How it works:
//  - PyTorch's TensorIterator does the ATen half of the work: broadcasting, type promotion,
//    allocating or resizing the output, overlap checks and coalescing dimensions. Its operands
//    become kernel descriptors (KernelBridge.h) and the kernel is queued on the stream.
//  - Each op has a body, body(name, out, args...): it runs the op into `out` (undefined: the
//    iterator allocates it) with our kernel and returns the output, or nullopt when the library
//    does not cover the call (complex dtypes, integer division by a tensor that may hold zeros).
//  - One row of the table NPU_ELEMENTWISE_OPS (at the end) per op names its functional,
//    in-place and out= overloads and its body; Forms makes the three kernels from the body and
//    the row registers them. A call the body declines runs ATen's CPU kernel of the same
//    overload on the stream (callHostKernel, ExecutionPaths.h), with the same results and errors.
//  - Adding an op: its kernel in kernels/, a body here (most are unaryBody / binaryBody with
//    the kernel's enum), one row in the table.
#include <ATen/MemoryOverlap.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/ops/mish_backward_native.h>
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <limits>
#include <string>
#include <string_view>

#include "DeviceCheck.h"
#include "ExecutionPaths.h"
#include "KernelBridge.h"
#include "NPUStream.h"

namespace torch_npu::native {
namespace {

using UOp = nk::UnaryOp;
using BOp = nk::BinaryOp;
using TOp = nk::TernaryOp;
// The output of a body that ran our kernel; nullopt: ATen's CPU kernel should run the call.
using Result = std::optional<at::Tensor>;

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

// ---- the three kernel families ----------------------------------------------------------

Result unary(const char* name, UOp op, Kind kind, const at::Tensor& out, const at::Tensor& self,
             nk::Scalar p0 = {}, nk::Scalar p1 = {}) {
  const c10::DeviceGuard guard(self.device());
  at::TensorIterator iter = buildUnary(kind, out, self);
  at::Tensor result = iter.output();
  if (iter.numel() == 0) return result;
  const std::optional<nk::DType> compute = computeDType(iter);
  if (!compute || !iterSupported(iter) || !nk::unary_supports(op, *compute)) return std::nullopt;
  launchKernelTask(streamOf(result), name, iter.numel(),
                   [op, o = iterOperand(iter, 0), i = iterOperand(iter, 1), c = *compute, p0,
                    p1] {
                     nk::unary(op, o.get(), i.get(), c, p0, p1);
                   });
  return result;
}

// ATen's CPU mul and division (true, trunc and floor) read a scalar second operand of a float16
// / bfloat16 op unrounded; every other binary op casts it to the tensor's dtype first
// (ScalarRead; both measured against the CPU in test_fidelity.py).
ScalarRead scalarReadOf(BOp op) {
  const bool original = op == BOp::Mul || op == BOp::Div || op == BOp::DivTrunc ||
                        op == BOp::DivFloor;
  return original ? ScalarRead::kOriginalScalar : ScalarRead::kCommon;
}

// `kernel_ok` false: the call is ATen's (integer division, whose CPU kernel raises
// ZeroDivisionError).
// A device input of a float16 / bfloat16 op whose dtype differs (an integer tensor, a float32
// 0-dim tensor), cast to the half dtype on the device first, as ATen's CPU iterator casts it:
// our kernels would read it in float. CPU scalars are rounded by iterOperandsRounded.
const at::Tensor& castToReducedCommon(const at::Tensor& t, at::ScalarType common, bool keep,
                                      c10::MaybeOwned<at::Tensor>& holder) {
  if (keep || t.scalar_type() == common || t.is_cpu()) return t;
  holder = c10::MaybeOwned<at::Tensor>::owned(t.to(common));
  return *holder;
}

Result binary(const char* name, BOp op, Kind kind, const at::Tensor& out, const at::Tensor& a_in,
              const at::Tensor& b_in, nk::Scalar p0 = 1, bool kernel_ok = true) {
  const c10::DeviceGuard guard(a_in.is_cpu() ? b_in.device() : a_in.device());
  c10::MaybeOwned<at::Tensor> a_cast, b_cast;
  const at::Tensor* a = &a_in;
  const at::Tensor* b = &b_in;
  if (a_in.scalar_type() != b_in.scalar_type()) {  // the common case skips result_type
    const at::ScalarType common = at::result_type(a_in, b_in);
    if (at::isReducedFloatingType(common)) {
      const bool keep_b = scalarReadOf(op) == ScalarRead::kOriginalScalar && b_in.numel() == 1;
      a = &castToReducedCommon(a_in, common, false, a_cast);
      b = &castToReducedCommon(b_in, common, keep_b, b_cast);
    }
  }
  at::TensorIterator iter = buildBinary(kind, out, *a, *b);
  at::Tensor result = iter.output();
  if (iter.numel() == 0) return result;
  const std::optional<nk::DType> compute = computeDType(iter);
  if (!kernel_ok || !compute || !iterSupported(iter) || !nk::binary_supports(op, *compute)) {
    return std::nullopt;
  }
  std::optional<std::vector<Operand>> operands = iterOperandsRounded(iter, scalarReadOf(op));
  if (!operands) return std::nullopt;
  launchKernelTask(streamOf(result), name, iter.numel(),
                   [op, o = (*operands)[0], x = (*operands)[1], y = (*operands)[2], c = *compute,
                    p0] {
                     nk::binary(op, o.get(), x.get(), y.get(), c, p0);
                   });
  return result;
}

// out = f(a, b, c) with the CPU kernels' iterator: inputs promoted to a common dtype, which is
// cast to the output; where's condition stays out of the promotion.
Result ternary(const char* name, TOp op, const at::Tensor& out, const at::Tensor& a,
               const at::Tensor& b, const at::Tensor& c, nk::Scalar p0 = 1) {
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
  const std::optional<nk::DType> compute = where ? toKernelDType(*dtype) : computeDType(iter);
  if (!compute || !iterSupported(iter) || !nk::ternary_supports(op, *compute)) return std::nullopt;
  launchKernelTask(streamOf(result), name, iter.numel(),
                   [op, o = iterOperand(iter, 0), x = iterOperand(iter, 1),
                    y = iterOperand(iter, 2), z = iterOperand(iter, 3), k = *compute, p0] {
                     nk::ternary(op, o.get(), x.get(), y.get(), z.get(), k, p0);
                   });
  return result;
}

// ---- bodies: body(name, out, args...) -> the output, or nullopt (ATen's kernel runs it) ----

template <UOp kOp, Kind kKind>
Result unaryBody(const char* name, const at::Tensor& out, const at::Tensor& self) {
  return unary(name, kOp, kKind, out, self);
}

template <BOp kOp, Kind kKind>
Result binaryBody(const char* name, const at::Tensor& out, const at::Tensor& self,
                  const at::Tensor& other) {
  return binary(name, kOp, kKind, out, self, other);
}

// Integer division and remainder raise ZeroDivisionError on the CPU: ATen's kernel keeps that.
bool integralInputs(const at::Tensor& a, const at::Tensor& b) {
  return at::isIntegralType(at::result_type(a, b), /*includeBool=*/true);
}

template <BOp kOp>
Result divisionBody(const char* name, const at::Tensor& out, const at::Tensor& self,
                         const at::Tensor& other) {
  return binary(name, kOp, Kind::Same, out, self, other, 1, !integralInputs(self, other));
}

// The .Scalar overloads: the scalar becomes a wrapped CPU tensor, as PyTorch's own do.
template <BOp kOp>
Result compareScalarBody(const char* name, const at::Tensor& out, const at::Tensor& self,
                         const at::Scalar& other) {
  return binary(name, kOp, Kind::Compare, out, self, at::native::wrapped_scalar_tensor(other));
}

Result reluBody(const char* name, const at::Tensor& out, const at::Tensor& self) {
  TORCH_CHECK(self.scalar_type() != at::kBool, "Boolean inputs not supported for relu");
  return unary(name, UOp::Relu, Kind::Same, out, self);
}

Result logicalNotBody(const char* name, const at::Tensor& out, const at::Tensor& self) {
  const c10::DeviceGuard guard(self.device());
  // The CPU kernel's iterator: any output dtype, the input's dtype for the math.
  at::TensorIterator iter = at::TensorIteratorConfig()
                                .check_all_same_dtype(false)
                                .add_output(out)
                                .add_const_input(self)
                                .build();
  if (iter.numel() == 0) return out;
  const std::optional<nk::DType> compute = toKernelDType(self.scalar_type());
  if (!compute || !iterSupported(iter)) return std::nullopt;
  launchKernelTask(streamOf(out), name, iter.numel(),
                   [o = iterOperand(iter, 0), i = iterOperand(iter, 1), c = *compute] {
                     nk::unary(UOp::LogicalNot, o.get(), i.get(), c);
                   });
  return out;
}

bool geluTanh(c10::string_view approximate) {
  const bool tanh = approximate == "tanh";
  TORCH_CHECK(tanh || approximate == "none", "approximate argument must be either none or tanh.");
  return tanh;
}

Result geluBody(const char* name, const at::Tensor& out, const at::Tensor& self,
                c10::string_view approximate) {
  return unary(name, geluTanh(approximate) ? UOp::GeluTanh : UOp::Gelu, Kind::Same, out, self);
}

Result leakyReluBody(const char* name, const at::Tensor& out, const at::Tensor& self,
                     const at::Scalar& slope) {
  return unary(name, UOp::LeakyRelu, Kind::Same, out, self, toKernelScalar(slope));
}

Result softplusBody(const char* name, const at::Tensor& out, const at::Tensor& self,
                    const at::Scalar& beta, const at::Scalar& threshold) {
  return unary(name, UOp::Softplus, Kind::Same, out, self, toKernelScalar(beta),
               toKernelScalar(threshold));
}

// clamp(min, max) with scalar bounds; a missing bound is +-inf (or the integer limits). A float
// bound on an integer tensor promotes (clamp(int_tensor, 0.5) is float): ATen's kernel.
Result clampBody(const char* name, const at::Tensor& out, const at::Tensor& self,
                 const std::optional<at::Scalar>& min, const std::optional<at::Scalar>& max) {
  TORCH_CHECK(min.has_value() || max.has_value(),
              "torch.clamp: At least one of 'min' or 'max' must not be None");
  const bool float_bounds = (min && min->isFloatingPoint()) || (max && max->isFloatingPoint());
  if (float_bounds && !at::isFloatingType(self.scalar_type())) return std::nullopt;
  nk::Scalar lo, hi;
  lo.f = -std::numeric_limits<double>::infinity();
  lo.i = std::numeric_limits<int64_t>::min();
  hi.f = std::numeric_limits<double>::infinity();
  hi.i = std::numeric_limits<int64_t>::max();
  if (min) lo = toKernelScalar(*min);
  if (max) hi = toKernelScalar(*max);
  return unary(name, UOp::Clamp, Kind::Same, out, self, lo, hi);
}

// pow(tensor, scalar): the common exponents are unary kernels.
Result powScalarBody(const char* name, const at::Tensor& out, const at::Tensor& self,
                     const at::Scalar& exponent) {
  const bool float_exp = exponent.isFloatingPoint();
  if (!float_exp || at::isFloatingType(self.scalar_type())) {
    if (exponent.equal(2)) return unary(name, UOp::Square, Kind::Same, out, self);
    if (exponent.equal(1)) {
      if (out.defined() && out.is_same(self)) return out;
      // x ** 1 (pow(x, 2)'s backward asks for it) is x * 1, exact for every value (NaN, -0,
      // inf), with pow's type promotion: not the generic std::pow kernel (20x slower).
      return binary(name, BOp::Mul, Kind::Same, out, self,
                    at::native::wrapped_scalar_tensor(exponent));
    }
    // float16's CPU kernel takes std::pow for +-0.5 (pow(-inf, 0.5) = inf, pow(-0, 0.5) = +0;
    // sqrt gives NaN and -0): there, so do we.
    if (float_exp && exponent.toDouble() == 0.5 && self.scalar_type() != at::kHalf) {
      return unary(name, UOp::Sqrt, Kind::Same, out, self);
    }
  }
  // A floating tensor to an integral exponent (3, -1, -2, 2.0, ...; int or float Scalar) or to
  // -0.5: unary kernels instead of the generic std::pow one (20-70x slower). -1 and -0.5 are
  // the CPU device's own formulas (1 / x, 1 / sqrt(x); -0.5 not for float16); the others are
  // x^|e| by squaring in double (kernels PowInt, within std::pow's float result). Exponent 0
  // (ones, even for NaN) and float64 tensors stay on the generic kernel.
  if (at::isFloatingType(self.scalar_type()) && !exponent.isComplex() &&
      !exponent.isBoolean()) {
    const double e = exponent.toDouble();
    if (e == -1.0) return unary(name, UOp::Reciprocal, Kind::Same, out, self);
    if (e == -0.5 && self.scalar_type() != at::kHalf) {
      return unary(name, UOp::Rsqrt, Kind::Same, out, self);
    }
    if (self.scalar_type() != at::kDouble && e != 0.0 && e == std::trunc(e) &&
        std::fabs(e) <= 64.0) {
      nk::Scalar n;
      n.i = static_cast<int64_t>(e);
      n.f = e;
      return unary(name, UOp::PowInt, Kind::Same, out, self, n);
    }
  }
  // Anything else, pow(int_tensor, 0.5) (float: promotion) included, is the binary kernel.
  return binary(name, BOp::Pow, Kind::Same, out, self, at::native::wrapped_scalar_tensor(exponent));
}

// add / sub with alpha: ATen's checks; a complex alpha is ATen's kernel (a kernel scalar
// cannot hold it).
Result addBody(const char* name, const at::Tensor& out, const at::Tensor& self,
               const at::Tensor& other, const at::Scalar& alpha) {
  at::native::alpha_check(at::result_type(self, other), alpha);
  if (alpha.isComplex()) return std::nullopt;
  return binary(name, BOp::Add, Kind::Same, out, self, other, toKernelScalar(alpha));
}
Result subBody(const char* name, const at::Tensor& out, const at::Tensor& self,
               const at::Tensor& other, const at::Scalar& alpha) {
  at::native::sub_check(self, other);
  at::native::alpha_check(at::result_type(self, other), alpha);
  if (alpha.isComplex()) return std::nullopt;
  return binary(name, BOp::Sub, Kind::Same, out, self, other, toKernelScalar(alpha));
}

// div with rounding_mode "trunc" / "floor" (None is true division).
Result divModeBody(const char* name, const at::Tensor& out, const at::Tensor& self,
                   const at::Tensor& other, std::optional<c10::string_view> mode) {
  BOp op = BOp::Div;
  if (mode && *mode == "trunc") {
    op = BOp::DivTrunc;
  } else if (mode) {
    TORCH_CHECK(*mode == "floor",
                "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '",
                *mode, "'");
    op = BOp::DivFloor;
  }
  return binary(name, op, op == BOp::Div ? Kind::Float : Kind::Same, out, self, other, 1,
                op == BOp::Div || !integralInputs(self, other));
}

// Activation backward: grad_input = f(grad_output, self or output).
Result thresholdBackwardBody(const char* name, const at::Tensor& grad_input,
                             const at::Tensor& grad_output, const at::Tensor& self,
                             const at::Scalar& threshold) {
  return binary(name, BOp::ThresholdBackward, Kind::Same, grad_input, grad_output, self,
                toKernelScalar(threshold));
}
Result geluBackwardBody(const char* name, const at::Tensor& grad_input,
                        const at::Tensor& grad_output, const at::Tensor& self,
                        c10::string_view approximate) {
  const BOp op = approximate == "tanh" ? BOp::GeluTanhBackward : BOp::GeluBackward;
  return binary(name, op, Kind::Same, grad_input, grad_output, self);
}
Result leakyReluBackwardBody(const char* name, const at::Tensor& grad_input,
                             const at::Tensor& grad_output, const at::Tensor& self,
                             const at::Scalar& slope, bool self_is_result) {
  return binary(name, BOp::LeakyReluBackward, Kind::Same, grad_input, grad_output, self,
                toKernelScalar(slope));
}

// isneginf / isposinf (the attention mask check of _safe_softmax): a comparison with -inf/+inf.
template <bool kPositive>
Result isInfSignedBody(const char* name, const at::Tensor& out, const at::Tensor& self) {
  if (!at::isFloatingType(self.scalar_type())) return std::nullopt;
  const double inf = std::numeric_limits<double>::infinity();
  return compareScalarBody<BOp::Eq>(name, out, self, kPositive ? inf : -inf);
}

Result whereBody(const char* name, const at::Tensor& out, const at::Tensor& condition,
                 const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(condition.scalar_type() == at::kBool || condition.scalar_type() == at::kByte,
              "where expected condition to be a boolean tensor, but got a tensor with dtype ",
              condition.scalar_type());
  // torch_npu takes a CPU 0-dim condition, self and other together (where(cpu_scalar > 0,
  // cpu_scalar, x)); TensorIterator allows one CPU scalar beside device tensors, so the others
  // are copied to the device first.
  const at::Tensor* operands[] = {&condition, &self, &other};
  std::optional<c10::Device> device;
  int cpu_scalars = 0;
  for (const at::Tensor* t : operands) {
    if (t->is_cpu() && t->dim() == 0) {
      ++cpu_scalars;
    } else if (!t->is_cpu() && !device) {
      device = t->device();
    }
  }
  if (cpu_scalars > 1 && device) {
    auto onDevice = [&](const at::Tensor& t) { return t.is_cpu() ? t.to(*device) : t; };
    return ternary(name, TOp::Where, out, onDevice(condition), onDevice(self), onDevice(other));
  }
  return ternary(name, TOp::Where, out, condition, self, other);
}

// masked_fill_ (in place only: out is self) is where(mask, value, self).
Result maskedFillBody(const char* name, const at::Tensor& out, const at::Tensor& self,
                      const at::Tensor& mask, const at::Scalar& value) {
  // CUDA's rule and words (masked_fill_ is exempt from the generic device check: its value may
  // be a 0-dim tensor on any device, but its mask, even a 0-dim one, must be on self's).
  TORCH_CHECK(self.device() == mask.device(),
              "expected self and mask to be on the same device, but got mask on ", mask.device(),
              " and self on ", self.device());
  TORCH_CHECK(mask.scalar_type() == at::kBool,
              "masked_fill_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  // An expanded self: the CPU kernel accepts it (with its deprecation warning) and writes only
  // where mask is set, which a where() over aliased elements cannot promise.
  if (at::has_internal_overlap(self) == at::MemOverlap::Yes) return std::nullopt;
  at::Tensor fill = at::native::wrapped_scalar_tensor(value);
  if (!at::isFloatingType(self.scalar_type()) && value.isFloatingPoint()) {
    fill = at::native::wrapped_scalar_tensor(value.toLong());  // masked_fill casts the value
  }
  return ternary(name, TOp::Where, out, mask, fill.to(self.scalar_type()), self);
}
Result maskedFillTensorBody(const char* name, const at::Tensor& out, const at::Tensor& self,
                            const at::Tensor& mask, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0,
              "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  return maskedFillBody(name, out, self, mask, value.item());
}

template <TOp kOp>
Result addcBody(const char* name, const at::Tensor& out, const at::Tensor& self,
                const at::Tensor& t1, const at::Tensor& t2, const at::Scalar& value) {
  return ternary(name, kOp, out, self, t1, t2, toKernelScalar(value));
}

Result lerpBody(const char* name, const at::Tensor& out, const at::Tensor& self,
                const at::Tensor& end, const at::Tensor& weight) {
  return ternary(name, TOp::Lerp, out, self, end, weight);
}
Result lerpScalarBody(const char* name, const at::Tensor& out, const at::Tensor& self,
                      const at::Tensor& end, const at::Scalar& weight) {
  return ternary(name, TOp::Lerp, out, self, end, at::native::wrapped_scalar_tensor(weight));
}

// ---- the registered forms ---------------------------------------------------------------

using device_check::OpName;

// The handle of aten::<kName> ("add.Tensor"), looked up once.
template <OpName kName>
const c10::OperatorHandle& atenOp() {
  static const c10::OperatorHandle handle = [] {
    const std::string_view name = kName.view();
    const size_t dot = name.find('.');
    const std::string base(name.substr(0, dot));
    const std::string overload(dot == std::string_view::npos ? "" : name.substr(dot + 1));
    return c10::Dispatcher::singleton().findSchemaOrThrow(("aten::" + base).c_str(),
                                                          overload.c_str());
  }();
  return handle;
}

// The name of an op's kernels (profiles, errors): the row's first overload without its
// overload name and in-place underscore ("masked_fill_.Scalar" -> "masked_fill").
struct KernelName {
  char chars[64] = {};
  constexpr KernelName(std::string_view f, std::string_view i, std::string_view o) {
    std::string_view name = !f.empty() ? f : !i.empty() ? i : o;
    name = name.substr(0, name.find('.'));
    if (name.ends_with('_')) name.remove_suffix(1);
    for (size_t k = 0; k < name.size() && k + 1 < sizeof(chars); ++k) chars[k] = name[k];
  }
};

// The kernels of one op from its body kBody(name, out, self, rest...): the functional form
// fn(self, rest...), the in-place form fn_(self, rest...) and the out= form
// fn.out(self, rest..., out), overloads kFunctional, kInplace and kOut. A call the body declines
// runs ATen's CPU kernel of the same overload with the same arguments.
template <auto kBody, OpName kFunctional, OpName kInplace, OpName kOut>
struct Forms;

template <class... Rest,
          Result (*kBody)(const char*, const at::Tensor&, const at::Tensor&, Rest...),
          OpName kFunctional, OpName kInplace, OpName kOut>
struct Forms<kBody, kFunctional, kInplace, kOut> {
  static constexpr KernelName kName{kFunctional.view(), kInplace.view(), kOut.view()};

  static at::Tensor functional(const at::Tensor& self, Rest... rest) {
    if (Result r = kBody(kName.chars, at::Tensor(), self, rest...)) return *std::move(r);
    return callHostKernel<at::Tensor>(atenOp<kFunctional>(), self, rest...);
  }
  static at::Tensor& inplace(at::Tensor& self, Rest... rest) {
    if (!kBody(kName.chars, self, self, rest...)) {
      callHostKernel<void>(atenOp<kInplace>(), self, rest...);
    }
    return self;
  }
  static at::Tensor& out(const at::Tensor& self, Rest... rest, at::Tensor& out) {
    if (!kBody(kName.chars, out, self, rest...)) {
      callHostKernel<void>(atenOp<kOut>(), self, rest..., out);
    }
    return out;
  }
};

// The table: X(functional, in-place, out=, body), one row per op; "" where ATen has no such
// overload. A body that names a template is in parentheses (the macro's commas).
#define NPU_ELEMENTWISE_OPS(X)                                                                   \
  /* unary */                                                                                    \
  X("neg", "neg_", "neg.out", (unaryBody<UOp::Neg, Kind::Same>))                                 \
  X("abs", "abs_", "abs.out", (unaryBody<UOp::Abs, Kind::Same>))                                 \
  X("sign", "sign_", "sign.out", (unaryBody<UOp::Sign, Kind::Same>))                             \
  X("reciprocal", "reciprocal_", "reciprocal.out", (unaryBody<UOp::Reciprocal, Kind::Float>))    \
  X("sqrt", "sqrt_", "sqrt.out", (unaryBody<UOp::Sqrt, Kind::Float>))                            \
  X("rsqrt", "rsqrt_", "rsqrt.out", (unaryBody<UOp::Rsqrt, Kind::Float>))                        \
  X("exp", "exp_", "exp.out", (unaryBody<UOp::Exp, Kind::Float>))                                \
  X("exp2", "exp2_", "exp2.out", (unaryBody<UOp::Exp2, Kind::Float>))                            \
  X("expm1", "expm1_", "expm1.out", (unaryBody<UOp::Expm1, Kind::Float>))                        \
  X("log", "log_", "log.out", (unaryBody<UOp::Log, Kind::Float>))                                \
  X("log2", "log2_", "log2.out", (unaryBody<UOp::Log2, Kind::Float>))                            \
  X("log10", "log10_", "log10.out", (unaryBody<UOp::Log10, Kind::Float>))                        \
  X("log1p", "log1p_", "log1p.out", (unaryBody<UOp::Log1p, Kind::Float>))                        \
  X("sin", "sin_", "sin.out", (unaryBody<UOp::Sin, Kind::Float>))                                \
  X("cos", "cos_", "cos.out", (unaryBody<UOp::Cos, Kind::Float>))                                \
  X("tan", "tan_", "tan.out", (unaryBody<UOp::Tan, Kind::Float>))                                \
  X("asin", "asin_", "asin.out", (unaryBody<UOp::Asin, Kind::Float>))                            \
  X("acos", "acos_", "acos.out", (unaryBody<UOp::Acos, Kind::Float>))                            \
  X("atan", "atan_", "atan.out", (unaryBody<UOp::Atan, Kind::Float>))                            \
  X("sinh", "sinh_", "sinh.out", (unaryBody<UOp::Sinh, Kind::Float>))                            \
  X("cosh", "cosh_", "cosh.out", (unaryBody<UOp::Cosh, Kind::Float>))                            \
  X("tanh", "tanh_", "tanh.out", (unaryBody<UOp::Tanh, Kind::Float>))                            \
  X("asinh", "asinh_", "asinh.out", (unaryBody<UOp::Asinh, Kind::Float>))                        \
  X("acosh", "acosh_", "acosh.out", (unaryBody<UOp::Acosh, Kind::Float>))                        \
  X("atanh", "atanh_", "atanh.out", (unaryBody<UOp::Atanh, Kind::Float>))                        \
  X("erf", "erf_", "erf.out", (unaryBody<UOp::Erf, Kind::Float>))                                \
  X("erfc", "erfc_", "erfc.out", (unaryBody<UOp::Erfc, Kind::Float>))                            \
  X("lgamma", "lgamma_", "lgamma.out", (unaryBody<UOp::Lgamma, Kind::Float>))                    \
  X("floor", "floor_", "floor.out", (unaryBody<UOp::Floor, Kind::Same>))                         \
  X("ceil", "ceil_", "ceil.out", (unaryBody<UOp::Ceil, Kind::Same>))                             \
  X("trunc", "trunc_", "trunc.out", (unaryBody<UOp::Trunc, Kind::Same>))                         \
  X("frac", "frac_", "frac.out", (unaryBody<UOp::Frac, Kind::Same>))                             \
  /* round(decimals=0) only; round.decimals is ATen's kernel */                                  \
  X("round", "round_", "round.out", (unaryBody<UOp::Round, Kind::Same>))                         \
  X("sigmoid", "sigmoid_", "sigmoid.out", (unaryBody<UOp::Sigmoid, Kind::Float>))                \
  X("silu", "silu_", "silu.out", (unaryBody<UOp::Silu, Kind::Same>))                             \
  X("mish", "mish_", "mish.out", (unaryBody<UOp::Mish, Kind::Same>))                             \
  X("hardsigmoid", "hardsigmoid_", "hardsigmoid.out", (unaryBody<UOp::Hardsigmoid, Kind::Same>)) \
  X("hardswish", "hardswish_", "hardswish.out", (unaryBody<UOp::Hardswish, Kind::Same>))         \
  X("bitwise_not", "bitwise_not_", "bitwise_not.out", (unaryBody<UOp::BitwiseNot, Kind::Same>))  \
  X("relu", "relu_", "", reluBody)                                                               \
  X("", "", "logical_not.out", logicalNotBody)                                                   \
  X("gelu", "gelu_", "gelu.out", geluBody)                                                       \
  X("leaky_relu", "leaky_relu_", "leaky_relu.out", leakyReluBody)                                \
  X("softplus", "", "softplus.out", softplusBody)                                                \
  X("clamp", "clamp_", "clamp.out", clampBody)                                                   \
  X("", "", "isneginf.out", isInfSignedBody<false>)                                              \
  X("", "", "isposinf.out", isInfSignedBody<true>)                                               \
  /* binary */                                                                                   \
  X("add.Tensor", "add_.Tensor", "add.out", addBody)                                             \
  X("sub.Tensor", "sub_.Tensor", "sub.out", subBody)                                             \
  X("mul.Tensor", "mul_.Tensor", "mul.out", (binaryBody<BOp::Mul, Kind::Same>))                  \
  X("div.Tensor", "div_.Tensor", "div.out", (binaryBody<BOp::Div, Kind::Float>))                 \
  X("div.Tensor_mode", "div_.Tensor_mode", "div.out_mode", divModeBody)                          \
  X("copysign.Tensor", "copysign_.Tensor", "copysign.out",                                       \
    (binaryBody<BOp::Copysign, Kind::Float>))                                                    \
  X("maximum", "", "maximum.out", (binaryBody<BOp::Maximum, Kind::Same>))                        \
  X("minimum", "", "minimum.out", (binaryBody<BOp::Minimum, Kind::Same>))                        \
  X("atan2", "atan2_", "atan2.out", (binaryBody<BOp::Atan2, Kind::Float>))                       \
  X("hypot", "hypot_", "hypot.out", (binaryBody<BOp::Hypot, Kind::Same>))                        \
  X("remainder.Tensor", "remainder_.Tensor", "remainder.Tensor_out",                             \
    divisionBody<BOp::Remainder>)                                                           \
  X("fmod.Tensor", "fmod_.Tensor", "fmod.Tensor_out", divisionBody<BOp::Fmod>)              \
  X("pow.Tensor_Tensor", "pow_.Tensor", "pow.Tensor_Tensor_out",                                 \
    (binaryBody<BOp::Pow, Kind::Same>))                                                          \
  X("pow.Tensor_Scalar", "pow_.Scalar", "pow.Tensor_Scalar_out", powScalarBody)                  \
  X("bitwise_and.Tensor", "bitwise_and_.Tensor", "bitwise_and.Tensor_out",                       \
    (binaryBody<BOp::BitwiseAnd, Kind::Same>))                                                   \
  X("bitwise_or.Tensor", "bitwise_or_.Tensor", "bitwise_or.Tensor_out",                          \
    (binaryBody<BOp::BitwiseOr, Kind::Same>))                                                    \
  X("bitwise_xor.Tensor", "bitwise_xor_.Tensor", "bitwise_xor.Tensor_out",                       \
    (binaryBody<BOp::BitwiseXor, Kind::Same>))                                                   \
  X("", "", "logical_and.out", (binaryBody<BOp::LogicalAnd, Kind::Compare>))                     \
  X("", "", "logical_or.out", (binaryBody<BOp::LogicalOr, Kind::Compare>))                       \
  X("", "", "logical_xor.out", (binaryBody<BOp::LogicalXor, Kind::Compare>))                     \
  X("eq.Tensor", "eq_.Tensor", "eq.Tensor_out", (binaryBody<BOp::Eq, Kind::Compare>))            \
  X("ne.Tensor", "ne_.Tensor", "ne.Tensor_out", (binaryBody<BOp::Ne, Kind::Compare>))            \
  X("lt.Tensor", "lt_.Tensor", "lt.Tensor_out", (binaryBody<BOp::Lt, Kind::Compare>))            \
  X("le.Tensor", "le_.Tensor", "le.Tensor_out", (binaryBody<BOp::Le, Kind::Compare>))            \
  X("gt.Tensor", "gt_.Tensor", "gt.Tensor_out", (binaryBody<BOp::Gt, Kind::Compare>))            \
  X("ge.Tensor", "ge_.Tensor", "ge.Tensor_out", (binaryBody<BOp::Ge, Kind::Compare>))            \
  X("eq.Scalar", "eq_.Scalar", "eq.Scalar_out", compareScalarBody<BOp::Eq>)                      \
  X("ne.Scalar", "ne_.Scalar", "ne.Scalar_out", compareScalarBody<BOp::Ne>)                      \
  X("lt.Scalar", "lt_.Scalar", "lt.Scalar_out", compareScalarBody<BOp::Lt>)                      \
  X("le.Scalar", "le_.Scalar", "le.Scalar_out", compareScalarBody<BOp::Le>)                      \
  X("gt.Scalar", "gt_.Scalar", "gt.Scalar_out", compareScalarBody<BOp::Gt>)                      \
  X("ge.Scalar", "ge_.Scalar", "ge.Scalar_out", compareScalarBody<BOp::Ge>)                      \
  X("silu_backward", "", "silu_backward.grad_input",                                             \
    (binaryBody<BOp::SiluBackward, Kind::Same>))                                                 \
  X("sigmoid_backward", "", "sigmoid_backward.grad_input",                                       \
    (binaryBody<BOp::SigmoidBackward, Kind::Same>))                                              \
  X("tanh_backward", "", "tanh_backward.grad_input",                                             \
    (binaryBody<BOp::TanhBackward, Kind::Same>))                                                 \
  X("threshold_backward", "", "threshold_backward.grad_input", thresholdBackwardBody)            \
  X("gelu_backward", "", "gelu_backward.grad_input", geluBackwardBody)                           \
  X("leaky_relu_backward", "", "leaky_relu_backward.grad_input", leakyReluBackwardBody)          \
  /* ternary */                                                                                  \
  X("where.self", "", "where.self_out", whereBody)                                               \
  X("", "masked_fill_.Scalar", "", maskedFillBody)                                               \
  X("", "masked_fill_.Tensor", "", maskedFillTensorBody)                                         \
  X("addcmul", "addcmul_", "addcmul.out", addcBody<TOp::Addcmul>)                                \
  X("addcdiv", "addcdiv_", "addcdiv.out", addcBody<TOp::Addcdiv>)                                \
  X("lerp.Tensor", "lerp_.Tensor", "lerp.Tensor_out", lerpBody)                                  \
  X("lerp.Scalar", "lerp_.Scalar", "lerp.Scalar_out", lerpScalarBody)

// mish_backward: ATen's formula (CompositeImplicitAutograd: softplus, tanh, sigmoid and products)
// on the npu's kernels. A float16 / bfloat16 call evaluates it on float32 copies and rounds once,
// as the card does; in 16 bits every step of the composite rounds.
at::Tensor mish_backward(const at::Tensor& grad_output, const at::Tensor& self) {
  const at::ScalarType type = self.scalar_type();
  if ((type != at::kHalf && type != at::kBFloat16) || grad_output.scalar_type() != type) {
    return at::native::math_mish_backward(grad_output, self);
  }
  return at::native::math_mish_backward(grad_output.to(at::kFloat), self.to(at::kFloat)).to(type);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  NPU_IMPL(m, "mish_backward", mish_backward);
#define NPU_REGISTER_FORMS(fn_name, inplace_name, out_name, body)                               \
  {                                                                                              \
    using F = Forms<body, fn_name, inplace_name, out_name>;                                      \
    if (sizeof(fn_name) > 1) NPU_IMPL(m, fn_name, F::functional);                                \
    if (sizeof(inplace_name) > 1) NPU_IMPL(m, inplace_name, F::inplace);                         \
    if (sizeof(out_name) > 1) NPU_IMPL(m, out_name, F::out);                                     \
  }
  NPU_ELEMENTWISE_OPS(NPU_REGISTER_FORMS)
#undef NPU_REGISTER_FORMS
}

}  // namespace torch_npu::native
