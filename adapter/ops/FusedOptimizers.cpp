// _fused_adam_ / _fused_adamw_ / _fused_sgd_ (torch.optim's fused=True) on the library's fused
// kernels: one launch updates every parameter of the list. Step counts, grad_scale, found_inf
// and a tensor lr are device scalars read when the kernel runs, so a training step with
// GradScaler and a fused optimizer never waits for the device.
//
// The kernels walk each parameter's tensors as flat spans, so a parameter, its grad and its
// states must be dense with the same strides (what torch.optim creates: states are
// zeros_like(param) and grads follow the param's layout); anything else is refused with a
// message saying what to change.
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "DeviceCheck.h"
#include "KernelBridge.h"
#include "NPUStream.h"

namespace torch_npu::native {
namespace {

nk::TensorDesc span(const at::Tensor& t) {
  return nk::TensorDesc::make(t.data_ptr(), *toKernelDType(t.scalar_type()), {t.numel()});
}

// Checks list `what` (tensor i belongs to params[i]): same length, device, dtype, shape and
// strides as the params, dense.
void checkList(const char* op, at::TensorList params, at::TensorList list, const char* what) {
  TORCH_CHECK(list.size() == params.size(), op, ": expected ", params.size(), " ", what,
              " (one per param), got ", list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const at::Tensor& p = params[i];
    const at::Tensor& t = list[i];
    TORCH_CHECK(t.defined(), op, ": ", what, "[", i, "] is undefined");
    TORCH_CHECK(t.device() == p.device(), op, ": ", what, "[", i, "] is on ", t.device(),
                " but its param is on ", p.device(), "; all tensors of a fused step must be on "
                "one device");
    TORCH_CHECK(t.scalar_type() == p.scalar_type(), op, ": ", what, "[", i, "] has dtype ",
                t.scalar_type(), " but its param has ", p.scalar_type(),
                "; the fused kernels take one dtype per parameter");
    TORCH_CHECK(t.sizes() == p.sizes(), op, ": ", what, "[", i, "] has shape ", t.sizes(),
                " but its param has ", p.sizes());
    TORCH_CHECK(t.numel() == 0 || (t.is_non_overlapping_and_dense() && t.strides() == p.strides()),
                op, ": ", what, "[", i, "] (strides ", t.strides(), ") and its param (strides ",
                p.strides(), ") must be dense tensors with the same strides for the fused npu "
                "kernel; make them contiguous, or use foreach=True");
  }
}

void checkParams(const char* op, at::TensorList params) {
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& p = params[i];
    TORCH_CHECK(p.is_privateuseone(), op, ": params[", i, "] is on ", p.device(),
                ", expected an npu tensor");
    TORCH_CHECK(p.device() == params[0].device(), op, ": params[", i, "] is on ", p.device(),
                " but params[0] is on ", params[0].device(), "; group the params by device");
    TORCH_CHECK(toKernelDType(p.scalar_type()) &&
                    nk::fused_optimizer_supports(*toKernelDType(p.scalar_type())),
                op, ": params[", i, "] has dtype ", p.scalar_type(),
                "; the fused kernels take float32, float16, bfloat16 and float64 params");
    TORCH_CHECK(p.numel() == 0 || p.is_non_overlapping_and_dense(), op, ": params[", i,
                "] is not dense (strides ", p.strides(), "); make it contiguous or use "
                "foreach=True");
  }
}

// A one-element float32 device scalar on the params' device (grad_scale, found_inf, a step).
const float* deviceScalar(const char* op, const at::Tensor& t, const at::Tensor& param,
                          const char* what) {
  TORCH_CHECK(t.device() == param.device(), op, ": ", what, " is on ", t.device(),
              " but the params are on ", param.device());
  TORCH_CHECK(t.numel() == 1 && t.scalar_type() == at::kFloat, op, ": ", what,
              " must be a one-element float32 tensor, got ", t.scalar_type(), " with ",
              t.numel(), " elements");
  return t.data_ptr<float>();
}

// lr given as a tensor: a CPU tensor is read now (as CUDA's kernel does); an npu one is read
// by the kernel when it runs.
template <class Options>
void setTensorLr(const char* op, Options& o, const at::Tensor& lr, const at::Tensor& param) {
  TORCH_CHECK(lr.numel() == 1 && at::isFloatingType(lr.scalar_type()) &&
                  toKernelDType(lr.scalar_type()),
              op, ": lr must be a one-element floating tensor, got ", lr.scalar_type(), " with ",
              lr.numel(), " elements");
  if (lr.is_cpu()) {
    o.lr = lr.item<double>();
    return;
  }
  TORCH_CHECK(lr.device() == param.device(), op, ": lr is on ", lr.device(),
              " but the params are on ", param.device());
  o.lr_tensor = lr.data_ptr();
  o.lr_dtype = *toKernelDType(lr.scalar_type());
}

template <class Options>
void setScaling(const char* op, Options& o, const std::optional<at::Tensor>& grad_scale,
                const std::optional<at::Tensor>& found_inf, const at::Tensor& param) {
  if (grad_scale && grad_scale->defined()) {
    o.grad_scale = deviceScalar(op, *grad_scale, param, "grad_scale");
  }
  if (found_inf && found_inf->defined()) {
    o.found_inf = deviceScalar(op, *found_inf, param, "found_inf");
  }
}

void adam(const char* op, bool adamw, at::TensorList self, at::TensorList grads,
          at::TensorList exp_avgs, at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs,
          at::TensorList state_steps, double lr, const at::Tensor* lr_tensor, double beta1,
          double beta2, double weight_decay, double eps, bool amsgrad, bool maximize,
          const std::optional<at::Tensor>& grad_scale,
          const std::optional<at::Tensor>& found_inf) {
  if (self.empty()) return;
  checkParams(op, self);
  checkList(op, self, grads, "grads");
  checkList(op, self, exp_avgs, "exp_avgs");
  checkList(op, self, exp_avg_sqs, "exp_avg_sqs");
  if (amsgrad) checkList(op, self, max_exp_avg_sqs, "max_exp_avg_sqs");
  TORCH_CHECK(state_steps.size() == self.size(), op, ": expected ", self.size(),
              " state_steps (one per param), got ", state_steps.size());
  const at::Tensor& p0 = self[0];
  nk::AdamOptions o;
  o.lr = lr;
  if (lr_tensor) setTensorLr(op, o, *lr_tensor, p0);
  o.beta1 = beta1, o.beta2 = beta2, o.weight_decay = weight_decay, o.eps = eps;
  o.amsgrad = amsgrad, o.maximize = maximize, o.decoupled_weight_decay = adamw;
  setScaling(op, o, grad_scale, found_inf, p0);
  const c10::DeviceGuard guard(p0.device());
  std::vector<nk::AdamItem> items;
  items.reserve(self.size());
  // A step of another real dtype (DeepSpeed's FusedAdam keeps an int64 one; ATen's CPU kernel
  // takes any) is read through a float32 copy made on the stream before the kernel, and kept
  // alive by the task.
  std::vector<at::Tensor> float_steps;
  for (size_t i = 0; i < self.size(); ++i) {
    const at::Tensor& s = state_steps[i];
    TORCH_CHECK(s.device() == p0.device(), op, ": a state_step is on ", s.device(),
                " but the params are on ", p0.device());
    TORCH_CHECK(s.numel() == 1 && (at::isFloatingType(s.scalar_type()) ||
                                   at::isIntegralType(s.scalar_type(), /*includeBool=*/false)),
                op, ": a state_step must be a one-element real tensor, got ", s.scalar_type(),
                " with ", s.numel(), " elements");
    if (s.scalar_type() != at::kFloat) float_steps.push_back(s.to(at::kFloat));
    const float* step = (s.scalar_type() == at::kFloat ? s : float_steps.back()).data_ptr<float>();
    if (self[i].numel() == 0) continue;
    nk::AdamItem it;
    it.param = span(self[i]);
    it.grad = span(grads[i]);
    it.exp_avg = span(exp_avgs[i]);
    it.exp_avg_sq = span(exp_avg_sqs[i]);
    if (amsgrad) it.max_exp_avg_sq = span(max_exp_avg_sqs[i]);
    it.step = step;
    items.push_back(it);
  }
  if (items.empty()) return;
  launchTask(getCurrentNPUStream(p0.device().index()), op,
             [items = std::move(items), o, held = std::move(float_steps)] {
               nk::fused_adam(items.data(), static_cast<int64_t>(items.size()), o);
             });
}

#define NPU_FUSED_ADAM(fn, NAME, ADAMW)                                                       \
  void fn(at::TensorList self, at::TensorList grads, at::TensorList exp_avgs,                  \
          at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs,                          \
          at::TensorList state_steps, double lr, double beta1, double beta2,                   \
          double weight_decay, double eps, bool amsgrad, bool maximize,                        \
          const std::optional<at::Tensor>& grad_scale,                                         \
          const std::optional<at::Tensor>& found_inf) {                                        \
    adam(NAME, ADAMW, self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr,    \
         nullptr, beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf);  \
  }                                                                                            \
  void fn##_tensor_lr(at::TensorList self, at::TensorList grads, at::TensorList exp_avgs,      \
                      at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs,              \
                      at::TensorList state_steps, const at::Tensor& lr, double beta1,          \
                      double beta2, double weight_decay, double eps, bool amsgrad,             \
                      bool maximize, const std::optional<at::Tensor>& grad_scale,              \
                      const std::optional<at::Tensor>& found_inf) {                            \
    adam(NAME, ADAMW, self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, 0.0,   \
         &lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf);      \
  }
