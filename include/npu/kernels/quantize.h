// Affine quantization of contiguous tensors, with ATen's CPU rule (float32 math), per tensor or
// per channel. x / out are contiguous Float32 [outer, channels, inner] (channels = 1, inner =
// numel: per tensor); q is the contiguous Int8 / UInt8 / Int32 storage of a qint8 / quint8 /
// qint32 tensor of the same shape; scale and zero_point hold `channels` values of any dtype.
//   quantize:   q = clamp(zero_point[c] + nearbyint(x * (1.0f / float(scale[c]))), qmin, qmax)
//   dequantize: out = float(q - zero_point[c]) * float(scale[c])
// One pass, no temporaries; elements spread over the pool.
#pragma once

#include <cstdint>

#include "npu/kernels/tensor_desc.h"

namespace npu::kernels {

void quantize_affine(const TensorDesc& q, const TensorDesc& x, const TensorDesc& scale,
                     const TensorDesc& zero_point, int64_t channels, int64_t inner);
void dequantize_affine(const TensorDesc& out, const TensorDesc& q, const TensorDesc& scale,
                       const TensorDesc& zero_point, int64_t channels, int64_t inner);

}  // namespace npu::kernels
