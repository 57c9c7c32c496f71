// nll_loss / nll_loss2d (cross_entropy is log_softmax + nll_loss), with backward, on the
// library's loss kernels; binary_cross_entropy_with_logits's 16-bit calls in float32.
#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/binary_cross_entropy_with_logits_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "DeviceCheck.h"
#include "ExecutionPaths.h"
#include "KernelBridge.h"
#include "NPUStream.h"

namespace torch_npu::native {
namespace {

// ---- nll_loss (cross_entropy is log_softmax + nll_loss) -----------------------------------

// ATen's shape rules, checked here so the kernel gets only valid layouts; anything else goes
// to ATen's CPU kernel, which raises PyTorch's message.
bool nllOk(const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& w,
           int64_t reduction, bool two_d) {
  if (!describableFloating(self) || !nk::nll_loss_supports(*toKernelDType(self.scalar_type()))) {
    return false;
  }
  if (!describable(target) || !at::isIntegralType(target.scalar_type(), false)) return false;
  if (reduction < 0 || reduction > 2) return false;
  if (two_d) {
    if (self.dim() != 4 || target.dim() != 3 || target.size(0) != self.size(0) ||
        target.size(1) != self.size(2) || target.size(2) != self.size(3)) {
      return false;
    }
  } else {
    if (self.dim() < 1 || self.dim() > 2 || target.dim() > 1) return false;
    if (self.dim() == 2 && (target.dim() != 1 || target.size(0) != self.size(0))) return false;
    if (self.dim() == 1 && target.numel() != 1) return false;
  }
  const int64_t classes = self.dim() == 1 ? self.size(0) : self.size(1);
  if (w && w->defined() &&
      (!describable(*w) || w->numel() != classes || w->scalar_type() != self.scalar_type())) {
    return false;
  }
  return self.numel() > 0;
}

std::tuple<at::Tensor, at::Tensor> nllForward(const at::Tensor& self, const at::Tensor& target,
                                              const std::optional<at::Tensor>& weight,
                                              int64_t reduction, int64_t ignore_index,
                                              bool two_d) {
  if (!nllOk(self, target, weight, reduction, two_d)) {
    torch::jit::Stack stack;
    torch::jit::push(stack, self, target, weight, reduction, ignore_index);
    runOnHost(two_d ? NPU_ATEN_OP("nll_loss2d_forward", "") : NPU_ATEN_OP("nll_loss_forward", ""),
              &stack);
    return {stack[0].toTensor(), stack[1].toTensor()};
  }
  const c10::DeviceGuard guard(self.device());
  const bool per_sample = reduction == 0 && self.dim() >= 2;
  at::Tensor output = per_sample ? at::empty(target.sizes(), self.options())
                                 : at::empty({}, self.options());
  at::Tensor total_weight = at::empty({}, self.options());
  std::optional<nk::TensorDesc> w;
  if (weight && weight->defined()) w = describe(weight->contiguous());
  const at::Tensor t = self.dim() == 1 ? target.reshape({}) : target;
  launchTask(streamOf(self), "nll_loss",
             [o = describe(output), tw = describe(total_weight), i = describe(self),
              tg = describe(t), w, reduction, ignore_index] {
               nk::nll_loss(o, tw, i, tg, w ? &*w : nullptr,
                            static_cast<nk::LossReduction>(reduction), ignore_index);
             });
  return {output, total_weight};
}

at::Tensor nllBackward(const at::Tensor& grad_output, const at::Tensor& self,
                       const at::Tensor& target, const std::optional<at::Tensor>& weight,
                       int64_t reduction, int64_t ignore_index, const at::Tensor& total_weight,
                       bool two_d) {
  if (!nllOk(self, target, weight, reduction, two_d) || !describableFloating(grad_output) ||
      !describable(total_weight)) {
    return callHostKernel<at::Tensor>(
        two_d ? NPU_ATEN_OP("nll_loss2d_backward", "") : NPU_ATEN_OP("nll_loss_backward", ""),
        grad_output, self, target, weight, reduction, ignore_index, total_weight);
  }
  const c10::DeviceGuard guard(self.device());
  at::Tensor grad_input = at::empty(self.sizes(), self.options());
  std::optional<nk::TensorDesc> w;
  if (weight && weight->defined()) w = describe(weight->contiguous());
  const at::Tensor t = self.dim() == 1 ? target.reshape({}) : target;
  launchTask(streamOf(self), "nll_loss_backward",
             [gi = describe(grad_input), go = describe(grad_output), tg = describe(t), w,
              reduction, ignore_index, tw = describe(total_weight)] {
               nk::nll_loss_backward(gi, go, tg, w ? &*w : nullptr,
                                     static_cast<nk::LossReduction>(reduction), ignore_index, tw);
             });
  return grad_input;
}

std::tuple<at::Tensor, at::Tensor> nll_loss_forward(const at::Tensor& self,
                                                    const at::Tensor& target,
                                                    const std::optional<at::Tensor>& weight,
                                                    int64_t reduction, c10::SymInt ignore_index) {
  return nllForward(self, target, weight, reduction, ignore_index.expect_int(), false);
}
std::tuple<at::Tensor, at::Tensor> nll_loss2d_forward(const at::Tensor& self,
                                                      const at::Tensor& target,
                                                      const std::optional<at::Tensor>& weight,
                                                      int64_t reduction,
                                                      c10::SymInt ignore_index) {
  return nllForward(self, target, weight, reduction, ignore_index.expect_int(), true);
}
at::Tensor nll_loss_backward(const at::Tensor& grad_output, const at::Tensor& self,
                             const at::Tensor& target, const std::optional<at::Tensor>& weight,
                             int64_t reduction, c10::SymInt ignore_index,
                             const at::Tensor& total_weight) {
  return nllBackward(grad_output, self, target, weight, reduction, ignore_index.expect_int(),
                     total_weight, false);
}
at::Tensor nll_loss2d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                               const at::Tensor& target, const std::optional<at::Tensor>& weight,
                               int64_t reduction, c10::SymInt ignore_index,
                               const at::Tensor& total_weight) {
  return nllBackward(grad_output, self, target, weight, reduction, ignore_index.expect_int(),
                     total_weight, true);
}

// ---- binary_cross_entropy_with_logits ------------------------------------------------------

// ATen's composite (log-sigmoid, products with target and weights, the reduction), on the npu's
// kernels. A float16 / bfloat16 call runs it on float32 copies and rounds the result once, as the
// card computes the loss in float32: the composite in 16 bits rounds every step.
at::Tensor binary_cross_entropy_with_logits(const at::Tensor& self, const at::Tensor& target,
                                            const std::optional<at::Tensor>& weight,
                                            const std::optional<at::Tensor>& pos_weight,
                                            int64_t reduction) {
  const at::ScalarType type = self.scalar_type();
  auto sameType = [&](const std::optional<at::Tensor>& t) {
    return !t || !t->defined() || t->scalar_type() == type;
  };
  // Mixed dtypes promote in the composite (a float32 target gives a float32 loss): left to it.
  if ((type != at::kHalf && type != at::kBFloat16) || target.scalar_type() != type ||
      !sameType(weight) || !sameType(pos_weight)) {
    return at::native::binary_cross_entropy_with_logits(self, target, weight, pos_weight,
                                                        reduction);
  }
  auto wide = [](const std::optional<at::Tensor>& t) -> std::optional<at::Tensor> {
    if (!t || !t->defined()) return t;
    return t->to(at::kFloat);
  };
  return at::native::binary_cross_entropy_with_logits(self.to(at::kFloat), target.to(at::kFloat),
                                                      wide(weight),
                                                      wide(pos_weight), reduction)
      .to(type);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  NPU_IMPL(m, "binary_cross_entropy_with_logits", binary_cross_entropy_with_logits);
  NPU_IMPL(m, "nll_loss_forward", nll_loss_forward);
  NPU_IMPL(m, "nll_loss_backward", nll_loss_backward);
  NPU_IMPL(m, "nll_loss2d_forward", nll_loss2d_forward);
  NPU_IMPL(m, "nll_loss2d_backward", nll_loss2d_backward);
}

}  // namespace torch_npu::native
