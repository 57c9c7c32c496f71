// Arguments torch_npu treats otherwise than ATen's CPU kernel (the npu kernel of the host-kernel
// path, ExecutionPaths.h):
//  - renorm with p = 0: torch_npu's kernel takes it (the norm of a slice is its count of
//    non-zero elements, linalg_vector_norm's ord 0); ATen refuses p <= 0. Other p: ATen's kernel.
//  - histc with min == max takes its range from the data; ATen's check that this range is finite
//    ran in the queued CPU kernel (a launch failure, later). It runs at the call here, reading
//    the data's range as CUDA does; then ATen's kernel.
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <cmath>
#include <vector>

#include "DeviceCheck.h"
#include "ExecutionPaths.h"

namespace torch_npu {
namespace {

bool isZeroNorm(const at::Scalar& p) { return p.toDouble() == 0.0; }

// renorm with p = 0 in the input's dtype (16-bit floats compute in float32).
at::Tensor renormZero(const at::Tensor& self, int64_t dim, const at::Scalar& maxnorm) {
  TORCH_CHECK(maxnorm.toDouble() >= 0.0, "renorm: expected maxnorm to be >= 0 but got ",
              maxnorm.toDouble());
  TORCH_CHECK(self.dim() > 1, "renorm: input needs at least 2 dimensions, got ", self.dim(),
              " dimensions");
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  std::vector<int64_t> reduce;
  for (int64_t i = 0; i < self.dim(); ++i) {
    if (i != d) reduce.push_back(i);
  }
  const bool half = self.scalar_type() == at::kHalf || self.scalar_type() == at::kBFloat16;
  const at::Tensor x = half ? self.to(at::kFloat) : self;
  const at::Tensor norm = at::linalg_vector_norm(x, 0, reduce, /*keepdim=*/true);
  const double max = maxnorm.toDouble();
  const at::Tensor factor = at::where(norm > max, max / (norm + 1e-7), at::ones_like(norm));
  return (x * factor).to(self.scalar_type());
}

at::Tensor renorm(const at::Tensor& self, const at::Scalar& p, int64_t dim,
                  const at::Scalar& maxnorm) {
  if (isZeroNorm(p)) return renormZero(self, dim, maxnorm);
  return callHostKernel<at::Tensor>(NPU_ATEN_OP("renorm", ""), self, p, dim, maxnorm);
}

at::Tensor& renormOut(const at::Tensor& self, const at::Scalar& p, int64_t dim,
                      const at::Scalar& maxnorm, at::Tensor& out) {
  if (!isZeroNorm(p)) {
    callHostKernel<at::Tensor>(NPU_ATEN_OP("renorm", "out"), self, p, dim, maxnorm, out);
    return out;
  }
  const at::Tensor result = renormZero(self, dim, maxnorm);
  at::native::resize_output(out, result.sizes());
  out.copy_(result);
  return out;
}

at::Tensor& renormInplace(at::Tensor& self, const at::Scalar& p, int64_t dim,
                          const at::Scalar& maxnorm) {
  if (!isZeroNorm(p)) {
    callHostKernel<at::Tensor>(NPU_ATEN_OP("renorm_", ""), self, p, dim, maxnorm);
    return self;
  }
  self.copy_(renormZero(self, dim, maxnorm));
  return self;
}

// ATen's range check of histc where the range comes from the data (min == max).
void checkHistcRange(const at::Tensor& self, const at::Scalar& min, const at::Scalar& max) {
  if (min.toDouble() != max.toDouble() || self.numel() == 0 || !self.is_floating_point()) return;
  const auto [lo, hi] = at::aminmax(self);
  const double low = lo.item().toDouble(), high = hi.item().toDouble();
  TORCH_CHECK(std::isfinite(low) && std::isfinite(high), "torch.histc: range of [", low, ", ",
              high, "] is not finite");
}

at::Tensor histc(const at::Tensor& self, int64_t bins, const at::Scalar& min,
                 const at::Scalar& max) {
  checkHistcRange(self, min, max);
  return callHostKernel<at::Tensor>(NPU_ATEN_OP("histc", ""), self, bins, min, max);
}

at::Tensor& histcOut(const at::Tensor& self, int64_t bins, const at::Scalar& min,
                     const at::Scalar& max, at::Tensor& out) {
  checkHistcRange(self, min, max);
  callHostKernel<at::Tensor>(NPU_ATEN_OP("histc", "out"), self, bins, min, max, out);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  NPU_IMPL(m, "renorm", renorm);
  NPU_IMPL(m, "renorm.out", renormOut);
  NPU_IMPL(m, "renorm_", renormInplace);
  NPU_IMPL(m, "histc", histc);
  NPU_IMPL(m, "histc.out", histcOut);
}

}  // namespace torch_npu
