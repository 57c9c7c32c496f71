// The kernels of mixed-precision training: GradScaler's two kernels and the fused optimizers
// (Adam / AdamW / SGD over every parameter in one call), with the arithmetic of PyTorch's
// CPU/CUDA kernels (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_,
// _fused_adam(w)_, _fused_sgd_).
//
// Every tensor is passed as a 1-D contiguous descriptor over its storage span: the caller
// checks that the tensors of one parameter (param, grad, states) are dense with equal strides,
// so element i of each is the same logical element. Scalars that live on the device (the loss
// scale, found_inf, the step counts, a tensor lr) are read through pointers when the kernel
// runs, so queuing a call never waits for earlier work.
#pragma once

#include <cstdint>

#include "npu/kernels/tensor_desc.h"

namespace npu::kernels {

// ---- GradScaler ----------------------------------------------------------------------------

// For every tensor g of grads (Float32 / Float16 / BFloat16 / Float64): if any element is inf
// or NaN, *found_inf = 1 (it is never cleared: zeroing it first is the caller's job); then
// g *= *inv_scale, unless *inv_scale == 1 (so a check-only call leaves g bit-identical).
// Float64 grads are multiplied in double, the others in float.
void amp_non_finite_check_and_unscale(const TensorDesc* grads, int64_t count, float* found_inf,
                                      const float* inv_scale);

// The dynamic loss scale's update, as CUDA's _amp_update_scale_: after a step with infs
// (*found_inf != 0) scale *= backoff and the tracker restarts; otherwise the tracker counts
// the step, and on reaching growth_interval scale *= growth (kept only if finite) and the
// tracker restarts.
void amp_update_scale(float* scale, int32_t* growth_tracker, const float* found_inf,
                      double growth_factor, double backoff_factor, int64_t growth_interval);

// ---- fused optimizers ----------------------------------------------------------------------

// One parameter of a fused Adam / AdamW step. param, grad, exp_avg, exp_avg_sq (and
// max_exp_avg_sq with amsgrad) have one floating dtype and the same numel; step points at
// the parameter's step count (a float32 device scalar, already incremented by the caller as
// torch.optim does).
struct AdamItem {
  TensorDesc param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq;
  const float* step = nullptr;
};

struct AdamOptions {
  double lr = 1e-3;
  const void* lr_tensor = nullptr;  // when set: lr read from this one-element tensor
  DType lr_dtype = DType::Float32;
  double beta1 = 0.9, beta2 = 0.999, weight_decay = 0, eps = 1e-8;
  bool amsgrad = false, maximize = false;
  bool decoupled_weight_decay = false;  // true: AdamW
  const float* grad_scale = nullptr;    // grads are divided by it (and written back unscaled)
  const float* found_inf = nullptr;     // when *found_inf == 1 the whole step is skipped
};

// Adam (decoupled_weight_decay = false) or AdamW over `count` parameters, elements spread
// over the thread pool. Math in float (double for Float64 parameters), one rounding per state.
void fused_adam(const AdamItem* items, int64_t count, const AdamOptions& options);

// One parameter of a fused SGD step; momentum_buffer is unused when momentum == 0.
struct SgdItem {
  TensorDesc param, grad, momentum_buffer;
};

struct SgdOptions {
  double lr = 1e-3;
  const void* lr_tensor = nullptr;
  DType lr_dtype = DType::Float32;
  double weight_decay = 0, momentum = 0, dampening = 0;
  bool nesterov = false, maximize = false;
  bool is_first_step = false;  // the momentum buffers are set to the gradient, not decayed
  const float* grad_scale = nullptr;
  const float* found_inf = nullptr;
};

void fused_sgd(const SgdItem* items, int64_t count, const SgdOptions& options);

// True for the parameter dtypes the fused kernels take (Float32, Float16, BFloat16, Float64).
bool fused_optimizer_supports(DType param);

}  // namespace npu::kernels