NPU_FUSED_ADAM(fusedAdam_, "_fused_adam_", false)
NPU_FUSED_ADAM(fusedAdamW_, "_fused_adamw_", true)

void sgd(at::TensorList self, at::TensorList grads, at::TensorList momentum_buffer_list,
         double weight_decay, double momentum, double lr, const at::Tensor* lr_tensor,
         double dampening, bool nesterov, bool maximize, bool is_first_step,
         const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
  const char* op = "_fused_sgd_";
  if (self.empty()) return;
  checkParams(op, self);
  checkList(op, self, grads, "grads");
  const bool use_buffers = momentum != 0;
  if (use_buffers) checkList(op, self, momentum_buffer_list, "momentum_buffer_list");
  const at::Tensor& p0 = self[0];
  nk::SgdOptions o;
  o.lr = lr;
  if (lr_tensor) setTensorLr(op, o, *lr_tensor, p0);
  o.weight_decay = weight_decay, o.momentum = momentum, o.dampening = dampening;
  o.nesterov = nesterov, o.maximize = maximize, o.is_first_step = is_first_step;
  setScaling(op, o, grad_scale, found_inf, p0);
  std::vector<nk::SgdItem> items;
  for (size_t i = 0; i < self.size(); ++i) {
    if (self[i].numel() == 0) continue;
    nk::SgdItem it;
    it.param = span(self[i]);
    it.grad = span(grads[i]);
    if (use_buffers) it.momentum_buffer = span(momentum_buffer_list[i]);
    items.push_back(it);
  }
  if (items.empty()) return;
  const c10::DeviceGuard guard(p0.device());
  launchTask(getCurrentNPUStream(p0.device().index()), op, [items = std::move(items), o] {
    nk::fused_sgd(items.data(), static_cast<int64_t>(items.size()), o);
  });
}

