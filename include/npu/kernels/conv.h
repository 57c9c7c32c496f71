// 2-D convolution (cross-correlation, as torch.nn.functional.conv2d) and its backward, by
// im2col + the library's gemm.
//
// Layouts: input [N, C_in, H, W], weight [C_out, C_in / groups, KH, KW], bias [C_out],
// output [N, C_out, OH, OW] with OH / OW from conv_output_size(). All 4-D: an unbatched
// [C, H, W] input is the adapter's unsqueeze(0), and conv1d is conv2d with H = KH = 1
// (stride / padding / dilation 1 / 0 / 1 along H). Any strides are accepted: input is read
// through its strides while building the im2col matrix; output / grad tensors whose (H, W)
// dims merge into one (contiguous NCHW and channels-last both do) are written by gemm in
// place, others go through a staging buffer; a weight whose last three dims do not merge is
// staged once. transposed convolution is not provided (the adapter falls back).
//
// Dtypes: all of input / weight / output (and grads) Float64, or each of them any of
// Float32 / Float16 / BFloat16 (math in float32, one rounding on store).
//
// Float32 forward with stride 1 along W (not pointwise) on an AVX-512 CPU is a direct
// convolution: the GEMM's micro-tiles read input patches in place from a zero-padded copy of
// the input (at most ~16 MB of it at a time), nothing packed but the weight, bias and fuse_relu
// applied in registers. Other float32 forwards (with an output whose H and W merge) are an
// implicit GEMM: input patches are packed straight into the GEMM's panels, bias and fuse_relu
// are applied as each output block is finished. Memory there: a zero-padded copy of at most
// ~16 MB of the input at a time.
// Otherwise (and backward): one im2col buffer of (C_in / groups * KH * KW) x (OH * OW)
// compute-type elements per concurrently processed sample (samples run one at a time with a
// multi-threaded gemm when each is large, several at once with single-threaded gemms when they
// are small).
#pragma once

#include <cstdint>
#include <vector>

#include "npu/kernels/matmul.h"  // CubeMath
#include "npu/kernels/tensor_desc.h"

namespace npu::kernels {

bool conv2d_supports(DType input, DType weight, DType output);

struct Conv2dParams {  // [0] along H, [1] along W
  int64_t stride[2] = {1, 1};
  int64_t padding[2] = {0, 0};
  int64_t dilation[2] = {1, 1};
  int64_t groups = 1;
  bool fuse_relu = false;  // conv2d only: out = relu(conv2d(...)), applied as out is written
  // conv2d only: out = max_pool2d(conv2d(...) (then relu), kernel 2, stride 2, no padding,
  // floor), out being the pooled [N, C_out, OH / 2, OW / 2]. The direct and Winograd
  // convolutions pool each register tile before its store (the full-size output is never
  // written); other paths compute the convolution into a temporary and pool it with
  // max_pool2d. Forward only: conv2d_backward refuses it.
  bool fuse_max_pool2 = false;
  // conv2d only: a float32 3x3 convolution with stride 1, dilation 1, one group and at least
  // 16 input channels (AVX-512) may take Winograd F(2x2, 3x3): about 2.25x fewer products, not
  // bit-equal to the direct convolution (relative error within a few float32 ulps of the sum
  // of |products|; see docs/inference.md). Off by default (eager ops keep their bits); the
  // offline engine sets it.
  bool winograd = false;
  // HF32: float32 input, weight and grad_output are read as HF32 by every GEMM of the forward
  // and the backward (bias and accumulation stay float32), as the cube does under
  // torch.npu.conv.allow_hf32.
  CubeMath math = CubeMath::KeepDtype;
};

// (in + 2 pad - dilation (kernel - 1) - 1) / stride + 1, rounded down.
int64_t conv_output_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride,
                         int64_t dilation);

// out = conv2d(input, weight, bias); bias may be nullptr (or have null data).
void conv2d(const TensorDesc& out, const TensorDesc& input, const TensorDesc& weight,
            const TensorDesc* bias, const Conv2dParams& p);

// A float32 weight [C_out, C_in / groups, KH, KW] put once into the layout the direct
// convolution reads (8-row panels of each group's [C_out / groups, K] matrix), for a weight that
// does not change between calls (an offline model's): packing it per call is a pass over the
// whole weight, which at batch 1 outweighs the input. It copies the values: later writes to
// the weight are not seen.
struct PackedConvWeight {
  PackedConvWeight(const TensorDesc& weight, int64_t groups);
  const void* source;  // the weight's address when packed (checked, never read)
  int64_t out_channels, groups, k;  // k = C_in / groups * KH * KW
  std::vector<float> panels;
  // The Winograd-transformed weight (16 x [C_out, C_in] in 8-row panels) for a 3x3, one-group
  // weight with C_in >= 16 on a host with AVX-512, else empty; used by conv2d_prepacked when
  // p.winograd is set.
  std::vector<float> winograd;
};

// conv2d with the weight's panels packed already (`packed` made from this weight and p.groups):
// the same values as conv2d(out, input, weight, bias, p), which it is where the direct
// convolution does not apply.
void conv2d_prepacked(const TensorDesc& out, const TensorDesc& input, const TensorDesc& weight,
                      const PackedConvWeight& packed, const TensorDesc* bias,
                      const Conv2dParams& p);

// Gradients of conv2d; each of grad_input / grad_weight / grad_bias may be nullptr (ATen's
// output_mask) and is then not computed. All are overwritten. grad_weight sums over the
// batch in a fixed order for a given thread count.
void conv2d_backward(const TensorDesc* grad_input, const TensorDesc* grad_weight,
                     const TensorDesc* grad_bias, const TensorDesc& grad_output,
                     const TensorDesc& input, const TensorDesc& weight, const Conv2dParams& p);

}  // namespace npu::kernels
