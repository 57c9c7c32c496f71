// GradScaler's two ops on the library's kernels (npu/kernels/optimizers.h), queued on the
// current stream like every npu kernel: unscaling a list of gradients is one launch, and the
// scale, inv_scale, found_inf and the growth tracker stay on the device, so GradScaler never
// waits for the device unless the user reads the scale (or a non-fused optimizer's step asks
// whether to skip, as on CUDA). The argument checks and messages are CUDA's.
#include <ATen/ops/isfinite.h>
#include <ATen/ops/logical_not.h>
#include <ATen/ops/maximum.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "DeviceCheck.h"
#include "KernelBridge.h"
#include "NPUStream.h"

namespace torch_npu::native {
namespace {

// type_name with its article: "a float", "an int".
void checkScalarArg(const at::Tensor& t, const char* name, at::ScalarType type,
                    const char* type_name) {
  TORCH_CHECK(t.is_privateuseone(), name, " must be a NPU tensor.");
  TORCH_CHECK(t.numel() == 1, name, " must be a 1-element tensor.");
  TORCH_CHECK(t.scalar_type() == type, name, " must be ", type_name, " tensor.");
}

// A dense tensor (any dim order, no gaps or overlaps) as the 1-D span of its storage: what the
// list kernels take, since they only need "element i of each tensor of one parameter".
nk::TensorDesc span(const at::Tensor& t) {
  return nk::TensorDesc::make(t.data_ptr(), *toKernelDType(t.scalar_type()), {t.numel()});
}

void nonFiniteCheckAndUnscale_(at::TensorList scaled_grads, at::Tensor& found_inf,
                               const at::Tensor& inv_scale) {
  if (scaled_grads.empty()) return;
  checkScalarArg(inv_scale, "inv_scale", at::kFloat, "a float");
  checkScalarArg(found_inf, "found_inf", at::kFloat, "a float");
  TORCH_CHECK(inv_scale.device() == found_inf.device(),
              "inv_scale and found_inf must be on the same device, got ", inv_scale.device(),
              " and ", found_inf.device());
  std::vector<nk::TensorDesc> dense;
  std::vector<at::Tensor> strided;
  for (const at::Tensor& g : scaled_grads) {
    TORCH_CHECK(g.is_privateuseone(), "scaled_grad must be a NPU tensor, got one on ", g.device());
    TORCH_CHECK(g.device() == found_inf.device(), "scaled_grads must be on the device of "
                "found_inf and inv_scale (", found_inf.device(), "), got one on ", g.device());
    TORCH_CHECK(g.layout() == at::kStrided, "scaled_grad must be a strided (not sparse) Tensor.");
    TORCH_CHECK(at::isFloatingType(g.scalar_type()) && toKernelDType(g.scalar_type()),
                "scaled_grads must be float64, float32, float16 or bfloat16 tensors, got ",
                g.scalar_type());
    if (g.numel() == 0) continue;
    if (g.is_non_overlapping_and_dense()) dense.push_back(span(g));
    else strided.push_back(g);
  }
  const c10::DeviceGuard guard(found_inf.device());
  if (!dense.empty()) {
    launchTask(getCurrentNPUStream(found_inf.device().index()),
               "_amp_foreach_non_finite_check_and_unscale_",
               [grads = std::move(dense), found = found_inf.data_ptr<float>(),
                inv = inv_scale.data_ptr<float>()] {
                 nk::amp_non_finite_check_and_unscale(grads.data(),
                                                      static_cast<int64_t>(grads.size()), found,
                                                      inv);
               });
  }
  // Views with gaps or overlaps (rare for gradients): the same semantics from queued kernels,
  // checked before the multiply (which could overflow a finite value when inv_scale > 1).
  for (const at::Tensor& g : strided) {
    found_inf.copy_(at::maximum(found_inf,
                                at::logical_not(at::isfinite(g)).any().to(at::kFloat).reshape(
                                    found_inf.sizes())));
    at::Tensor view = g;  // TensorList hands out const handles; mul_ writes through a copy
    view.mul_(inv_scale.reshape({}));
  }
}

at::Tensor& updateScale_(at::Tensor& current_scale, at::Tensor& growth_tracker,
                         const at::Tensor& found_inf, double growth_factor,
                         double backoff_factor, int64_t growth_interval) {
  checkScalarArg(growth_tracker, "growth_tracker", at::kInt, "an int");
  checkScalarArg(current_scale, "current_scale", at::kFloat, "a float");
  checkScalarArg(found_inf, "found_inf", at::kFloat, "a float");
  TORCH_CHECK(growth_tracker.device() == current_scale.device() &&
                  found_inf.device() == current_scale.device(),
              "current_scale, growth_tracker and found_inf must be on the same device, got ",
              current_scale.device(), ", ", growth_tracker.device(), " and ", found_inf.device());
  const c10::DeviceGuard guard(current_scale.device());
  launchTask(getCurrentNPUStream(current_scale.device().index()), "_amp_update_scale_",
             [scale = current_scale.data_ptr<float>(), tracker = growth_tracker.data_ptr<int32_t>(),
              found = found_inf.data_ptr<float>(), growth_factor, backoff_factor,
              growth_interval] {
               nk::amp_update_scale(scale, tracker, found, growth_factor, backoff_factor,
                                    growth_interval);
             });
  return current_scale;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  NPU_IMPL(m, "_amp_foreach_non_finite_check_and_unscale_", nonFiniteCheckAndUnscale_);
  NPU_IMPL(m, "_amp_update_scale_", updateScale_);
}

}  // namespace torch_npu::native
