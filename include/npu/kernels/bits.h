// Sign-bit packing (torch_npu's npu_sign_bits_pack / npu_sign_bits_unpack, 1-bit gradient
// compression): one bit per element, least significant bit first within a byte.
#pragma once

#include <cstdint>

namespace npu::kernels {

// out[k] bit j = 1 when x[8k + j] >= 0 (or NaN), 0 when it is negative or past the end
// (8k + j >= n). out has out_bytes >= ceil(n / 8) bytes.
void sign_bits_pack(uint8_t* out, int64_t out_bytes, const float* x, int64_t n);

// out[8k + j] = +1 when bit j of in[k] is set, -1 otherwise, for n_bytes bytes (8 n_bytes
// outputs).
void sign_bits_unpack(float* out, const uint8_t* in, int64_t n_bytes);

}  // namespace npu::kernels
