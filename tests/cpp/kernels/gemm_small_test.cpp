// gemm()'s small-product path (npu/kernels/gemm_small.h) against a float64 reference and
// against the packed path (the small path switched off) over the shapes at its limits, every
// operand layout, alpha / beta, 16-bit operands and C, and HF32.
#include <gtest/gtest.h>

#include <cmath>
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernel_test_util.h"
#include "npu/kernels/gemm_small.h"
#include "npu/kernels/matmul.h"

namespace npu::kernels {
namespace {

struct SmallPathOff {
  SmallPathOff() { testing::set_gemm_small_path(false); }
  ~SmallPathOff() { testing::set_gemm_small_path(true); }
};

// An M x N product, A and B in float32 storage laid out as asked (transposed: column-major),
// C = alpha A B + beta C0; returns C (float32) computed by gemm().
std::vector<float> product(int64_t M, int64_t N, int64_t K, bool at, bool bt, double alpha,
                           double beta, CubeMath math, const std::vector<float>& a,
                           const std::vector<float>& b, const std::vector<float>& c0) {
  std::vector<float> c = c0;
  const auto A = at ? TensorDesc::make(a.data(), DType::Float32, {M, K}, {1, M})
                    : TensorDesc::make(a.data(), DType::Float32, {M, K}, {K, 1});
  const auto B = bt ? TensorDesc::make(b.data(), DType::Float32, {K, N}, {1, K})
                    : TensorDesc::make(b.data(), DType::Float32, {K, N}, {N, 1});
  gemm(TensorDesc::make(c.data(), DType::Float32, {M, N}, {N, 1}), A, B, alpha, beta, math);
  return c;
}

std::vector<float> values(int64_t n, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t s = seed * 2654435761u + 1;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(static_cast<int32_t>(s >> 8) % 2001 - 1000) / 500.0f;
  }
  return v;
}

TEST(GemmSmall, EqualsTheReferenceAndThePackedPathOverShapesAndLayouts) {
  const int64_t shapes[][3] = {{1, 1, 1},  {16, 16, 8}, {16, 8, 16}, {7, 13, 5},
                               {32, 32, 32}, {3, 32, 64}, {32, 5, 64}, {31, 17, 9}};
  for (const auto& s : shapes) {
    const int64_t M = s[0], N = s[1], K = s[2];
    const auto a = values(M * K, 1), b = values(K * N, 2), c0 = values(M * N, 3);
    for (int layout = 0; layout < 4; ++layout) {
      const bool at = layout & 1, bt = layout & 2;
      for (auto [alpha, beta] : {std::pair{1.0, 0.0}, std::pair{0.5, 0.0}, std::pair{-2.0, 1.5}}) {
        const auto got = product(M, N, K, at, bt, alpha, beta, CubeMath::KeepDtype, a, b, c0);
        std::vector<float> packed;
        {
          SmallPathOff off;
          packed = product(M, N, K, at, bt, alpha, beta, CubeMath::KeepDtype, a, b, c0);
        }
        for (int64_t m = 0; m < M; ++m) {
          for (int64_t n = 0; n < N; ++n) {
            double want = 0, mag = 0;
            for (int64_t k = 0; k < K; ++k) {
              const double x = a[at ? k * M + m : m * K + k], y = b[bt ? n * K + k : k * N + n];
              want += x * y;
              mag += std::abs(x * y);
            }
            want = alpha * want + beta * c0[m * N + n];
            const double tol = 4e-7 * (std::abs(alpha) * mag + std::abs(beta * c0[m * N + n]) + 1);
            ASSERT_NEAR(got[m * N + n], want, tol) << M << "x" << N << "x" << K << " layout "
                                                   << layout << " at " << m << "," << n;
            ASSERT_NEAR(got[m * N + n], packed[m * N + n], 2 * tol);
          }
        }
      }
    }
  }
}

TEST(GemmSmall, TakesOnlySmallProductsAndFloatDtypes) {
  // Past the limits gemm() packs as before: both switch settings give the same bits.
  for (const auto& s : {std::array<int64_t, 3>{33, 8, 8}, std::array<int64_t, 3>{8, 8, 65},
                        std::array<int64_t, 3>{32, 32, 33}}) {
    const int64_t M = s[0], N = s[1], K = s[2];
    const auto a = values(M * K, 4), b = values(K * N, 5);
    const std::vector<float> c0(static_cast<size_t>(M * N), 0.0f);
    const auto on = product(M, N, K, false, false, 1.0, 0.0, CubeMath::KeepDtype, a, b, c0);
    SmallPathOff off;
    const auto packed = product(M, N, K, false, false, 1.0, 0.0, CubeMath::KeepDtype, a, b, c0);
    EXPECT_EQ(on, packed) << M << "x" << N << "x" << K;
  }
  // float64 is not taken: the double GEMM keeps its precision.
  std::vector<double> a(16, 1.0 / 3), b(16, 3.0), c(16, 0.0);
  const auto D = [](void* p) { return TensorDesc::make(p, DType::Float64, {4, 4}, {4, 1}); };
  EXPECT_FALSE(detail::gemm_small(D(c.data()), D(a.data()), D(b.data()), 1.0, 0.0,
                                  CubeMath::KeepDtype));
}

TEST(GemmSmall, SixteenBitOperandsAndCRoundOnce) {
  const int64_t M = 12, N = 20, K = 24;
  const auto af = values(M * K, 6), bf = values(K * N, 7);
  std::vector<uint16_t> a(af.size()), b(bf.size()), c(static_cast<size_t>(M * N));
  for (size_t i = 0; i < af.size(); ++i) a[i] = ktest::float_to_bf16_bits(af[i]);
  for (size_t i = 0; i < bf.size(); ++i) b[i] = ktest::float_to_bf16_bits(bf[i]);
  gemm(TensorDesc::make(c.data(), DType::BFloat16, {M, N}, {N, 1}),
       TensorDesc::make(a.data(), DType::BFloat16, {M, K}, {K, 1}),
       TensorDesc::make(b.data(), DType::BFloat16, {K, N}, {N, 1}));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double want = 0;
      for (int64_t k = 0; k < K; ++k) {
        want += double(ktest::bf16_bits_to_float(a[m * K + k])) * ktest::bf16_bits_to_float(b[k * N + n]);
      }
      // float32 accumulation, then one rounding to bfloat16: within one bf16 ulp of the exact
      EXPECT_NEAR(ktest::bf16_bits_to_float(c[m * N + n]), want, std::abs(want) / 128 + 1e-5);
    }
  }
}

TEST(GemmSmall, Hf32ReadsRoundedOperands) {
  const int64_t M = 16, N = 16, K = 8;
  auto a = values(M * K, 8), b = values(K * N, 9);
  for (auto& x : a) x += 1.0f / 4096;  // bits HF32 rounds away
  const std::vector<float> c0(static_cast<size_t>(M * N), 0.0f);
  const auto hf = product(M, N, K, false, false, 1.0, 0.0, CubeMath::HF32, a, b, c0);
  auto ar = a, br = b;
  for (auto& x : ar) x = round_to_hf32(x);
  for (auto& x : br) x = round_to_hf32(x);
  const auto rounded = product(M, N, K, false, false, 1.0, 0.0, CubeMath::KeepDtype, ar, br, c0);
  EXPECT_EQ(hf, rounded);
  EXPECT_NE(hf, product(M, N, K, false, false, 1.0, 0.0, CubeMath::KeepDtype, a, b, c0));
}

}  // namespace
}  // namespace npu::kernels
