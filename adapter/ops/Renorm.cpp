// renorm with torch_npu's p = 0: the "0-norm" of each slice along `dim` is its number of non-zero
// elements, and a slice whose count exceeds maxnorm is scaled by maxnorm / (count + 1e-7), as on
// the 910B (ATen refuses p <= 0 with "non-positive-norm not supported"). Composed of npu kernels
// (ne, sum, where, mul); every other p is ATen's kernel on the stream (ExecutionPaths.h), with
// its messages.
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/where.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <vector>

#include "DeviceCheck.h"
#include "ExecutionPaths.h"

namespace torch_npu::native {
namespace {

bool isZeroNorm(const at::Tensor& self, const at::Scalar& p) {
  return !p.isComplex() && p.toDouble() == 0.0 && self.dim() >= 2 &&
         at::isFloatingType(self.scalar_type());
}

// self scaled per slice along dim, in float32 (float64 for float64) and rounded once.
at::Tensor zeroNormRenorm(const at::Tensor& self, int64_t dim, const at::Scalar& maxnorm) {
  const c10::DeviceGuard guard(self.device());
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  std::vector<int64_t> others;
  for (int64_t i = 0; i < self.dim(); ++i) {
    if (i != d) others.push_back(i);
  }
  const at::ScalarType compute =
      self.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor count = self.ne(0).sum(others, /*keepdim=*/true, compute);
  const double max = maxnorm.toDouble();
  const at::Tensor factor =
      at::where(count > max, at::Scalar(max) / (count + 1e-7), at::Scalar(1.0));
  return at::mul(self.to(compute), factor);
}

at::Tensor renorm(const at::Tensor& self, const at::Scalar& p, int64_t dim,
                  const at::Scalar& maxnorm) {
  if (!isZeroNorm(self, p)) {
    return callHostKernel<at::Tensor>(NPU_ATEN_OP("renorm", ""), self, p, dim, maxnorm);
  }
  return zeroNormRenorm(self, dim, maxnorm).to(self.scalar_type());
}

at::Tensor& renorm_out(const at::Tensor& self, const at::Scalar& p, int64_t dim,
                       const at::Scalar& maxnorm, at::Tensor& out) {
  if (!isZeroNorm(self, p)) {
    callHostKernel<at::Tensor>(NPU_ATEN_OP("renorm", "out"), self, p, dim, maxnorm, out);
    return out;
  }
  const at::Tensor result = zeroNormRenorm(self, dim, maxnorm);
  at::native::resize_output(out, self.sizes());
  out.copy_(result);
  return out;
}

at::Tensor& renorm_(at::Tensor& self, const at::Scalar& p, int64_t dim,
                    const at::Scalar& maxnorm) {
  if (!isZeroNorm(self, p)) {
    callHostKernel<at::Tensor>(NPU_ATEN_OP("renorm_", ""), self, p, dim, maxnorm);
    return self;
  }
  self.copy_(zeroNormRenorm(self, dim, maxnorm));
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  NPU_IMPL(m, "renorm", renorm);
  NPU_IMPL(m, "renorm.out", renorm_out);
  NPU_IMPL(m, "renorm_", renorm_);
}

}  // namespace torch_npu::native
