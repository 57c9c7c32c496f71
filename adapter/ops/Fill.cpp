// fill_ / zero_ (asynchronous, on the current stream) and _local_scalar_dense (Tensor.item(),
// which synchronizes).
#include <cmath>

#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "DeviceCheck.h"
#include "KernelBridge.h"
#include "NPUException.h"
#include "NPUFunctions.h"
#include "NPUStream.h"
#include "Shadow.h"
#include "TaskTensor.h"

namespace torch_npu::native {
namespace {

bool isPositiveZero(const at::Scalar& value) {
  if (value.isComplex()) return value.toComplexDouble() == c10::complex<double>(0, 0);
  if (value.isFloatingPoint()) {
    const double v = value.toDouble();
    return v == 0.0 && !std::signbit(v);
  }
  return value.isIntegral(/*includeBool=*/true) && value.toLong() == 0;
}


at::Tensor& fill_Scalar_(at::Tensor& self, const at::Scalar& value) {
  if (self.numel() == 0) return self;
  const c10::DeviceGuard guard(self.device());
  const NPUStream stream = getCurrentNPUStream(self.device().index());
  if (self.is_non_overlapping_and_dense() && !self.is_conj() && !self.is_neg() &&
      isPositiveZero(value)) {
    NPU_CHECK(npuMemsetAsync(self.data_ptr(), 0, self.numel() * self.element_size(),
                             stream.handle()));
    return self;
  }
  // Converting on the host first raises a bad value (overflow, complex -> real) here, with the
  // CPU kernel's message (Scalar::to checks as the CPU fill does), instead of on the stream.
  if (describable(self) && !value.isComplex()) {
    nk::Scalar v;
    switch (self.scalar_type()) {
      case at::kFloat: v = nk::Scalar(static_cast<double>(value.to<float>())); break;
      case at::kDouble: v = nk::Scalar(value.to<double>()); break;
      case at::kHalf: v = nk::Scalar(static_cast<double>(static_cast<float>(value.to<at::Half>()))); break;
      case at::kBFloat16:
        v = nk::Scalar(static_cast<double>(static_cast<float>(value.to<at::BFloat16>())));
        break;
      case at::kBool: v = nk::Scalar(value.to<bool>()); break;
      case at::kChar: v = nk::Scalar(static_cast<int64_t>(value.to<int8_t>())); break;
      case at::kShort: v = nk::Scalar(static_cast<int64_t>(value.to<int16_t>())); break;
      case at::kInt: v = nk::Scalar(static_cast<int64_t>(value.to<int32_t>())); break;
      case at::kByte: v = nk::Scalar(static_cast<int64_t>(value.to<uint8_t>())); break;
      default: v = nk::Scalar(value.to<int64_t>()); break;
    }
    launchKernelTask(stream, "fill_", self.numel(), [d = describe(self), v] { nk::fill(d, v); });
    return self;
  }
  const at::Scalar converted =
      at::empty({}, self.options().device(at::kCPU)).fill_(value).item();
  launchTask(stream, "fill_", [view = TaskTensor(self), converted] {
    view.cpu().fill_(converted);
  });
  return self;
}

at::Tensor& fill_Tensor_(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0,
              "fill_ only supports 0-dimension value tensor but got tensor with ", value.dim(),
              " dimensions.");
  return fill_Scalar_(self, value.item());
}

at::Tensor& zero_(at::Tensor& self) { return fill_Scalar_(self, 0); }

at::Scalar _local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() > 0, "_local_scalar_dense: the tensor has no elements");
  if (C10_UNLIKELY(shadowExecution())) warnPlaceholders();
  const c10::DeviceGuard guard(self.device());
  const NPUStream stream = getCurrentNPUStream(self.device().index());
  // The sync-debug check before the copy is queued: `host` dies with an exception.
  if (C10_UNLIKELY(syncDebugMode() != 0)) warnOrErrorOnSync();
  at::Tensor host = at::empty({}, self.options().device(at::kCPU));
  NPU_CHECK(npuMemcpyAsync(host.data_ptr(), self.const_data_ptr(), self.element_size(),
                           npuMemcpyDeviceToHost, stream.handle()));
  stream.synchronizeAfterSyncDebugCheck();
  return host.item();
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  NPU_IMPL(m, "fill_.Scalar", fill_Scalar_);
  NPU_IMPL(m, "fill_.Tensor", fill_Tensor_);
  NPU_IMPL(m, "zero_", zero_);
  NPU_IMPL(m, "_local_scalar_dense", _local_scalar_dense);
}

}  // namespace torch_npu::native
