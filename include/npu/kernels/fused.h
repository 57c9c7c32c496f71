// Fused kernels of torch_npu's LLM ops: add_rms_norm, rotary_mul, swiglu (rms_norm itself is in
// normalization.h). One pass over memory each; Float32 / Float16 / BFloat16 with float math.
#pragma once

#include "npu/kernels/tensor_desc.h"

namespace npu::kernels {

// npu_add_rms_norm: x = x1 + x2 (stored to x_out, rounded to its dtype), then from that
// rounded x: rstd = 1 / sqrt(mean(x^2) + eps), y = x * rstd * gamma, over the last
// `normalized_ndim` dims. x1, x2, x_out, y share a shape; gamma has N elements; rstd M.
void add_rms_norm(const TensorDesc& y, const TensorDesc& rstd, const TensorDesc& x_out,
                  const TensorDesc& x1, const TensorDesc& x2, const TensorDesc& gamma,
                  int normalized_ndim, double eps);

// Rotation of the last dim (size D, even):
//   Half:       rotate(x) = cat(-x[D/2:], x[:D/2])          (rotate_half)
//   Interleave: rotate(x)[2k] = -x[2k+1], rotate(x)[2k+1] = x[2k]
enum class RotaryMode { Half, Interleave };

// out = x * r1 + rotate(x) * r2; r1 / r2 are already broadcast to x's shape (stride 0 dims).
void rotary_mul(const TensorDesc& out, const TensorDesc& x, const TensorDesc& r1,
                const TensorDesc& r2, RotaryMode mode);

// grad_x = dy * r1 + rotate^T(dy * r2) (rotate^T = -rotate), grad_r1 = dy * x,
// grad_r2 = dy * rotate(x), all in x's shape (the caller sums them over broadcast dims).
// Any output may be nullptr.
void rotary_mul_backward(const TensorDesc* grad_x, const TensorDesc* grad_r1,
                         const TensorDesc* grad_r2, const TensorDesc& grad_out,
                         const TensorDesc& x, const TensorDesc& r1, const TensorDesc& r2,
                         RotaryMode mode);

// npu_swiglu on the two halves a, b of x (views, same shape as out): out = silu(a) * b.
void swiglu(const TensorDesc& out, const TensorDesc& a, const TensorDesc& b);
// grad_a = dy * b * silu'(a), grad_b = dy * silu(a).
void swiglu_backward(const TensorDesc& grad_a, const TensorDesc& grad_b,
                     const TensorDesc& grad_out, const TensorDesc& a, const TensorDesc& b);

}  // namespace npu::kernels
