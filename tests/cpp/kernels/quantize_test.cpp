// quantize_affine / dequantize_affine against ATen's rule written out element by element
// (float32 math): per tensor and per channel, the three storage types, half to even, clamping.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernel_test_util.h"
#include "npu/kernels/quantize.h"

namespace ktest {
namespace {

namespace nk = npu::kernels;

template <class Q>
void check(DType qtype, int64_t outer, int64_t channels, int64_t inner) {
  SCOPED_TRACE(::testing::Message() << dtype_str(qtype) << " " << outer << "x" << channels << "x"
                                    << inner);
  const std::vector<int64_t> sizes = {outer, channels, inner};
  HostTensor x(DType::Float32, sizes), q(qtype, sizes), out(DType::Float32, sizes);
  HostTensor scale(DType::Float64, {channels}), zp(DType::Int64, {channels});
  fill_uniform(x, -30, 30);
  x.set(0, 2.5);  // 2.5 / 0.5 = 5 exactly; 0.25 / 0.5 = 0.5, which rounds to 0 (half to even)
  if (x.numel() > 1) x.set(1, 0.25);
  for (int64_t c = 0; c < channels; ++c) scale.set(c, 0.5 / (c + 1)), zp.set(c, c % 3);
  nk::quantize_affine(q.desc(), x.desc(), scale.desc(), zp.desc(), channels, inner);
  nk::dequantize_affine(out.desc(), q.desc(), scale.desc(), zp.desc(), channels, inner);
  const int64_t qmin = std::numeric_limits<Q>::min(), qmax = std::numeric_limits<Q>::max();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t c = (i / inner) % channels;
    const float inv = 1.0f / static_cast<float>(scale.get(c));
    const float v = static_cast<float>(zp.get(c)) +
                    std::nearbyint(static_cast<float>(x.get(i)) * inv);
    const int64_t expected = std::clamp<int64_t>(static_cast<int64_t>(v), qmin, qmax);
    ASSERT_EQ(static_cast<int64_t>(q.get(i)), expected) << "element " << i;
    const float deq = static_cast<float>(expected - zp.get(c)) *
                      static_cast<float>(scale.get(c));
    ASSERT_EQ(static_cast<float>(out.get(i)), deq) << "element " << i;
  }
}

TEST(Quantize, PerTensorAndPerChannelOverStorageTypes) {
  check<int8_t>(DType::Int8, 1, 1, 1000);   // per tensor
  check<uint8_t>(DType::UInt8, 1, 1, 1000);
  check<int32_t>(DType::Int32, 1, 1, 1000);
  check<int8_t>(DType::Int8, 3, 4, 50);     // per channel, the channel in the middle
  check<uint8_t>(DType::UInt8, 2, 5, 1);    // the channel last
  check<int32_t>(DType::Int32, 1, 7, 300);  // the channel first, above the parallel grain
}

}  // namespace
}  // namespace ktest
