// Affine quantize / dequantize (npu/kernels/quantize.h): one flat loop per call over contiguous
// memory, the channel of element i being (i / inner) % channels.
#include "npu/kernels/quantize.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernel_assert.h"
#include "nn_common.h"
#include "npu/kernels/thread_pool.h"

namespace npu::kernels {
namespace {

constexpr int64_t kGrain = 1 << 16;

template <class Q>
void quantize_typed(Q* q, const float* x, int64_t n, const std::vector<float>& inv,
                    const std::vector<float>& zp, int64_t channels, int64_t inner) {
  constexpr int64_t qmin = std::numeric_limits<Q>::min(), qmax = std::numeric_limits<Q>::max();
  parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t c = channels == 1 ? 0 : (i / inner) % channels;
      // float sum as ATen's (zero_point + nearbyint(float)), then int64 and the clamp
      const float v = zp[c] + std::nearbyint(x[i] * inv[c]);
      const int64_t r = std::isnan(v) ? 0 : static_cast<int64_t>(std::clamp<float>(
                                                v, -9.2e18f, 9.2e18f));
      q[i] = static_cast<Q>(std::clamp(r, qmin, qmax));
    }
  });
}

template <class Q>
void dequantize_typed(float* out, const Q* q, int64_t n, const std::vector<float>& scale,
                      const std::vector<int64_t>& zp, int64_t channels, int64_t inner) {
  parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t c = channels == 1 ? 0 : (i / inner) % channels;
      out[i] = static_cast<float>(static_cast<int64_t>(q[i]) - zp[c]) * scale[c];
    }
  });
}

template <class F>
void dispatch_qtype(DType t, F&& f) {
  switch (t) {
    case DType::Int8: return f(int8_t{});
    case DType::UInt8: return f(uint8_t{});
    case DType::Int32: return f(int32_t{});
    default: NPU_KERNEL_ASSERT(false, "quantize: storage must be Int8, UInt8 or Int32");
  }
}

}  // namespace

void quantize_affine(const TensorDesc& q, const TensorDesc& x, const TensorDesc& scale,
                     const TensorDesc& zero_point, int64_t channels, int64_t inner) {
  NPU_KERNEL_ASSERT(x.dtype == DType::Float32, "quantize_affine takes a Float32 input");
  std::vector<float> inv = detail::load_vector<float>(&scale, channels, 1.0f);
  for (float& s : inv) s = 1.0f / s;
  const std::vector<float> zp = detail::load_vector<float>(&zero_point, channels, 0.0f);
  const int64_t n = x.numel();
  dispatch_qtype(q.dtype, [&](auto tag) {
    using Q = decltype(tag);
    quantize_typed(static_cast<Q*>(q.data), static_cast<const float*>(x.data), n, inv, zp,
                   channels, inner);
  });
}

void dequantize_affine(const TensorDesc& out, const TensorDesc& q, const TensorDesc& scale,
                       const TensorDesc& zero_point, int64_t channels, int64_t inner) {
  NPU_KERNEL_ASSERT(out.dtype == DType::Float32, "dequantize_affine writes Float32");
  const std::vector<float> s = detail::load_vector<float>(&scale, channels, 1.0f);
  const std::vector<int64_t> zp = detail::load_vector<int64_t>(&zero_point, channels, 0);
  const int64_t n = q.numel();
  dispatch_qtype(q.dtype, [&](auto tag) {
    using Q = decltype(tag);
    dequantize_typed(static_cast<float*>(out.data), static_cast<const Q*>(q.data), n, s, zp,
                     channels, inner);
  });
}

}  // namespace npu::kernels