void fusedSgd_(at::TensorList self, at::TensorList grads, at::TensorList momentum_buffer_list,
               double weight_decay, double momentum, double lr, double dampening, bool nesterov,
               bool maximize, bool is_first_step, const std::optional<at::Tensor>& grad_scale,
               const std::optional<at::Tensor>& found_inf) {
  sgd(self, grads, momentum_buffer_list, weight_decay, momentum, lr, nullptr, dampening,
      nesterov, maximize, is_first_step, grad_scale, found_inf);
}
void fusedSgd_tensor_lr(at::TensorList self, at::TensorList grads,
                        at::TensorList momentum_buffer_list, double weight_decay,
                        double momentum, const at::Tensor& lr, double dampening, bool nesterov,
                        bool maximize, bool is_first_step,
                        const std::optional<at::Tensor>& grad_scale,
                        const std::optional<at::Tensor>& found_inf) {
  sgd(self, grads, momentum_buffer_list, weight_decay, momentum, 0.0, &lr, dampening, nesterov,
      maximize, is_first_step, grad_scale, found_inf);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  NPU_IMPL(m, "_fused_adam_", fusedAdam_);
  NPU_IMPL(m, "_fused_adam_.tensor_lr", fusedAdam__tensor_lr);
  NPU_IMPL(m, "_fused_adamw_", fusedAdamW_);
  NPU_IMPL(m, "_fused_adamw_.tensor_lr", fusedAdamW__tensor_lr);
  NPU_IMPL(m, "_fused_sgd_", fusedSgd_);
  NPU_IMPL(m, "_fused_sgd_.tensor_lr", fusedSgd_tensor_lr);
}

}  // namespace torch_npu::native
