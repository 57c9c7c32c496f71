// Classification losses: nll_loss / nll_loss2d forward and backward (cross_entropy is
// log_softmax (normalization.h) followed by nll_loss).
//
// Layouts (any strides, any dtype conversion on load/store):
//  - input: [C] (one sample), [N, C], or [N, C, d1, ..., dk] (nll_loss2d is k = 2).
//  - target: integer dtype (Int64 or Int32, any integer works), shape [] for a [C] input,
//    [N] for [N, C], [N, d1, ..., dk] for the spatial form.
//  - weight: optional [C] class weights (nullptr or a descriptor with null data for none).
//  - output: for reduction None with an input of ndim >= 2, target's shape; otherwise one
//    element (0-dim). total_weight: one element, always written (0 for reduction None with
//    ndim >= 2, as ATen does), the sum of weight[target] over non-ignored targets otherwise.
//  - output and total_weight have input's dtype (any floating dtype is converted on store).
// Semantics are ATen's nll_loss_forward / nll_loss2d_forward: loss_i = -weight[t_i] *
// input[i, t_i], 0 where t_i == ignore_index; Mean divides the sum by total_weight (0 / 0 =
// NaN when every target is ignored, as in PyTorch).
//
// Errors: a target outside [0, C) that is not ignore_index throws std::out_of_range with
// ATen's message, e.g. "Target 7 is out of bounds." The adapter should surface it to the
// user as an IndexError (kernels run on a stream: it arrives at the next synchronize).
// Outputs may be partly written when it is thrown.
#pragma once

#include <cstdint>

#include "npu/kernels/tensor_desc.h"

namespace npu::kernels {

// Same numbering as at::Reduction, so the adapter can cast the int it receives.
enum class LossReduction : int { None = 0, Mean = 1, Sum = 2 };

// Float32, Float64, Float16, BFloat16 inputs (16-bit math in float32, sums in double).
bool nll_loss_supports(DType input);

void nll_loss(const TensorDesc& output, const TensorDesc& total_weight, const TensorDesc& input,
              const TensorDesc& target, const TensorDesc* weight, LossReduction reduction,
              int64_t ignore_index);

// grad_input (input's shape, overwritten: zero except at each sample's target class):
//   grad_input[i, t_i] = -weight[t_i] * g_i,  g_i = grad_output[i] for reduction None with
//   ndim >= 2 (grad_output has target's shape), else the one grad_output value, divided by
//   total_weight for Mean. total_weight is the forward's second output.
void nll_loss_backward(const TensorDesc& grad_input, const TensorDesc& grad_output,
                       const TensorDesc& target, const TensorDesc* weight,
                       LossReduction reduction, int64_t ignore_index,
                       const TensorDesc& total_weight);

}  // namespace npu::kernels
