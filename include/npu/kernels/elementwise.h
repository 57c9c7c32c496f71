// Elementwise kernels: copy/cast, fill, unary, binary (incl. comparisons and activation
// backward), ternary. Every operand is already broadcast to the output's shape (stride 0).
#pragma once

#include "npu/kernels/tensor_desc.h"

namespace npu::kernels {

// ---- copy / cast ------------------------------------------------------------------------
// dst = src converted to dst.dtype. Any dtype to any dtype, any strides (src may broadcast).
// float -> int truncates toward zero; anything -> bool is (x != 0); bool -> number is 0/1.
void copy(const TensorDesc& dst, const TensorDesc& src);
// out = cat(parts, dim) for a contiguous out and parts of out's dtype whose blocks (their
// dimensions from `dim` on) are contiguous (a part's outer dimensions may have any strides):
// row by row of out (every index of the dimensions before dim), each part's block in turn, so
// out is written once from front to back; copying part by part into narrowed views of out
// wrote every row in pieces, one pass per part (two [64, 4, 64, 16] halves: 1.6x the CPU
// device's cat). Returns false, doing nothing, for another layout (copy() then does it).
bool concat(const TensorDesc& out, const TensorDesc* parts, int count, int dim);
// Every element of dst = value (read as value.f for floating dst, value.i otherwise).
void fill(const TensorDesc& dst, Scalar value);

// ---- op tables --------------------------------------------------------------------------
// X(EnumName, "aten name"). Tests and benchmarks iterate these tables; add an op here, give it
// a functor in kernels/*_ops.h (or ternary.cpp), and a reference in
// tests/cpp/kernels/elementwise_reference.h.

// Unary: out = f(in). `p0`/`p1` are the op's scalar parameters where it has any.
#define NPU_KERNELS_UNARY_OPS(X)                                               \
  X(Neg, "neg") X(Abs, "abs") X(Sign, "sign") X(Square, "square")              \
  X(Reciprocal, "reciprocal") X(Sqrt, "sqrt") X(Rsqrt, "rsqrt")                \
  X(Exp, "exp") X(Exp2, "exp2") X(Expm1, "expm1")                              \
  X(Log, "log") X(Log2, "log2") X(Log10, "log10") X(Log1p, "log1p")           \
  X(Sin, "sin") X(Cos, "cos") X(Tan, "tan") X(Asin, "asin") X(Acos, "acos")   \
  X(Atan, "atan") X(Sinh, "sinh") X(Cosh, "cosh") X(Tanh, "tanh")             \
  X(Asinh, "asinh") X(Acosh, "acosh") X(Atanh, "atanh")                       \
  X(Erf, "erf") X(Erfc, "erfc") X(Lgamma, "lgamma")                           \
  X(Floor, "floor") X(Ceil, "ceil") X(Round, "round") X(Trunc, "trunc")       \
  X(Frac, "frac")                                                              \
  X(Sigmoid, "sigmoid") X(Relu, "relu") X(Gelu, "gelu") X(GeluTanh, "gelu_tanh") \
  X(Silu, "silu") X(Mish, "mish") X(Hardsigmoid, "hardsigmoid")               \
  X(Hardswish, "hardswish") X(LeakyRelu, "leaky_relu") /* p0 = slope */       \
  X(Elu, "elu")               /* p0 = alpha */                                 \
  X(Softplus, "softplus")     /* p0 = beta, p1 = threshold */                  \
  X(Clamp, "clamp")           /* p0 = min, p1 = max (pass +-inf / int limits for none) */ \
  X(PowInt, "pow_int")        /* pow(x, p0.i), p0.i != 0 an integer exponent; floating only */ \
  X(LogicalNot, "logical_not") X(BitwiseNot, "bitwise_not")                   \
  X(IsNan, "isnan") X(IsInf, "isinf") X(IsFinite, "isfinite")

// Binary: out = f(a, b). Comparisons, logical ops and isclose-like ops write Bool.
#define NPU_KERNELS_BINARY_OPS(X)                                              \
  X(Add, "add")   /* a + p0 * b, p0 = alpha */                                 \
  X(Sub, "sub")   /* a - p0 * b */                                             \
  X(Mul, "mul") X(Div, "div") X(DivFloor, "div_floor") X(DivTrunc, "div_trunc") \
  X(Remainder, "remainder") X(Fmod, "fmod")                                    \
  X(Maximum, "maximum") X(Minimum, "minimum") X(Pow, "pow") X(Atan2, "atan2")  \
  X(Hypot, "hypot") X(Copysign, "copysign")                                    \
  X(Eq, "eq") X(Ne, "ne") X(Lt, "lt") X(Le, "le") X(Gt, "gt") X(Ge, "ge")     \
  X(LogicalAnd, "logical_and") X(LogicalOr, "logical_or")                      \
  X(LogicalXor, "logical_xor")                                                 \
  X(BitwiseAnd, "bitwise_and") X(BitwiseOr, "bitwise_or")                      \
  X(BitwiseXor, "bitwise_xor")                                                 \
  X(ShiftLeft, "bitwise_left_shift") X(ShiftRight, "bitwise_right_shift")      \
  /* activation backward: a = grad_output, b = the tensor named */             \
  X(ThresholdBackward, "threshold_backward") /* b = self, p0 = threshold */    \
  X(GeluBackward, "gelu_backward")           /* b = self */                    \
  X(GeluTanhBackward, "gelu_backward_tanh")  /* b = self */                    \
  X(SiluBackward, "silu_backward")           /* b = self */                    \
  X(SigmoidBackward, "sigmoid_backward")     /* b = output */                  \
  X(TanhBackward, "tanh_backward")           /* b = output */                  \
  X(LeakyReluBackward, "leaky_relu_backward") /* b = self, p0 = slope */

// Ternary: out = f(a, b, c).
#define NPU_KERNELS_TERNARY_OPS(X)                                             \
  X(Where, "where")        /* a = condition (any dtype, != 0), b if true else c */ \
  X(Addcmul, "addcmul")    /* a + p0 * b * c */                                \
  X(Addcdiv, "addcdiv")    /* a + p0 * b / c */                                \
  X(Lerp, "lerp")          /* a + c * (b - a), c = weight */                   \
  X(ClampTensor, "clamp")  /* min(max(a, b), c); NaN in a propagates */

#define NPU_KERNELS_ENUM_ENTRY(name, str) name,
enum class UnaryOp { NPU_KERNELS_UNARY_OPS(NPU_KERNELS_ENUM_ENTRY) };
enum class BinaryOp { NPU_KERNELS_BINARY_OPS(NPU_KERNELS_ENUM_ENTRY) };
enum class TernaryOp { NPU_KERNELS_TERNARY_OPS(NPU_KERNELS_ENUM_ENTRY) };
#undef NPU_KERNELS_ENUM_ENTRY

const char* op_name(UnaryOp op);
const char* op_name(BinaryOp op);
const char* op_name(TernaryOp op);

// ---- entry points -----------------------------------------------------------------------
// `compute` is the dtype the math happens in (PyTorch's common dtype after type promotion):
// every operand is converted to it on load and the result converted to out.dtype on store.
// Float16/BFloat16 compute runs in float32 and rounds once on store, as PyTorch's CPU does.
// Operands of any dtype and any strides are accepted; the fast path is all-contiguous with
// operand dtypes == compute. Ops outside *_supports(op, compute) are a caller bug (asserted).
bool unary_supports(UnaryOp op, DType compute);
bool binary_supports(BinaryOp op, DType compute);
bool ternary_supports(TernaryOp op, DType compute);

void unary(UnaryOp op, const TensorDesc& out, const TensorDesc& in, DType compute,
           Scalar p0 = {}, Scalar p1 = {});
void binary(BinaryOp op, const TensorDesc& out, const TensorDesc& a, const TensorDesc& b,
            DType compute, Scalar p0 = 1);
void ternary(TernaryOp op, const TensorDesc& out, const TensorDesc& a, const TensorDesc& b,
             const TensorDesc& c, DType compute, Scalar p0 = 1);

}  // namespace npu::kernels
