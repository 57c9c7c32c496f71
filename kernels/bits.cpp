// Sign-bit packing (include/npu/kernels/bits.h).
#include "npu/kernels/bits.h"

namespace npu::kernels {

void sign_bits_pack(uint8_t* out, int64_t out_bytes, const float* x, int64_t n) {
  for (int64_t k = 0; k < out_bytes; ++k) {
    uint8_t byte = 0;
    const int64_t base = 8 * k;
    for (int j = 0; j < 8 && base + j < n; ++j) {
      // !(x < 0): zero, -0.0 and NaN count as non-negative, as sign(x) + 1 != 0 does.
      if (!(x[base + j] < 0.0f)) byte = static_cast<uint8_t>(byte | (1u << j));
    }
    out[k] = byte;
  }
}

void sign_bits_unpack(float* out, const uint8_t* in, int64_t n_bytes) {
  for (int64_t k = 0; k < n_bytes; ++k) {
    const unsigned byte = in[k];
    for (int j = 0; j < 8; ++j) out[8 * k + j] = ((byte >> j) & 1u) ? 1.0f : -1.0f;
  }
}

}  // namespace npu::kernels
