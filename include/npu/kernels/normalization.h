// softmax / log_softmax (and backward), layer_norm and rms_norm (and backward).
//
// Floating dtypes only; input and output dtypes may differ (softmax of a Float16 input into
// a Float32 output, as half_to_float does). Math runs in float32 (float64 for Float64
// operands), with row statistics accumulated in double.
#pragma once

#include "npu/kernels/tensor_desc.h"

namespace npu::kernels {

// out = softmax(in) along `dim` (log_softmax when `log`); out has in's shape.
void softmax(const TensorDesc& out, const TensorDesc& in, int dim, bool log);

// softmax:     grad_input = output * (grad_output - sum(grad_output * output))
// log_softmax: grad_input = grad_output - exp(output) * sum(grad_output)
void softmax_backward(const TensorDesc& grad_input, const TensorDesc& grad_output,
                      const TensorDesc& output, int dim, bool log);

// Layer norm over the last `normalized_ndim` dims of `in` ([M, N] with N their product):
//   out = (in - mean) * rstd * weight + bias,  rstd = 1 / sqrt(biased var + eps).
// mean and rstd: M elements in any shape (e.g. PyTorch's [M..., 1...]), read and written in
// row-major order. weight / bias: N elements, or nullptr.
void layer_norm(const TensorDesc& out, const TensorDesc& mean, const TensorDesc& rstd,
                const TensorDesc& in, const TensorDesc* weight, const TensorDesc* bias,
                int normalized_ndim, double eps);

// Any of grad_input / grad_weight / grad_bias may be nullptr (not wanted).
void layer_norm_backward(const TensorDesc* grad_input, const TensorDesc* grad_weight,
                         const TensorDesc* grad_bias, const TensorDesc& grad_output,
                         const TensorDesc& in, const TensorDesc& mean, const TensorDesc& rstd,
                         const TensorDesc* weight, int normalized_ndim);

// RMS norm (torch_npu.npu_rms_norm): out = in * rstd * weight, rstd = 1/sqrt(mean(in^2)+eps).
void rms_norm(const TensorDesc& out, const TensorDesc& rstd, const TensorDesc& in,
              const TensorDesc* weight, int normalized_ndim, double eps);
void rms_norm_backward(const TensorDesc* grad_input, const TensorDesc* grad_weight,
                       const TensorDesc& grad_output, const TensorDesc& in,
                       const TensorDesc& rstd, const TensorDesc* weight, int normalized_ndim);

}  // namespace npu::kernels
