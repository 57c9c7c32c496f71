// Reductions (sum, mean, prod, amax/amin, max/min with indices, argmax/argmin, var/std, norm,
// any/all) and scans (cumsum, cumprod) on the operator library.
//
// The adapter works out the reduced dims, the output's shape and dtype with PyTorch's rules;
// the kernel gets the output as the keepdim view (describeReduced). Cases outside the common
// path (empty inputs, complex or mismatched out= dtypes, more than 8 dims) run ATen's CPU
// kernel on the stream, which also gives them PyTorch's exact errors.
#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "DeviceCheck.h"
#include "ExecutionPaths.h"
#include "KernelBridge.h"
#include "NPUStream.h"

namespace torch_npu::native {
namespace {

using ROp = nk::ReduceOp;
using DimList = at::OptionalIntArrayRef;
using OptDims = std::optional<std::vector<int64_t>>;

OptDims dimsArg(DimList dims) {
  if (!dims) return std::nullopt;
  return dims->vec();
}

struct Plan {
  uint64_t mask = 0;
  std::vector<int64_t> shape;  // of the output
};

// dims empty or absent: every dim, as sum() / amax(dim=[]) do.
Plan plan(const at::Tensor& self, DimList dims, bool keepdim) {
  Plan p;
  const int64_t nd = self.dim();
  if (!dims || dims->empty()) {
    p.mask = nd > 0 ? (uint64_t{1} << nd) - 1 : 0;
  } else {
    for (int64_t d : *dims) {
      const int64_t w = at::maybe_wrap_dim(d, nd);
      TORCH_CHECK(!((p.mask >> w) & 1), "dim ", w, " appears multiple times in the list of dims");
      p.mask |= uint64_t{1} << w;
    }
  }
  for (int64_t i = 0; i < nd; ++i) {
    if ((p.mask >> i) & 1) {
      if (keepdim) p.shape.push_back(1);
    } else {
      p.shape.push_back(self.size(i));
    }
  }
  return p;
}

// torch_npu checks a reduction's dims before its kernel and raises RuntimeError where ATen's
// maybe_wrap_dim raises IndexError, in the same words; a 0-dim tensor takes dims -1 and 0.
void checkReduceDims(const at::Tensor& self, DimList dims) {
  if (!dims) return;
  const int64_t n = std::max<int64_t>(self.dim(), 1);
  for (int64_t d : *dims) {
    TORCH_CHECK(d >= -n && d < n, "Dimension out of range (expected to be in range of [", -n,
                ", ", n - 1, "], but got ", d, ")");
  }
}

bool fastInput(const at::Tensor& self) {
  return self.numel() > 0 && describable(self) && self.dim() <= nk::kMaxDims;
}

at::Tensor prepareOut(const at::Tensor& self, at::Tensor out, const Plan& p,
                      at::ScalarType dtype) {
  if (!out.defined()) return at::empty(p.shape, self.options().dtype(dtype));
  at::native::resize_output(out, p.shape);
  return out;
}

// An out= that shares memory with self (sum(x, 0, out=x[0])) would be written while the kernel
// still reads it: the kernel then reduces into a temporary that the task copies into out, so the
// result is the reduction (ATen's CPU kernel accepts these calls with a result that depends on
// its loop order).
void launchReduce(ROp op, const at::Tensor& out, const at::Tensor& self, const Plan& p,
                  bool keepdim, nk::DType compute, nk::Scalar p0, const char* name) {
  const bool aliased = at::get_overlap_status(out, self) != at::MemOverlapStatus::No;
  const at::Tensor target = aliased ? at::empty(out.sizes(), out.options()) : out;
  std::optional<nk::TensorDesc> result;
  if (aliased) result = describe(out);
  launchKernelTask(getCurrentNPUStream(self.device().index()), name, self.numel(),
                   [op, o = describeReduced(target, self, p.mask, keepdim), i = describe(self),
                    compute, p0, result, t = aliased ? describe(target) : nk::TensorDesc()] {
                     nk::reduce(op, o, i, compute, p0);
                     if (result) nk::copy(*result, t);
                   });
}

at::ScalarType sumDType(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  if (dtype) return *dtype;
  return at::isIntegralType(self.scalar_type(), /*includeBool=*/true) ? at::kLong
                                                                      : self.scalar_type();
}

// ---- sum / mean / prod ------------------------------------------------------------------

// The body shared by the functional and out= forms; false: not the fast path.
bool sumLike(ROp op, const at::Tensor& self, DimList dims, bool keepdim, at::ScalarType out_dtype,
             at::Tensor& out, const char* name) {
  checkReduceDims(self, dims);
  const std::optional<nk::DType> od = toKernelDType(out_dtype);
  if (!fastInput(self) || !od) return false;
  const bool floating_only = op == ROp::Mean;
  if (floating_only && !at::isFloatingType(out_dtype)) return false;
  // Math in the requested floating dtype (sum(half, dtype=float)), else in the input's.
  const nk::DType compute =
      at::isFloatingType(out_dtype) ? *od : *toKernelDType(self.scalar_type());
  if (!nk::reduce_supports(op, compute)) return false;
  const c10::DeviceGuard guard(self.device());
  const Plan p = plan(self, dims, keepdim);
  out = prepareOut(self, out, p, out_dtype);
  launchReduce(op, out, self, p, keepdim, compute, {}, name);
  return true;
}

at::Tensor sum_dim(const at::Tensor& self, DimList dims, bool keepdim,
                   std::optional<at::ScalarType> dtype) {
  at::Tensor out;
  if (sumLike(ROp::Sum, self, dims, keepdim, sumDType(self, dtype), out, "sum")) return out;
  return callHostKernel<at::Tensor>(NPU_ATEN_OP("sum", "dim_IntList"), self, dimsArg(dims),
                                    keepdim, dtype);
}
at::Tensor& sum_out(const at::Tensor& self, DimList dims, bool keepdim,
                    std::optional<at::ScalarType> dtype, at::Tensor& out) {
  const at::ScalarType od = dtype ? *dtype : out.scalar_type();
  at::Tensor o = out;
  if (!sumLike(ROp::Sum, self, dims, keepdim, od, o, "sum")) {
    callHostKernel<at::Tensor>(NPU_ATEN_OP("sum", "IntList_out"), self, dimsArg(dims), keepdim,
                               dtype, out);
  }
  return out;
}

at::Tensor mean_dim(const at::Tensor& self, DimList dims, bool keepdim,
                    std::optional<at::ScalarType> dtype) {
  at::Tensor out;
  if (sumLike(ROp::Mean, self, dims, keepdim, dtype.value_or(self.scalar_type()), out, "mean")) {
    return out;
  }
  return callHostKernel<at::Tensor>(NPU_ATEN_OP("mean", "dim"), self, dimsArg(dims), keepdim,
                                    dtype);
}
at::Tensor& mean_out(const at::Tensor& self, DimList dims, bool keepdim,
                     std::optional<at::ScalarType> dtype, at::Tensor& out) {
  at::Tensor o = out;
  if (!sumLike(ROp::Mean, self, dims, keepdim, dtype.value_or(out.scalar_type()), o, "mean")) {
    callHostKernel<at::Tensor>(NPU_ATEN_OP("mean", "out"), self, dimsArg(dims), keepdim, dtype,
                               out);
  }
  return out;
}

at::Tensor prod_dim(const at::Tensor& self, int64_t dim, bool keepdim,
                    std::optional<at::ScalarType> dtype) {
  at::Tensor out;
  const std::vector<int64_t> dims{dim};
  if (sumLike(ROp::Prod, self, dims, keepdim, sumDType(self, dtype), out, "prod")) return out;
  return callHostKernel<at::Tensor>(NPU_ATEN_OP("prod", "dim_int"), self, dim, keepdim, dtype);
}
// out=: the out tensor's dtype is the result's (ATen's rule); a dtype= that disagrees with it is
// ATen's kernel's to refuse. The product accumulates in double and rounds once into out, as the
// card rounds a float16 product once from its float32 accumulator.
at::Tensor& prod_out(const at::Tensor& self, int64_t dim, bool keepdim,
                     std::optional<at::ScalarType> dtype, at::Tensor& out) {
  at::Tensor o = out;
  const std::vector<int64_t> dims{dim};
  if ((dtype && *dtype != out.scalar_type()) ||
      !sumLike(ROp::Prod, self, dims, keepdim, out.scalar_type(), o, "prod")) {
    callHostKernel<at::Tensor>(NPU_ATEN_OP("prod", "int_out"), self, dim, keepdim, dtype, out);
  }
  return out;
}
at::Tensor prod_all(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  at::Tensor out;
  if (sumLike(ROp::Prod, self, std::nullopt, false, sumDType(self, dtype), out, "prod")) {
    return out;
  }
  return callHostKernel<at::Tensor>(NPU_ATEN_OP("prod", ""), self, dtype);
}

// ---- amax / amin / any / all / var / std / norm -------------------------------------------

// Reductions whose output has the input's dtype (amax/amin) or a fixed one.
bool sameTypeReduce(ROp op, const at::Tensor& self, DimList dims, bool keepdim,
                    at::ScalarType out_dtype, at::Tensor& out, nk::Scalar p0, const char* name) {
  checkReduceDims(self, dims);
  if (!fastInput(self) || !toKernelDType(out_dtype)) return false;
  if (out.defined() && out.scalar_type() != out_dtype) return false;
  const nk::DType compute = *toKernelDType(self.scalar_type());
  if (!nk::reduce_supports(op, compute)) return false;
  const c10::DeviceGuard guard(self.device());
  const Plan p = plan(self, dims, keepdim);
  out = prepareOut(self, out, p, out_dtype);
  launchReduce(op, out, self, p, keepdim, compute, p0, name);
  return true;
}

#define NPU_AMAX(fn, OP)                                                                     \
  at::Tensor fn(const at::Tensor& self, at::IntArrayRef dims, bool keepdim) {                \
    at::Tensor out;                                                                          \
    if (sameTypeReduce(ROp::OP, self, dims, keepdim, self.scalar_type(), out, {}, #fn)) {    \
      return out;                                                                            \
    }                                                                                        \
    return callHostKernel<at::Tensor>(NPU_ATEN_OP(#fn, ""), self, dims.vec(), keepdim);      \
  }                                                                                          \
  at::Tensor& fn##_out(const at::Tensor& self, at::IntArrayRef dims, bool keepdim,           \
                       at::Tensor& out) {                                                    \
    at::Tensor o = out;                                                                      \
    if (!sameTypeReduce(ROp::OP, self, dims, keepdim, self.scalar_type(), o, {}, #fn)) {     \
      callHostKernel<at::Tensor>(NPU_ATEN_OP(#fn, "out"), self, dims.vec(), keepdim, out);   \
    }                                                                                        \
    return out;                                                                              \
  }
NPU_AMAX(amax, Amax)
NPU_AMAX(amin, Amin)

// any / all: Bool results (uint8 inputs keep uint8 in PyTorch: ATen's kernel does those).
#define NPU_ANY(fn, OP)                                                                      \
  at::Tensor& fn##_dims_out(const at::Tensor& self, DimList dims, bool keepdim,              \
                            at::Tensor& out) {                                               \
    at::Tensor o = out;                                                                      \
    if (self.scalar_type() == at::kByte ||                                                   \
        !sameTypeReduce(ROp::OP, self, dims, keepdim, at::kBool, o, {}, #fn)) {              \
      callHostKernel<at::Tensor>(NPU_ATEN_OP(#fn, "dims_out"), self, dimsArg(dims), keepdim, \
                                 out);                                                       \
    }                                                                                        \
    return out;                                                                              \
  }                                                                                          \
  at::Tensor fn##_dims(const at::Tensor& self, DimList dims, bool keepdim) {                 \
    at::Tensor out;                                                                          \
    if (self.scalar_type() != at::kByte &&                                                   \
        sameTypeReduce(ROp::OP, self, dims, keepdim, at::kBool, out, {}, #fn)) {             \
      return out;                                                                            \
    }                                                                                        \
    return callHostKernel<at::Tensor>(NPU_ATEN_OP(#fn, "dims"), self, dimsArg(dims),         \
                                      keepdim);                                              \
  }                                                                                          \
  at::Tensor fn##_dim(const at::Tensor& self, int64_t dim, bool keepdim) {                   \
    return fn##_dims(self, std::vector<int64_t>{dim}, keepdim);                              \
  }                                                                                          \
  at::Tensor& fn##_dim_out(const at::Tensor& self, int64_t dim, bool keepdim,                \
                           at::Tensor& out) {                                                \
    return fn##_dims_out(self, std::vector<int64_t>{dim}, keepdim, out);                     \
  }                                                                                          \
  at::Tensor fn##_all(const at::Tensor& self) { return fn##_dims(self, std::nullopt, false); } \
  at::Tensor& fn##_all_out(const at::Tensor& self, at::Tensor& out) {                        \
    return fn##_dims_out(self, std::nullopt, false, out);                                    \
  }
NPU_ANY(any, Any)
NPU_ANY(all, All)

// var / std with a correction; var_mean / std_mean.
bool varLike(ROp op, const at::Tensor& self, DimList dims, const std::optional<at::Scalar>& corr,
             bool keepdim, at::Tensor& out, const char* name) {
  if (!at::isFloatingType(self.scalar_type())) return false;
  const double c = corr ? corr->toDouble() : 1.0;
  return sameTypeReduce(op, self, dims, keepdim, self.scalar_type(), out, c, name);
}

at::Tensor var_correction(const at::Tensor& self, DimList dims,
                          const std::optional<at::Scalar>& correction, bool keepdim) {
  at::Tensor out;
  if (varLike(ROp::Var, self, dims, correction, keepdim, out, "var")) return out;
  return callHostKernel<at::Tensor>(NPU_ATEN_OP("var", "correction"), self, dimsArg(dims),
                                    correction, keepdim);
}
at::Tensor std_correction(const at::Tensor& self, DimList dims,
                          const std::optional<at::Scalar>& correction, bool keepdim) {
  at::Tensor out;
  if (varLike(ROp::Std, self, dims, correction, keepdim, out, "std")) return out;
  return callHostKernel<at::Tensor>(NPU_ATEN_OP("std", "correction"), self, dimsArg(dims),
                                    correction, keepdim);
}
std::tuple<at::Tensor, at::Tensor> var_mean_correction(const at::Tensor& self, DimList dims,
                                                       const std::optional<at::Scalar>& correction,
                                                       bool keepdim) {
  at::Tensor var, mean;
  if (varLike(ROp::Var, self, dims, correction, keepdim, var, "var_mean") &&
      sameTypeReduce(ROp::Mean, self, dims, keepdim, self.scalar_type(), mean, {}, "var_mean")) {
    return {var, mean};
  }
  torch::jit::Stack stack;
  torch::jit::push(stack, self, dimsArg(dims), correction, keepdim);
  runOnHost(NPU_ATEN_OP("var_mean", "correction"), &stack);
  return {stack[0].toTensor(), stack[1].toTensor()};
}
std::tuple<at::Tensor, at::Tensor> std_mean_correction(const at::Tensor& self, DimList dims,
                                                       const std::optional<at::Scalar>& correction,
                                                       bool keepdim) {
  at::Tensor sd, mean;
  if (varLike(ROp::Std, self, dims, correction, keepdim, sd, "std_mean") &&
      sameTypeReduce(ROp::Mean, self, dims, keepdim, self.scalar_type(), mean, {}, "std_mean")) {
    return {sd, mean};
  }
  torch::jit::Stack stack;
  torch::jit::push(stack, self, dimsArg(dims), correction, keepdim);
  runOnHost(NPU_ATEN_OP("std_mean", "correction"), &stack);
  return {stack[0].toTensor(), stack[1].toTensor()};
}

at::Tensor linalg_vector_norm(const at::Tensor& self, const at::Scalar& ord, DimList dims,
                              bool keepdim, std::optional<at::ScalarType> dtype) {
  at::Tensor out;
  if (!dtype && at::isFloatingType(self.scalar_type()) &&
      sameTypeReduce(ROp::Norm, self, dims, keepdim, self.scalar_type(), out,
                     ord.toDouble(), "linalg_vector_norm")) {
    return out;
  }
  return callHostKernel<at::Tensor>(NPU_ATEN_OP("linalg_vector_norm", ""), self, ord,
                                    dimsArg(dims), keepdim, dtype);
}

// logsumexp: one pass of the library's kernel (max, then the shifted exp-sum, in double) and
// one rounding into the output. ATen's composite (amax, sub, exp, sum, log) would round each
// step to half for float16 / bfloat16 inputs. Integer inputs (promoted to float by ATen), 0-dim
// inputs and out= tensors of another dtype go to ATen's kernel. dim=() reduces every dim, as
// amax and sum do (ATen's CPU composite raises a shape error there).
bool logsumexpLike(const at::Tensor& self, at::IntArrayRef dims, bool keepdim, at::Tensor& out) {
  if (!at::isFloatingType(self.scalar_type()) || self.dim() == 0) return false;
  return sameTypeReduce(ROp::LogSumExp, self, dims, keepdim, self.scalar_type(), out, {},
                        "logsumexp");
}
at::Tensor logsumexp(const at::Tensor& self, at::IntArrayRef dims, bool keepdim) {
  at::Tensor out;
  if (logsumexpLike(self, dims, keepdim, out)) return out;
  return callHostKernel<at::Tensor>(NPU_ATEN_OP("logsumexp", ""), self, dims.vec(), keepdim);
}
at::Tensor& logsumexp_out(const at::Tensor& self, at::IntArrayRef dims, bool keepdim,
                          at::Tensor& out) {
  at::Tensor o = out;
  if (!logsumexpLike(self, dims, keepdim, o)) {
    callHostKernel<at::Tensor>(NPU_ATEN_OP("logsumexp", "out"), self, dims.vec(), keepdim, out);
  }
  return out;
}

// ---- max / min with indices, argmax / argmin ----------------------------------------------

bool argReduce(nk::ArgReduceOp op, const at::Tensor& self, DimList dims, bool keepdim,
               at::Tensor* values, at::Tensor& indices, const char* name) {
  checkReduceDims(self, dims);
  if (!fastInput(self) || !nk::arg_reduce_supports(*toKernelDType(self.scalar_type()))) {
    return false;
  }
  if (values && values->defined() && values->scalar_type() != self.scalar_type()) return false;
  if (indices.defined() && indices.scalar_type() != at::kLong) return false;
  const c10::DeviceGuard guard(self.device());
  const Plan p = plan(self, dims, keepdim);
  indices = prepareOut(self, indices, p, at::kLong);
  nk::TensorDesc vd;
  vd.data = nullptr;
  if (values) {
    *values = prepareOut(self, *values, p, self.scalar_type());
    vd = describeReduced(*values, self, p.mask, keepdim);
  }
  launchTask(getCurrentNPUStream(self.device().index()), name,
             [op, vd, id = describeReduced(indices, self, p.mask, keepdim), in = describe(self),
              c = *toKernelDType(self.scalar_type())] { nk::arg_reduce(op, vd, id, in, c); });
  return true;
}

#define NPU_MAX_DIM(fn, OP)                                                                  \
  std::tuple<at::Tensor, at::Tensor> fn##_dim(const at::Tensor& self, int64_t dim,           \
                                              bool keepdim) {                                \
    at::Tensor values, indices;                                                              \
    if (argReduce(nk::ArgReduceOp::OP, self, std::vector<int64_t>{dim}, keepdim, &values,    \
                  indices, #fn)) {                                                           \
      return {values, indices};                                                              \
    }                                                                                        \
    torch::jit::Stack stack;                                                                 \
    torch::jit::push(stack, self, dim, keepdim);                                             \
    runOnHost(NPU_ATEN_OP(#fn, "dim"), &stack);                                              \
    return {stack[0].toTensor(), stack[1].toTensor()};                                       \
  }                                                                                          \
  at::Tensor arg##fn(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {     \
    at::Tensor indices;                                                                      \
    const std::vector<int64_t> one{dim.value_or(0)};                                         \
    const DimList dims = dim ? DimList(one) : DimList();                                     \
    if (argReduce(nk::ArgReduceOp::OP, self, dims, dim ? keepdim : false, nullptr, indices,  \
                  "arg" #fn)) {                                                              \
      if (!dim && keepdim) {                                                                 \
        return indices.reshape(std::vector<int64_t>(self.dim(), 1));                         \
      }                                                                                      \
      return indices;                                                                        \
    }                                                                                        \
    return callHostKernel<at::Tensor>(NPU_ATEN_OP("arg" #fn, ""), self, dim, keepdim);       \
  }                                                                                          \
  at::Tensor fn##_all(const at::Tensor& self) {                                              \
    at::Tensor values, indices;                                                              \
    if (argReduce(nk::ArgReduceOp::OP, self, std::nullopt, false, &values, indices, #fn)) {  \
      return values;                                                                         \
    }                                                                                        \
    return callHostKernel<at::Tensor>(NPU_ATEN_OP(#fn, ""), self);                           \
  }
NPU_MAX_DIM(max, Max)
NPU_MAX_DIM(min, Min)

// ---- scans ------------------------------------------------------------------------------

bool scan(nk::ScanOp op, const at::Tensor& self, int64_t dim, at::ScalarType out_dtype,
          at::Tensor& out, const char* name) {
  if (!fastInput(self) || !toKernelDType(out_dtype)) return false;
  const nk::DType compute = *toKernelDType(out_dtype);
  if (!nk::scan_supports(op, compute)) return false;
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  const c10::DeviceGuard guard(self.device());
  if (!out.defined()) {
    out = at::empty(self.sizes(), self.options().dtype(out_dtype));
  } else {
    if (out.scalar_type() != out_dtype) return false;
    at::native::resize_output(out, self.sizes());
    // The CPU kernel's rules: in place (out is self) is a scan; any other overlap is refused.
    at::assert_no_internal_overlap(out);
    at::assert_no_partial_overlap(out, self);
  }
  // A 0-dim tensor scans over its one element.
  const int kd = self.dim() == 0 ? 0 : static_cast<int>(d);
  launchTask(getCurrentNPUStream(self.device().index()), name,
             [op, o = describe(out), i = describe(self), kd, compute] {
               nk::scan(op, o, nullptr, i, kd, compute);
             });
  return true;
}

#define NPU_SCAN(fn, OP)                                                                     \
  at::Tensor fn(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype) {  \
    at::Tensor out;                                                                          \
    if (self.dim() > 0 && scan(nk::ScanOp::OP, self, dim, sumDType(self, dtype), out, #fn)) { \
      return out;                                                                            \
    }                                                                                        \
    return callHostKernel<at::Tensor>(NPU_ATEN_OP(#fn, ""), self, dim, dtype);               \
  }                                                                                          \
  at::Tensor& fn##_out(const at::Tensor& self, int64_t dim,                                  \
                       std::optional<at::ScalarType> dtype, at::Tensor& out) {               \
    at::Tensor o = out;                                                                      \
    if (self.dim() == 0 ||                                                                   \
        !scan(nk::ScanOp::OP, self, dim, dtype.value_or(out.scalar_type()), o, #fn)) {       \
      callHostKernel<at::Tensor>(NPU_ATEN_OP(#fn, "out"), self, dim, dtype, out);            \
    }                                                                                        \
    return out;                                                                              \
  }
NPU_SCAN(cumsum, Cumsum)
NPU_SCAN(cumprod, Cumprod)

// cummax / cummin (through their helpers, which get values / indices already sized) and
// logcumsumexp.
template <nk::ScanOp kOp>
void cum_minmax_helper(const at::Tensor& self, at::Tensor& values, at::Tensor& indices,
                       int64_t dim) {
  const bool ok = fastInput(self) && self.dim() > 0 && describable(values) &&
                  values.scalar_type() == self.scalar_type() && indices.scalar_type() == at::kLong &&
                  values.sizes() == self.sizes() && indices.sizes() == self.sizes() &&
                  nk::scan_supports(kOp, *toKernelDType(self.scalar_type()));
  if (!ok) {
    callHostKernel<void>(kOp == nk::ScanOp::Cummax ? NPU_ATEN_OP("_cummax_helper", "")
                                                   : NPU_ATEN_OP("_cummin_helper", ""),
                         self, values, indices, dim);
    return;
  }
  const c10::DeviceGuard guard(self.device());
  if (at::get_overlap_status(values, self) != at::MemOverlapStatus::No ||
      at::get_overlap_status(indices, self) != at::MemOverlapStatus::No) {
    // The scan would read elements it already wrote: through temporaries, so the result is
    // the scan's (ATen's CPU kernel's depends on its loop order).
    at::Tensor v = at::empty_like(values), i = at::empty_like(indices);
    cum_minmax_helper<kOp>(self, v, i, dim);
    values.copy_(v);
    indices.copy_(i);
    return;
  }
  const int d = static_cast<int>(at::maybe_wrap_dim(dim, self.dim()));
  launchTask(getCurrentNPUStream(self.device().index()), "cummax",
             [o = describe(values), x = describe(indices), i = describe(self), d,
              c = *toKernelDType(self.scalar_type())] { nk::scan(kOp, o, &x, i, d, c); });
}

at::Tensor logcumsumexp(const at::Tensor& self, int64_t dim) {
  at::Tensor out;
  if (self.dim() > 0 && at::isFloatingType(self.scalar_type()) &&
      scan(nk::ScanOp::LogCumSumExp, self, dim, self.scalar_type(), out, "logcumsumexp")) {
    return out;
  }
  return callHostKernel<at::Tensor>(NPU_ATEN_OP("_logcumsumexp", ""), self, dim);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  NPU_IMPL(m, "sum.dim_IntList", sum_dim);
  NPU_IMPL(m, "sum.IntList_out", sum_out);
  NPU_IMPL(m, "mean.dim", mean_dim);
  NPU_IMPL(m, "mean.out", mean_out);
  NPU_IMPL(m, "prod.dim_int", prod_dim);
  NPU_IMPL(m, "prod.int_out", prod_out);
  NPU_IMPL(m, "prod", prod_all);
  NPU_IMPL(m, "amax", amax);
  NPU_IMPL(m, "amax.out", amax_out);
  NPU_IMPL(m, "amin", amin);
  NPU_IMPL(m, "amin.out", amin_out);
  NPU_IMPL(m, "any", any_all);
  NPU_IMPL(m, "any.all_out", any_all_out);
  NPU_IMPL(m, "any.dim", any_dim);
  NPU_IMPL(m, "any.out", any_dim_out);
  NPU_IMPL(m, "any.dims", any_dims);
  NPU_IMPL(m, "any.dims_out", any_dims_out);
  NPU_IMPL(m, "all", all_all);
  NPU_IMPL(m, "all.all_out", all_all_out);
  NPU_IMPL(m, "all.dim", all_dim);
  NPU_IMPL(m, "all.out", all_dim_out);
  NPU_IMPL(m, "all.dims", all_dims);
  NPU_IMPL(m, "all.dims_out", all_dims_out);
  NPU_IMPL(m, "var.correction", var_correction);
  NPU_IMPL(m, "std.correction", std_correction);
  NPU_IMPL(m, "var_mean.correction", var_mean_correction);
  NPU_IMPL(m, "std_mean.correction", std_mean_correction);
  NPU_IMPL(m, "linalg_vector_norm", linalg_vector_norm);
  NPU_IMPL(m, "logsumexp", logsumexp);
  NPU_IMPL(m, "logsumexp.out", logsumexp_out);
  NPU_IMPL(m, "max.dim", max_dim);
  NPU_IMPL(m, "min.dim", min_dim);
  NPU_IMPL(m, "max", max_all);
  NPU_IMPL(m, "min", min_all);
  NPU_IMPL(m, "argmax", argmax);
  NPU_IMPL(m, "argmin", argmin);
  NPU_IMPL(m, "cumsum", cumsum);
  NPU_IMPL(m, "cumsum.out", cumsum_out);
  NPU_IMPL(m, "cumprod", cumprod);
  NPU_IMPL(m, "cumprod.out", cumprod_out);
  NPU_IMPL(m, "_cummax_helper", cum_minmax_helper<nk::ScanOp::Cummax>);
  NPU_IMPL(m, "_cummin_helper", cum_minmax_helper<nk::ScanOp::Cummin>);
  NPU_IMPL(m, "_logcumsumexp", logcumsumexp);
}

}  // namespace torch_npu::native
