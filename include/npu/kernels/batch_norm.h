// Batch normalization over [N, C, *] (BatchNorm1d/2d/3d): forward in training or eval mode
// and backward, with ATen's native_batch_norm / native_batch_norm_backward contracts.
//
// Layouts: input / output / grad_* are [N, C] or [N, C, d1, ..., dk] with any strides (each
// (n, c) plane is read in place when contiguous, gathered otherwise: contiguous NCHW is the
// fast path, channels-last works but is slower). Per-channel tensors (weight, bias,
// running_mean, running_var, save_mean, save_invstd, grad_weight, grad_bias) are C elements
// of any floating dtype (e.g. float32 stats for a Float16 input, as ATen's mixed mode).
// An optional tensor is nullptr or a descriptor with null data.
//
// Math runs in float32 (float64 for Float64 input) with per-channel sums in double: mean and
// the biased variance come from two passes over the channel (no cancellation). Channels are
// spread over the pool (one channel per task; C = 1 runs on one thread).
#pragma once

#include "npu/kernels/tensor_desc.h"

namespace npu::kernels {

// Float32, Float64, Float16, BFloat16 inputs.
bool batch_norm_supports(DType input);

// training: per channel, mean and biased var over N * d1 * ... * dk elements;
//   save_mean = mean, save_invstd = 1 / sqrt(var + eps) (both written when they have data);
//   running_mean = (1 - momentum) * running_mean + momentum * mean and
//   running_var  = (1 - momentum) * running_var + momentum * var * n / (n - 1) (unbiased),
//   updated in place when given. n == 1 gives an infinite / NaN running_var, as ATen's
//   kernel (Python's F.batch_norm rejects it first). An empty input (n == 0) writes an empty
//   output, mean 0 and invstd 1 / sqrt(eps) and leaves the running stats (unbiased var NaN
//   would poison them) -- the adapter may also skip the call.
// eval (training == false): normalizes with running_mean / running_var (both required);
//   save_mean / save_invstd are not written (ATen returns them empty on CPU).
// out = (x - mean) * invstd * weight + bias (weight 1 / bias 0 when absent).
void batch_norm(const TensorDesc& out, const TensorDesc* save_mean,
                const TensorDesc* save_invstd, const TensorDesc& input, const TensorDesc* weight,
                const TensorDesc* bias, const TensorDesc* running_mean,
                const TensorDesc* running_var, bool training, double momentum, double eps);

// grad_input / grad_weight / grad_bias: each may be nullptr (the output_mask of ATen).
// training: mean = save_mean, invstd = save_invstd (the forward's outputs), and
//   grad_input = weight * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)), xhat =
//   (x - mean) * invstd, the means over the channel's N * d1 * ... * dk elements.
// eval: mean = running_mean, invstd = 1 / sqrt(running_var + eps), and
//   grad_input = dy * weight * invstd (the statistics are constants).
// grad_weight = sum(dy * xhat), grad_bias = sum(dy) per channel, in both modes.
void batch_norm_backward(const TensorDesc* grad_input, const TensorDesc* grad_weight,
                         const TensorDesc* grad_bias, const TensorDesc& grad_output,
                         const TensorDesc& input, const TensorDesc* weight,
                         const TensorDesc* running_mean, const TensorDesc* running_var,
                         const TensorDesc* save_mean, const TensorDesc* save_invstd,
                         bool training, double eps);

// Group norm backward over input [N, C, HxW] (any strides; grad_output and grad_input the
// same shape), with the forward's mean / rstd [N, group] (any floating dtype, N * group
// elements in row-major order) and an optional weight [C]; C % group == 0. With D = C / group
// and, per (n, g), ds = sum_{c in g} w[c] sum_hw dy * x and db = sum_{c in g} w[c] sum_hw dy:
//   grad_input = rstd * w[c] * dy + c2 * x + c3, c2 = (db * mean - ds) * rstd^3 / (D * HxW),
//                c3 = -c2 * mean - db * rstd / (D * HxW)
//   grad_weight[c] = sum_n (sum_hw dy * x - mean * sum_hw dy) * rstd, grad_bias[c] = sum dy.
// Each output may be nullptr (ATen's output_mask); grad_weight / grad_bias are C elements of
// any floating dtype. Math in float32 (float64 for Float64 input), the per-(n, c) sums in double.
void group_norm_backward(const TensorDesc* grad_input, const TensorDesc* grad_weight,
                         const TensorDesc* grad_bias, const TensorDesc& grad_output,
                         const TensorDesc& input, const TensorDesc& mean, const TensorDesc& rstd,
                         const TensorDesc* weight, int64_t group);

// ---- SyncBatchNorm's pieces (CUDA's batch_norm_stats / _elemt / _backward_reduce /
// _backward_elemt / _gather_stats contracts, plus torch_npu's batch_norm_reduce and
// batch_norm_gather_stats_update). Per-channel tensors are C elements of any floating dtype;
// a per-rank tensor is [W, C]; counts are W elements of any dtype. Math as batch_norm's (compute
// type float32 or float64, per-channel sums in double).

// Per channel: mean and invstd = 1 / sqrt(biased var + eps) (two passes).
void batch_norm_stats(const TensorDesc& mean, const TensorDesc& invstd, const TensorDesc& input,
                      double eps);
// Per channel: sum(x) and sum(x * x) (torch_npu.batch_norm_reduce).
void batch_norm_sums(const TensorDesc& sum, const TensorDesc& square_sum, const TensorDesc& input);
// out = (x - mean) * invstd * weight + bias (weight 1 / bias 0 when absent).
void batch_norm_elemt(const TensorDesc& out, const TensorDesc& input, const TensorDesc* weight,
                      const TensorDesc* bias, const TensorDesc& mean, const TensorDesc& invstd);
// Per channel: sum_dy = sum(dy), sum_dy_xmu = sum(dy * (x - mean)), grad_weight =
// sum_dy_xmu * invstd, grad_bias = sum_dy; each output may be nullptr.
void batch_norm_backward_reduce(const TensorDesc* sum_dy, const TensorDesc* sum_dy_xmu,
                                const TensorDesc* grad_weight, const TensorDesc* grad_bias,
                                const TensorDesc& grad_output, const TensorDesc& input,
                                const TensorDesc& mean, const TensorDesc& invstd);
// With n = sum(count) (count: any dtype, any number of elements):
//   grad_input = (dy - sum_dy / n - (x - mean) * invstd^2 * sum_dy_xmu / n) * invstd * weight.
void batch_norm_backward_elemt(const TensorDesc& grad_input, const TensorDesc& grad_output,
                               const TensorDesc& input, const TensorDesc& mean,
                               const TensorDesc& invstd, const TensorDesc* weight,
                               const TensorDesc& sum_dy, const TensorDesc& sum_dy_xmu,
                               const TensorDesc& count);
// The global statistics from each rank's mean / invstd [W, C] and element count [W] (ranks with
// count 0 are left out): mean_out = sum(n_j * mean_j) / n, var = sum(n_j * (1 / invstd_j^2 - eps
// + (mean_j - mean_out)^2)) / n, invstd_out = 1 / sqrt(var + eps); running_mean and
// running_var (unbiased: var * n / (n - 1)) are updated in place with momentum when given.
void batch_norm_gather_stats(const TensorDesc& mean_out, const TensorDesc& invstd_out,
                             const TensorDesc& mean, const TensorDesc& invstd,
                             const TensorDesc* running_mean, const TensorDesc* running_var,
                             double momentum, double eps, const TensorDesc& counts);
// torch_npu.batch_norm_gather_stats_update: the same from each rank's sum / square_sum [W, C]:
// mean_out = sum / n, var = square_sum / n - mean_out^2 (biased, which also updates
// running_var, as torch_npu's), invstd_out = 1 / sqrt(var + eps).
void batch_norm_gather_stats_update(const TensorDesc& mean_out, const TensorDesc& invstd_out,
                                    const TensorDesc& sum, const TensorDesc& square_sum,
                                    const TensorDesc* running_mean,
                                    const TensorDesc* running_var, double momentum, double eps,
                                    const TensorDesc& counts);

}  // namespace npu::kernels
