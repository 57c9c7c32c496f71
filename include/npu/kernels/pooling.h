// 2-D pooling: max_pool2d (with indices), avg_pool2d, adaptive_avg_pool2d, and backward.
//
// Layouts: [N, C, H, W] or [C, H, W] (every input / output / grad descriptor of one call has
// the same leading dims), any strides: each (n, c) plane is used in place when it is a
// contiguous plane of the compute type and gathered into a buffer otherwise (so contiguous
// NCHW is the fast path; channels-last works, slower). Planes are spread over the pool.
// Output spatial sizes are given by the output descriptor; pool_output_size() computes them
// as PyTorch does. max_pool1d / avg_pool1d are the 2-D ops with H = 1 (kernel 1 along H).
//
// Dtypes: Float32, Float64, Float16, BFloat16 (16-bit math in float32); indices are Int64.
#pragma once

#include <cstdint>

#include "npu/kernels/tensor_desc.h"

namespace npu::kernels {

bool pooling_supports(DType input);

// Window parameters, [0] along H and [1] along W.
struct Pool2dParams {
  int64_t kernel[2] = {1, 1};
  int64_t stride[2] = {1, 1};
  int64_t padding[2] = {0, 0};
  int64_t dilation[2] = {1, 1};  // max_pool2d only
  bool ceil_mode = false;        // only changes the output size (already in the descriptor)
};

// PyTorch's pooling output size: floor (or ceil) of (in + 2 pad - dilation (k - 1) - 1) /
// stride + 1, where with ceil_mode the last window must start inside the input or left
// padding.
int64_t pool_output_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride,
                         int64_t dilation, bool ceil_mode);

// out / indices: [.., OH, OW]. indices (Int64) are the flat position h * W + w of the max
// within its input plane, as PyTorch's. NaN wins (the last NaN of the window); among equal
// values the first in row-major window order. indices with a null data pointer (its shape still
// given): not written (inference).
void max_pool2d(const TensorDesc& out, const TensorDesc& indices, const TensorDesc& in,
                const Pool2dParams& p);
// grad_input (overwritten) = 0 except grad_input[plane][indices] += grad_output (windows may
// overlap, so one input position can collect several gradients). Indices outside [0, H*W)
// are skipped.
void max_pool2d_backward(const TensorDesc& grad_input, const TensorDesc& grad_output,
                         const TensorDesc& indices);

// Mean over each window clipped to the padded input; the divisor is divisor_override when
// > 0, else the window's size within the padded input (count_include_pad) or within the
// input. A window entirely in padding gives 0.
void avg_pool2d(const TensorDesc& out, const TensorDesc& in, const Pool2dParams& p,
                bool count_include_pad, int64_t divisor_override = 0);
// grad_input (overwritten): each output's gradient / divisor spread over its window.
void avg_pool2d_backward(const TensorDesc& grad_input, const TensorDesc& grad_output,
                         const Pool2dParams& p, bool count_include_pad,
                         int64_t divisor_override = 0);

// Output cell (i, j) of an [OH, OW] output averages rows [floor(i H / OH), ceil((i+1) H / OH))
// and the matching columns (windows may overlap when OH does not divide H).
void adaptive_avg_pool2d(const TensorDesc& out, const TensorDesc& in);
void adaptive_avg_pool2d_backward(const TensorDesc& grad_input, const TensorDesc& grad_output);

}  // namespace npu::kernels
