// gemm / gemm_batched against a naive double-precision triple loop: shapes around the
// micro-kernel and cache-block edges, transposed and strided operands, column-major C,
// alpha/beta, 16-bit and mixed dtypes, K == 0, broadcast batches, every micro-kernel ISA
// (AVX512-BF16 dot products, AVX-512 float, AVX2) forced in turn on one machine.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "kernel_test_util.h"
#include "npu/kernels/matmul.h"

namespace ktest {
namespace {

namespace nk = npu::kernels;

struct GemmCase {
  int64_t m, n, k;
  bool ta, tb, tc;  // operand stored transposed (column-major)
  double alpha, beta;
  DType at, bt, ct;
};

// Checks C = alpha A B + beta C0 elementwise with a bound relative to sum |alpha a b| + |beta c|.
void check_gemm(const GemmCase& g) {
  SCOPED_TRACE(::testing::Message() << g.m << "x" << g.n << "x" << g.k << " ta=" << g.ta
                                    << " tb=" << g.tb << " tc=" << g.tc << " alpha=" << g.alpha
                                    << " beta=" << g.beta << " " << dtype_str(g.at) << "/"
                                    << dtype_str(g.bt) << "/" << dtype_str(g.ct));
  HostTensor a(g.at, {g.m, g.k}, g.ta ? Layout::Transposed : Layout::Contiguous);
  HostTensor b(g.bt, {g.k, g.n}, g.tb ? Layout::Transposed : Layout::Contiguous);
  HostTensor c(g.ct, {g.m, g.n}, g.tc ? Layout::Transposed : Layout::Contiguous);
  fill_uniform(a, -1, 1);
  fill_uniform(b, -1, 1);
  fill_uniform(c, -1, 1);
  if (g.beta == 0 && c.numel() > 0) c.set(0, NAN);  // beta == 0 must not read C
  HostTensor c0 = c;
  nk::gemm(c.desc(), a.desc(), b.desc(), g.alpha, g.beta);

  double eps = std::max(default_rtol(g.ct), std::max(default_rtol(g.at), default_rtol(g.bt)));
  if (g.at == DType::Float64) eps = 1e-13;
  int bad = 0;
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < g.n; ++j) {
      double ref = 0, mag = 0;
      for (int64_t p = 0; p < g.k; ++p) {
        double t = a.get(i * g.k + p) * b.get(p * g.n + j);
        ref += t;
        mag += std::fabs(t);
      }
      ref *= g.alpha;
      mag *= std::fabs(g.alpha);
      if (g.beta != 0) {
        ref += g.beta * c0.get(i * g.n + j);
        mag += std::fabs(g.beta * c0.get(i * g.n + j));
      }
      double got = c.get(i * g.n + j);
      if (!(std::fabs(got - ref) <= eps * (mag + 1e-30) + 1e-30) && bad++ < 5) {
        ADD_FAILURE() << "C[" << i << "," << j << "] = " << got << ", want " << ref;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

class GemmIsa : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { nk::testing::set_gemm_isa(GetParam()); }
  void TearDown() override { nk::testing::set_gemm_isa("auto"); }
};

TEST_P(GemmIsa, ShapesAroundTileAndBlockEdges) {
  const int64_t shapes[][3] = {{1, 1, 1},    {1, 37, 5},   {29, 1, 8},    {14, 32, 16},
                               {15, 33, 17}, {6, 16, 400}, {100, 70, 50}, {131, 257, 385},
                               {3100, 20, 9}, {45, 1100, 20}};
  for (auto& s : shapes) {
    check_gemm({s[0], s[1], s[2], false, false, false, 1.0, 0.0, DType::Float32, DType::Float32,
                DType::Float32});
    check_gemm({s[0], s[1], s[2], false, false, false, 1.0, 0.0, DType::Float64, DType::Float64,
                DType::Float64});
  }
}

// 16-column panels (N <= 16, a classifier's last layer) and 8-row panels (M a multiple of 8 that
// 14 rows would pad), in one K block (K <= 640) and across equal K blocks (K > 640), every
// layout, alpha and beta. Which M take 8-row panels depends on the core (eight_row_cost in
// gemm.cpp: 64 does on Sapphire Rapids, not on Ice Lake); 8 and 16 do on every AVX-512 core, so
// both 8-row kernels (16 and 32 columns) run everywhere.
TEST_P(GemmIsa, NarrowAndEightRowPanels) {
  const int64_t shapes[][3] = {{64, 10, 512}, {64, 10, 1100}, {23, 16, 700}, {9, 15, 33},
                               {70, 12, 40},  {16, 17, 600},  {64, 40, 1030}, {16, 10, 700},
                               {8, 40, 1030},  {8, 16, 64}};
  for (auto& s : shapes) {
    for (int mask = 0; mask < 8; ++mask) {
      check_gemm({s[0], s[1], s[2], bool(mask & 1), bool(mask & 2), bool(mask & 4), 1.0, 0.0,
                  DType::Float32, DType::Float32, DType::Float32});
    }
    check_gemm({s[0], s[1], s[2], false, true, false, -1.5, 0.5, DType::Float32, DType::Float32,
                DType::Float32});
  }
}

// Row-major A read in place by the 14-row kernel (M a multiple of 8 that 14 rows pad by less
// than 8%: 96, 256; or no multiple of either: 100, whose last 2 rows are a packed, zero-padded
// panel), against B read in place (row-major, N a multiple of 32) or packed (transposed, or N
// not a multiple of 32), in one K block and across K blocks (K = 700: the row pointers step
// by the K block), alpha and beta. A row-major B of whole panels is packed past
// kBInPlaceMaxRows (512) rows of A: 530.
TEST_P(GemmIsa, RowMajorAInPlaceFourteenRows) {
  const int64_t shapes[][3] = {{96, 64, 40}, {256, 32, 130}, {100, 64, 700}, {100, 45, 33},
                               {530, 64, 700}};
  for (auto& s : shapes) {
    for (bool tb : {false, true}) {
      check_gemm({s[0], s[1], s[2], false, tb, false, 1.0, 0.0, DType::Float32, DType::Float32,
                  DType::Float32});
      check_gemm({s[0], s[1], s[2], false, tb, false, -1.5, 0.5, DType::Float32, DType::Float32,
                  DType::Float32});
    }
  }
}

TEST_P(GemmIsa, TransposedOperandsAndColumnMajorC) {
  for (int mask = 0; mask < 8; ++mask) {
    check_gemm({37, 45, 53, bool(mask & 1), bool(mask & 2), bool(mask & 4), 1.0, 0.0,
                DType::Float32, DType::Float32, DType::Float32});
    check_gemm({37, 45, 53, bool(mask & 1), bool(mask & 2), bool(mask & 4), -0.5, 2.0,
                DType::Float64, DType::Float64, DType::Float64});
  }
}

TEST_P(GemmIsa, AlphaBeta) {
  for (double alpha : {1.0, -2.0, 0.0}) {
    for (double beta : {0.0, 1.0, 0.5}) {
      check_gemm({40, 50, 400, false, true, false, alpha, beta, DType::Float32, DType::Float32,
                  DType::Float32});
    }
  }
}

TEST_P(GemmIsa, FewRowsAgainstContiguousBColumns) {
  // The decode-time Linear (few rows, B transposed): dot products, no packing; 9 rows and a B
  // of contiguous rows take the driver, for comparison.
  // Every row count takes its own kernel (AVX-512: column blocks of 8 / 6 / 4 / 3 and a tail of
  // single columns, a masked K tail); 45 columns leave a tail for each block width.
  for (int64_t m = 1; m <= 9; ++m) {
    for (int64_t k : {16, 17, 37, 512, 1376}) {
      check_gemm({m, 45, k, false, true, false, 1.0, 0.0, DType::Float32, DType::Float32,
                  DType::Float32});
      check_gemm({m, 45, k, false, true, false, -0.5, 2.0, DType::Float32, DType::Float32,
                  DType::Float32});
      check_gemm({m, 45, k, false, false, false, 1.0, 1.0, DType::Float32, DType::Float32,
                  DType::Float32});
    }
  }
  check_gemm({3, 3000, 512, false, true, false, 1.0, 0.0, DType::Float32, DType::Float32,
              DType::Float32});  // split between the threads
}

// The AVX-512 few-row path's sums, bit for bit: each C value is 16 lane sums of FMAs in k order
// (lane l takes k = l, l + 16, ...; a K tail's lanes past K add 0 * 0), then halves added as
// _mm512_reduce_add_ps adds them (lanes l + 8, l + 4, l + 2, l + 1). 8 rows reduce a column's
// sums together, fewer rows one accumulator at a time: both must give these bits. Columns cover
// blocks that prefetch the next one, blocks that do not, the single-column tail and a split
// between threads; A and B with strides beyond K.
float few_rows_reference(const float* a, const float* b, int64_t K) {
  float lane[16] = {};
  for (int64_t k0 = 0; k0 < K; k0 += 16) {
    for (int l = 0; l < 16; ++l) {
      const int64_t k = k0 + l;
      lane[l] = k < K ? std::fmaf(a[k], b[k], lane[l]) : std::fmaf(0.0f, 0.0f, lane[l]);
    }
  }
  for (int half = 8; half >= 1; half /= 2) {
    for (int l = 0; l < half; ++l) lane[l] = lane[l + half] + lane[l];
  }
  return lane[0];
}

// Only the AVX-512 path sums in this order, so the test caps gemm at AVX-512 instead of running
// under every GemmIsa cap; it skips only on a CPU without AVX-512.
TEST(GemmFewRows, SumsBitForBitOnAvx512) {
  struct IsaCap {
    IsaCap() { nk::testing::set_gemm_isa("avx512"); }
    ~IsaCap() { nk::testing::set_gemm_isa("auto"); }
  } cap;
  if (std::string(nk::testing::gemm_isa(DType::Float32, DType::Float32)) != "avx512") {
    GTEST_SKIP() << "this CPU has no AVX-512: the summation order tested is that path's";
  }
  for (int64_t m = 1; m <= 8; ++m) {
    for (int64_t k : {16, 23, 512, 1376}) {
      for (int64_t n : {int64_t{45}, int64_t{3000}}) {  // 45: past the small path (N <= 32)
        SCOPED_TRACE(::testing::Message() << m << "x" << n << "x" << k);
        const int64_t lda = k + 5, ldb = k + 3, ldc = n + 2;
        std::vector<float> a(m * lda), b(n * ldb), c(m * ldc, NAN);
        uint32_t state = 12345;
        auto next = [&] {
          state = state * 1664525u + 1013904223u;
          return static_cast<float>(state >> 8) / 16777216.0f * 2.0f - 1.0f;
        };
        for (float& x : a) x = next();
        for (float& x : b) x = next();
        nk::TensorDesc cd, ad, bd;
        cd.data = c.data(), cd.ndim = 2, cd.sizes[0] = m, cd.sizes[1] = n;
        cd.strides[0] = ldc, cd.strides[1] = 1;
        ad.data = a.data(), ad.ndim = 2, ad.sizes[0] = m, ad.sizes[1] = k;
        ad.strides[0] = lda, ad.strides[1] = 1;
        bd.data = b.data(), bd.ndim = 2, bd.sizes[0] = k, bd.sizes[1] = n;
        bd.strides[0] = 1, bd.strides[1] = ldb;  // B's columns contiguous in k: x @ W.T
        nk::gemm(cd, ad, bd);
        int bad = 0;
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            const float want = few_rows_reference(a.data() + i * lda, b.data() + j * ldb, k);
            const float got = c[i * ldc + j];
            if (std::memcmp(&got, &want, sizeof got) != 0 && bad++ < 5) {
              ADD_FAILURE() << "C[" << i << "," << j << "] = " << got << ", want " << want;
            }
          }
        }
        EXPECT_EQ(bad, 0);
      }
    }
  }
}

TEST_P(GemmIsa, HalfBFloat16AndMixedDtypes) {
  check_gemm({33, 65, 70, false, false, false, 1.0, 0.0, DType::Float16, DType::Float16, DType::Float16});
  check_gemm({33, 65, 70, true, false, false, 1.0, 1.0, DType::BFloat16, DType::BFloat16, DType::BFloat16});
  check_gemm({33, 65, 70, false, true, true, 1.0, 0.0, DType::BFloat16, DType::Float32, DType::Float32});
  check_gemm({20, 30, 40, false, false, false, 2.0, 0.5, DType::Float32, DType::Float32, DType::Float16});
}

// float16 / bfloat16 with float32 accumulation on every path: odd M, N, K (odd K pairs a
// value with zero in the bfloat16 pair panels), K over several K blocks, every combination of
// transposed A / B / C, 16-bit or float32 C, and alpha / beta.
TEST_P(GemmIsa, HalfAndBFloat16OddSizesLayoutsAlphaBeta) {
  const int64_t shapes[][3] = {{1, 1, 1},   {15, 33, 17}, {29, 31, 3},  {14, 32, 2},
                               {37, 45, 53}, {3, 40, 1537}, {45, 70, 389}};
  for (DType t : {DType::Float16, DType::BFloat16}) {
    for (auto& s : shapes) {
      for (int mask = 0; mask < 8; ++mask) {
        check_gemm({s[0], s[1], s[2], bool(mask & 1), bool(mask & 2), bool(mask & 4), 1.0, 0.0,
                    t, t, t});
      }
      check_gemm({s[0], s[1], s[2], false, true, false, -0.5, 2.0, t, t, DType::Float32});
      check_gemm({s[0], s[1], s[2], true, false, true, 1.5, 0.5, t, t, t});
    }
  }
}

// A bfloat16 C of bfloat16 operands with K up to 2048 is written by the micro-kernel itself (one
// K block, no float workspace); K = 2049 takes the workspace. Shapes with M / N tails around
// the 14 x 32 tile, odd K (a pair with zero), several column tasks (K = 2048 allows 128
// columns per task), transposed operands, and alpha / beta reading the bfloat16 C.
TEST_P(GemmIsa, BFloat16OutputOneKBlockAndWorkspace) {
  const int64_t shapes[][3] = {{15, 33, 2047}, {29, 130, 2048}, {30, 70, 2049},
                               {131, 300, 1000}, {14, 32, 1}, {43, 97, 7}};
  const DType t = DType::BFloat16;
  for (auto& s : shapes) {
    check_gemm({s[0], s[1], s[2], false, false, false, 1.0, 0.0, t, t, t});
    check_gemm({s[0], s[1], s[2], true, true, false, -0.5, 2.0, t, t, t});
  }
}

// The bfloat16 C is the float32 sum rounded once to nearest, ties to even, NaN kept: row i of
// A is (v_i, 2^-8), B is all ones, so C[i][j] = v_i + 2^-8 exactly in float32. 1 + 2^-8 and
// 1 + 2^-7 + 2^-8 are ties (to 1 and to 1 + 2^-6: truncation or rounding half up gives
// 1 + 2^-7 for one of them). The same through beta: C0 = 2^-8, K = 1. 15 x 33 covers the full
// tile and both edges.
TEST_P(GemmIsa, BFloat16OutputRoundsToNearestEven) {
  const double u = 1.0 / 256;
  const double v[] = {1.0, 1.0 + 2 * u, -1.0, 2.0, 0.5, NAN};
  const double want[] = {1.0, 1.0 + 4 * u, -1.0 + u, 2.0, 0.5 + u, NAN};
  const int64_t m = 15, n = 33;
  for (bool via_beta : {false, true}) {
    SCOPED_TRACE(via_beta ? "beta" : "k = 2");
    const int64_t k = via_beta ? 1 : 2;
    HostTensor a(DType::BFloat16, {m, k}), b(DType::BFloat16, {k, n}), c(DType::BFloat16, {m, n});
    for (int64_t i = 0; i < m; ++i) {
      a.set(i * k, v[i % 6]);
      if (!via_beta) a.set(i * k + 1, u);
    }
    for (int64_t p = 0; p < k * n; ++p) b.set(p, 1.0);
    for (int64_t p = 0; p < m * n; ++p) c.set(p, via_beta ? u : NAN);
    nk::gemm(c.desc(), a.desc(), b.desc(), 1.0, via_beta ? 1.0 : 0.0);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const double got = c.get(i * n + j), w = want[i % 6];
        if (std::isnan(w)) {
          ASSERT_TRUE(std::isnan(got)) << i << "," << j;
        } else {
          ASSERT_EQ(got, w) << i << "," << j;
        }
      }
    }
  }
}

// A task that finds the A panel it needs being packed by another thread packs a private copy of
// that K block (forced here for every panel): float and bfloat16 paths, K over several blocks,
// row tails, transposed A.
TEST_P(GemmIsa, PrivateAPanelCopies) {
  nk::testing::set_gemm_private_a_panels(true);
  const int64_t shapes[][3] = {{131, 257, 385}, {45, 70, 1537}, {29, 130, 2048}};
  for (auto& s : shapes) {
    for (DType t : {DType::Float32, DType::BFloat16}) {
      check_gemm({s[0], s[1], s[2], false, false, false, 1.0, 0.0, t, t, t});
      check_gemm({s[0], s[1], s[2], true, false, false, -0.5, 2.0, t, t, DType::Float32});
    }
  }
  nk::testing::set_gemm_private_a_panels(false);
}

TEST_P(GemmIsa, BFloat16StridedOperands) {
  // Neither stride 1 (every other column of bigger buffers): the generic packing loops.
  const int64_t m = 19, n = 23, k = 37;
  HostTensor abig(DType::BFloat16, {m, 2 * k}), bbig(DType::BFloat16, {k, 2 * n});
  fill_uniform(abig, -1, 1);
  fill_uniform(bbig, -1, 1);
  std::vector<float> cbuf(m * n);
  TensorDesc a = abig.desc(), b = bbig.desc();
  a.sizes[1] = k, a.strides[1] = 2;
  b.sizes[1] = n, b.strides[1] = 2;
  nk::gemm(TensorDesc::make(cbuf.data(), DType::Float32, {m, n}), a, b);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0, mag = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double t = abig.get(i * 2 * k + 2 * p) * bbig.get(p * 2 * n + 2 * j);
        ref += t, mag += std::fabs(t);
      }
      ASSERT_NEAR(cbuf[i * n + j], ref, 1e-5 * mag + 1e-30) << i << "," << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, GemmIsa, ::testing::Values("auto", "avx512_bf16", "avx512", "avx2"));

// ---- HF32 (CubeMath::HF32: torch.npu.matmul.allow_hf32 / conv.allow_hf32) --------------------

float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

TEST(RoundToHf32, NearestEvenOnThe13DroppedBits) {
  const float step = std::ldexp(1.0f, -10);  // HF32's step at 1
  EXPECT_EQ(nk::round_to_hf32(1.0f + step / 2), 1.0f);                // tie: down to even
  EXPECT_EQ(nk::round_to_hf32(1.0f + 3 * step / 2), 1.0f + 2 * step);  // tie: up to even
  EXPECT_EQ(nk::round_to_hf32(1.0f + step / 2 + std::ldexp(1.0f, -20)), 1.0f + step);
  EXPECT_EQ(nk::round_to_hf32(-(1.0f + 3 * step / 2)), -(1.0f + 2 * step));
  EXPECT_EQ(nk::round_to_hf32(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(nk::round_to_hf32(-0.0f)));
  EXPECT_EQ(nk::round_to_hf32(INFINITY), INFINITY);
  EXPECT_EQ(nk::round_to_hf32(3.4028235e38f), INFINITY);  // carries into the exponent
  EXPECT_TRUE(std::isnan(nk::round_to_hf32(bits_to_float(0x7F800001u))));  // payload below
  // every result has its 13 low bits clear; every HF32 value is a fixed point
  for (uint32_t u = 0x3F800000u; u < 0x3F800000u + (1u << 16); u += 7) {
    const float r = nk::round_to_hf32(bits_to_float(u));
    uint32_t rb;
    std::memcpy(&rb, &r, sizeof rb);
    ASSERT_EQ(rb & 0x1FFFu, 0u);
    ASSERT_EQ(nk::round_to_hf32(r), r);
  }
}

// A copy of t with every float32 value rounded to HF32.
HostTensor rounded(const HostTensor& t) {
  HostTensor r = t;
  for (int64_t i = 0; i < r.numel(); ++i) *r.at<float>(i) = nk::round_to_hf32(*t.at<float>(i));
  return r;
}

// HF32 GEMM == float32 GEMM of operands rounded beforehand, bit for bit: the rounding happens
// where the operands are packed, and nothing else changes. C (beta) is not rounded.
// Float32 A [m x k] (column-major when ta), B [k x n] and C [m x n] of uniform values in
// [-1, 1), for shape {m, n, k}.
struct F32Operands {
  HostTensor a, b, c;
};
F32Operands uniform_f32_operands(const int64_t (&s)[3], bool ta) {
  F32Operands o{
      HostTensor(DType::Float32, {s[0], s[2]}, ta ? Layout::Transposed : Layout::Contiguous),
      HostTensor(DType::Float32, {s[2], s[1]}), HostTensor(DType::Float32, {s[0], s[1]})};
  fill_uniform(o.a, -1, 1);
  fill_uniform(o.b, -1, 1);
  fill_uniform(o.c, -1, 1);
  return o;
}

TEST_P(GemmIsa, Hf32RoundsTheOperandsAndNothingElse) {
  const int64_t shapes[][3] = {{1, 1, 1}, {15, 33, 17}, {131, 257, 385}, {40, 7, 900}};
  for (auto& s : shapes) {
    for (bool ta : {false, true}) {
      SCOPED_TRACE(::testing::Message() << s[0] << "x" << s[1] << "x" << s[2] << " ta=" << ta);
      auto [a, b, c] = uniform_f32_operands(s, ta);
      HostTensor got = c, want = c;
      nk::gemm(got.desc(), a.desc(), b.desc(), 1.5, 0.5, nk::CubeMath::HF32);
      nk::gemm(want.desc(), rounded(a).desc(), rounded(b).desc(), 1.5, 0.5);
      ASSERT_EQ(got.buf, want.buf);
      HostTensor plain = c;  // and HF32 did change the result
      nk::gemm(plain.desc(), a.desc(), b.desc(), 1.5, 0.5);
      if (s[2] > 1) {
        EXPECT_NE(got.buf, plain.buf);
      }
    }
  }
  // double is not a cube dtype: HF32 leaves it alone
  HostTensor a(DType::Float64, {9, 9}), b(DType::Float64, {9, 9}), c1(DType::Float64, {9, 9});
  fill_uniform(a, -1, 1);
  fill_uniform(b, -1, 1);
  HostTensor c2 = c1;
  nk::gemm(c1.desc(), a.desc(), b.desc(), 1.0, 0.0, nk::CubeMath::HF32);
  nk::gemm(c2.desc(), a.desc(), b.desc());
  EXPECT_EQ(c1.buf, c2.buf);
}

// Every `every`-th value of t (in memory order) times 2^-130: |x| < 1 becomes subnormal (below
// 2^-126), as in the gradient of a saturated softmax.
void make_subnormal(HostTensor& t, int64_t every) {
  for (int64_t i = 0; i < t.numel(); i += every) t.set(i, std::ldexp(t.get(i), -130));
}

// C = alpha A B + beta C0 against a double triple loop (where a subnormal product is exact), to
// float32 rounding of the sum of |terms| plus `steps` subnormal steps (2^-149) per output.
void expect_near_exact(const HostTensor& c, const HostTensor& a, const HostTensor& b,
                       const HostTensor& c0, double alpha, double beta, double steps) {
  const int64_t m = a.sizes[0], k = a.sizes[1], n = b.sizes[1];
  int bad = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0, mag = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double t = a.get(i * k + p) * b.get(p * n + j);
        ref += t;
        mag += std::fabs(t);
      }
      ref = alpha * ref + beta * c0.get(i * n + j);
      mag = std::fabs(alpha) * mag + std::fabs(beta * c0.get(i * n + j));
      const double got = c.get(i * n + j);
      if (!(std::fabs(got - ref) <= 4e-7 * mag + steps * std::ldexp(1.0, -149)) && bad++ < 5) {
        ADD_FAILURE() << "C[" << i << "," << j << "] = " << got << ", want " << ref;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

// A float32 operand holding subnormals is packed scaled by 2^24 (each multiply-add with a
// subnormal would take the CPU's ~150-cycle assist): A, B or both, row- or column-major, a
// short A (B read in place otherwise) and a tall one, alpha and beta. The result is float32
// rounding of the exact one (no subnormal intermediate is rounded: within 2 subnormal steps of
// it), the scaled path ran, and the unscaled path (the assists) is within IEEE's bound, K / 2
// steps (each subnormal product rounded).
TEST_P(GemmIsa, SubnormalOperandsArePackedScaled) {
  const int64_t shapes[][3] = {{300, 64, 200}, {700, 96, 150}};
  for (auto& s : shapes) {
    for (int which = 1; which <= 4; ++which) {  // 1: A, 2: B, 3: both; 4: all of A
      for (bool ta : {false, true}) {
        SCOPED_TRACE(::testing::Message() << s[0] << "x" << s[1] << "x" << s[2]
                                          << " subnormal in " << which << " ta=" << ta);
        auto [a, b, c] = uniform_f32_operands(s, ta);
        if (which & 1) make_subnormal(a, 2);
        if (which & 2) make_subnormal(b, 2);
        if (which == 4) make_subnormal(a, 1);  // every term subnormal: C is all of them
        for (double beta : {0.0, 0.5}) {
          HostTensor got = c, unscaled = c;
          const int64_t calls = nk::testing::gemm_subnormal_scaled_calls();
          nk::gemm(got.desc(), a.desc(), b.desc(), 1.5, beta);
          EXPECT_EQ(nk::testing::gemm_subnormal_scaled_calls(), calls + 1);
          expect_near_exact(got, a, b, c, 1.5, beta, 2);
          nk::testing::set_gemm_subnormal_scaling(false);
          nk::gemm(unscaled.desc(), a.desc(), b.desc(), 1.5, beta);
          nk::testing::set_gemm_subnormal_scaling(true);
          EXPECT_EQ(nk::testing::gemm_subnormal_scaled_calls(), calls + 1);
          // IEEE rounds each subnormal product to a multiple of 2^-149: up to half a step each.
          expect_near_exact(unscaled, a, b, c, 1.5, beta, 1.5 * 0.5 * double(s[2]) + 2);
        }
      }
    }
  }
}

// Where scaling could overflow a partial sum (a B value near 1e30) or an operand (an A value of
// 2^110 beside the subnormals), or an operand holds a NaN or an Inf, or alpha * 2^-24 would be
// subnormal (alpha 1e-36), or the GEMM is too small to sample, the operands are used as they
// are: bit for bit the unscaled result.
TEST_P(GemmIsa, SubnormalScalingStepsAsideWhereItCouldChangeAResult) {
  auto run = [](const HostTensor& a, const HostTensor& b, bool scaling, double alpha) {
    HostTensor c(DType::Float32, {a.sizes[0], b.sizes[1]});
    nk::testing::set_gemm_subnormal_scaling(scaling);
    nk::gemm(c.desc(), a.desc(), b.desc(), alpha, 0.0);
    nk::testing::set_gemm_subnormal_scaling(true);
    return c;
  };
  for (int variant = 0; variant < 6; ++variant) {
    SCOPED_TRACE(::testing::Message() << "variant " << variant);
    const int64_t m = variant == 3 ? 40 : 300, n = variant == 3 ? 32 : 64, k = 200;
    const double alpha = variant == 5 ? 1e-36 : 1.0;
    HostTensor a(DType::Float32, {m, k}), b(DType::Float32, {k, n});
    fill_uniform(a, -1, 1);
    fill_uniform(b, -1, 1);
    make_subnormal(a, 2);
    if (variant == 0) b.set(5 * n + 7, 1e30);
    if (variant == 1) a.set(3 * k + 11, NAN);
    if (variant == 2) b.set(9 * n + 1, INFINITY);
    if (variant == 4) {  // A * 2^24 would pass 2^128, though B is small enough for the sums
      a.set(7 * k + 3, std::ldexp(1.0, 110));
      for (int64_t i = 0; i < b.numel(); ++i) b.set(i, std::ldexp(b.get(i), -20));
    }
    const int64_t calls = nk::testing::gemm_subnormal_scaled_calls();
    HostTensor got = run(a, b, true, alpha);
    EXPECT_EQ(nk::testing::gemm_subnormal_scaled_calls(), calls);
    EXPECT_EQ(got.buf, run(a, b, false, alpha).buf);
    if (variant == 4) {
      EXPECT_TRUE(std::isfinite(got.get(7 * n + 0)));
    }
    if (variant == 0) {
      EXPECT_TRUE(std::isfinite(got.get(0 * n + 7)));
    }
    if (variant == 1) {
      EXPECT_TRUE(std::isnan(got.get(3 * n + 0)));
    }
  }
}

// The CPU's AMX-BF16 / AMX-TILE bits (CPUID leaf 7, EDX bits 22 and 24).
bool cpu_has_amx_bf16() {
  unsigned eax, ebx, ecx, edx;
  __asm__("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(7), "c"(0));
  return ((edx >> 22) & 1) && ((edx >> 24) & 1);
}

TEST(Gemm, ReportsTheInstructionSetItUses) {
  const bool bf16 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
  const bool avx512 = __builtin_cpu_supports("avx512f");
  // (A CPU with AMX whose kernel refuses the tile state would report avx512_bf16: not here.)
  EXPECT_STREQ(nk::testing::gemm_isa(DType::BFloat16, DType::BFloat16),
               cpu_has_amx_bf16() ? "amx_bf16" : bf16 ? "avx512_bf16" : avx512 ? "avx512" : "avx2");
  nk::testing::set_gemm_isa("avx512_bf16");
  EXPECT_STREQ(nk::testing::gemm_isa(DType::BFloat16, DType::BFloat16),
               bf16 ? "avx512_bf16" : avx512 ? "avx512" : "avx2");
  nk::testing::set_gemm_isa("auto");
  EXPECT_STREQ(nk::testing::gemm_isa(DType::Float16, DType::Float16), avx512 ? "avx512" : "avx2");
  EXPECT_STREQ(nk::testing::gemm_isa(DType::BFloat16, DType::Float32), avx512 ? "avx512" : "avx2");
  nk::testing::set_gemm_isa("avx512");
  EXPECT_STRNE(nk::testing::gemm_isa(DType::BFloat16, DType::BFloat16), "avx512_bf16");
  nk::testing::set_gemm_isa("avx2");
  EXPECT_STREQ(nk::testing::gemm_isa(DType::BFloat16, DType::BFloat16), "avx2");
  nk::testing::set_gemm_isa("auto");
}

TEST(Gemm, LargeSquareUsesEveryThread) {
  check_gemm({512, 512, 512, false, false, false, 1.0, 0.0, DType::Float32, DType::Float32,
              DType::Float32});
}

TEST(Gemm, StridedRowsWithPadding) {
  // Row strides larger than the row length (sub-matrices of bigger buffers).
  std::vector<float> abuf(20 * 64), bbuf(30 * 64), cbuf(20 * 64, 7.0f);
  for (auto& v : abuf) v = float(rng()() % 100) / 50.0f - 1;
  for (auto& v : bbuf) v = float(rng()() % 100) / 50.0f - 1;
  TensorDesc a = TensorDesc::make(abuf.data(), DType::Float32, {20, 30}, {64, 1});
  TensorDesc b = TensorDesc::make(bbuf.data(), DType::Float32, {30, 40}, {64, 1});
  TensorDesc c = TensorDesc::make(cbuf.data(), DType::Float32, {20, 40}, {64, 1});
  nk::gemm(c, a, b);
  for (int i = 0; i < 20; ++i) {
    for (int j = 0; j < 64; ++j) {
      if (j >= 40) {
        ASSERT_EQ(cbuf[i * 64 + j], 7.0f) << "wrote outside C";
        continue;
      }
      double ref = 0;
      for (int p = 0; p < 30; ++p) ref += double(abuf[i * 64 + p]) * bbuf[p * 64 + j];
      ASSERT_NEAR(cbuf[i * 64 + j], ref, 1e-4);
    }
  }
}

TEST(Gemm, EmptyKScalesC) {
  float c[6] = {1, 2, 3, 4, 5, 6};
  float dummy = 0;
  nk::gemm(TensorDesc::make(c, DType::Float32, {2, 3}), TensorDesc::make(&dummy, DType::Float32, {2, 0}),
           TensorDesc::make(&dummy, DType::Float32, {0, 3}), 1.0, 0.5);
  EXPECT_FLOAT_EQ(c[5], 3.0f);
  nk::gemm(TensorDesc::make(c, DType::Float32, {2, 3}), TensorDesc::make(&dummy, DType::Float32, {2, 0}),
           TensorDesc::make(&dummy, DType::Float32, {0, 3}), 1.0, 0.0);
  EXPECT_EQ(c[0], 0.0f);
  // M == 0: nothing happens (and nothing is read).
  nk::gemm(TensorDesc::make(nullptr, DType::Float32, {0, 3}), TensorDesc::make(nullptr, DType::Float32, {0, 4}),
           TensorDesc::make(nullptr, DType::Float32, {4, 3}));
}

TEST(GemmBatched, SmallAndLargeBatchesWithBroadcast) {
  for (auto [batch, m, n, k] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{7, 9, 11, 13},
                                {3, 150, 140, 130}}) {
    HostTensor a(DType::Float32, {batch, m, k});
    HostTensor b1(DType::Float32, {1, k, n}, Layout::Transposed);  // broadcast over batch
    HostTensor b = b1.expanded(0, batch);
    HostTensor c(DType::Float32, {batch, m, n});
    fill_uniform(a, -1, 1);
    fill_uniform(b1, -1, 1);
    b = b1.expanded(0, batch);
    fill_uniform(c, -1, 1);
    HostTensor c0 = c;
    nk::gemm_batched(c.desc(), a.desc(), b.desc(), 1.5, -1.0);
    int bad = 0;
    for (int64_t z = 0; z < batch; ++z)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double ref = 0;
          for (int64_t p = 0; p < k; ++p) ref += a.get((z * m + i) * k + p) * b.get((z * k + p) * n + j);
          ref = 1.5 * ref - c0.get((z * m + i) * n + j);
          if (std::fabs(c.get((z * m + i) * n + j) - ref) > 1e-4) ++bad;
        }
    EXPECT_EQ(bad, 0) << "batch " << batch;
  }
}

// gemm_batched's in-place path for small float32 items (attention's per-head products) against
// a naive loop, and bit for bit (beta == 0) against the same items through gemm() (the driver): row- and
// column-major A and B (B's columns filling whole panels or not: read in place or packed), M
// with and without a partial row panel, K up to one K block, alpha and beta.
TEST(GemmBatched, SmallFloatItemsInPlaceEqualDriverAndNaive) {
  struct Shape {
    int64_t m, n, k;
  };
  int bad = 0, cases = 0;
  for (Shape sh : {Shape{64, 32, 64}, Shape{64, 64, 32}, Shape{9, 16, 1}, Shape{30, 40, 7},
                   Shape{14, 96, 640}, Shape{33, 17, 129}}) {
    for (int layout = 0; layout < 4; ++layout) {
      for (auto [alpha, beta] : {std::pair<double, double>{1.0, 0.0}, {0.5, -1.25}}) {
        const bool ta = layout & 1, tb = layout & 2;
        const int64_t batch = 5, m = sh.m, n = sh.n, k = sh.k;
        SCOPED_TRACE(::testing::Message() << m << "x" << n << "x" << k << " ta=" << ta
                                          << " tb=" << tb << " beta=" << beta);
        // Column-major items: [batch, cols, rows] storage viewed as [batch, rows, cols].
        HostTensor a(DType::Float32, {batch, ta ? k : m, ta ? m : k});
        HostTensor b(DType::Float32, {batch, tb ? n : k, tb ? k : n});
        HostTensor c(DType::Float32, {batch, m, n});
        fill_uniform(a, -1, 1);
        fill_uniform(b, -1, 1);
        fill_uniform(c, -1, 1);
        if (beta == 0) c.set(0, NAN);  // beta == 0 must not read C
        auto view = [](const HostTensor& t, bool transposed) {
          TensorDesc d = t.desc();
          if (transposed) {
            std::swap(d.sizes[1], d.sizes[2]);
            std::swap(d.strides[1], d.strides[2]);
          }
          return d;
        };
        auto a_at = [&](int64_t z, int64_t i, int64_t p) {
          return ta ? a.get((z * k + p) * m + i) : a.get((z * m + i) * k + p);
        };
        auto b_at = [&](int64_t z, int64_t p, int64_t j) {
          return tb ? b.get((z * n + j) * k + p) : b.get((z * k + p) * n + j);
        };
        HostTensor c_driver = c, c0 = c;
        const int64_t calls = nk::testing::gemm_batched_direct_calls();
        nk::gemm_batched(c.desc(), view(a, ta), view(b, tb), alpha, beta);
        // The in-place path ran (on AVX-512, beside gemm_small's products): else both runs
        // below would be the driver's and the comparison could not fail.
        EXPECT_EQ(nk::testing::gemm_batched_direct_calls() > calls,
                  std::string(nk::testing::gemm_isa(DType::Float32, DType::Float32)) ==
                          "avx512" &&
                      !(m <= 32 && n <= 32 && k <= 64));
        nk::testing::set_gemm_batched_direct(false);
        nk::gemm_batched(c_driver.desc(), view(a, ta), view(b, tb), alpha, beta);
        nk::testing::set_gemm_batched_direct(true);
        ++cases;
        // Bit for bit where both sum the same way: beta == 0 (with beta, an edge tile's
        // alpha * AB + beta * C may be contracted into one FMA in one of the two places), and
        // not the products gemm_small takes (M, N <= 32, K <= 64) one by one.
        if (beta == 0 && !(m <= 32 && n <= 32 && k <= 64)) {
          EXPECT_EQ(std::memcmp(c.buf.data(), c_driver.buf.data(), c.buf.size()), 0)
              << "not the driver's result bit for bit";
        }
        for (int64_t z = 0; z < batch; ++z) {
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
              double ref = 0, mag = 0;
              for (int64_t p = 0; p < k; ++p) {
                ref += a_at(z, i, p) * b_at(z, p, j);
                mag += std::fabs(a_at(z, i, p) * b_at(z, p, j));
              }
              ref *= alpha;
              mag *= std::fabs(alpha);
              const int64_t at = (z * m + i) * n + j;
              if (beta != 0) {
                ref += beta * c0.get(at);
                mag += std::fabs(beta * c0.get(at));
              }
              if (!(std::fabs(c.get(at) - ref) <= 1e-5 * mag + 1e-30) && bad++ < 5) {
                ADD_FAILURE() << "C[" << z << "," << i << "," << j << "] = " << c.get(at)
                              << ", want " << ref;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 48);
  EXPECT_EQ(bad, 0);
}

TEST(Gemm, SupportedDtypes) {
  EXPECT_TRUE(nk::gemm_supports(DType::Float32, DType::Float32, DType::Float32));
  EXPECT_TRUE(nk::gemm_supports(DType::BFloat16, DType::BFloat16, DType::BFloat16));
  EXPECT_TRUE(nk::gemm_supports(DType::Float64, DType::Float64, DType::Float64));
  EXPECT_FALSE(nk::gemm_supports(DType::Int32, DType::Int32, DType::Int32));
  EXPECT_FALSE(nk::gemm_supports(DType::Float64, DType::Float32, DType::Float32));
}

// bfloat16 operands on every path, at the sizes where "auto" takes AMX tiles on a CPU that has
// them (M, N, K >= 32): blocks of C around the 32 x 32 block and the 16 x 16 tile, k around the
// 32-value tile row (odd K pairs a value with zero), transposed and strided operands, float32
// and bfloat16 C, alpha / beta, K over 4096.
TEST_P(GemmIsa, BFloat16TileSizes) {
  const int64_t shapes[][3] = {{32, 32, 32},  {33, 47, 33},  {48, 80, 31},  {64, 64, 64},
                               {100, 33, 97}, {257, 131, 300}, {40, 40, 4100}};
  const DType t = DType::BFloat16;
  for (auto& s : shapes) {
    for (int mask = 0; mask < 8; ++mask) {
      check_gemm({s[0], s[1], s[2], bool(mask & 1), bool(mask & 2), bool(mask & 4), 1.0, 0.0,
                  t, t, DType::Float32});
    }
    check_gemm({s[0], s[1], s[2], false, true, false, -0.5, 2.0, t, t, DType::Float32});
    check_gemm({s[0], s[1], s[2], true, false, false, 1.5, 0.5, t, t, t});
  }
}

// ---- B packed once (PackedB, gemm_prepacked: an offline model's weights) ----------------------

// gemm_prepacked runs the driver of gemm() over the same panels, so C must be gemm()'s C bit
// for bit (and, with HF32, the HF32 product); the epilogue sees every element of C exactly once.
TEST_P(GemmIsa, PrepackedBEqualsGemmAndVisitsEveryBlockOnce) {
  const int64_t shapes[][3] = {{1, 1, 1},    {5, 45, 37},  {9, 33, 17},   {14, 32, 384},
                               {64, 512, 256}, {64, 10, 512}, {100, 70, 385}, {131, 257, 800},
                               {64, 10, 1100}, {23, 16, 700}};
  for (auto& s : shapes) {
    for (bool tb : {false, true}) {
      for (auto math : {nk::CubeMath::KeepDtype, nk::CubeMath::HF32}) {
        SCOPED_TRACE(::testing::Message() << s[0] << "x" << s[1] << "x" << s[2] << " tb=" << tb
                                          << " hf32=" << (math == nk::CubeMath::HF32));
        HostTensor a(DType::Float32, {s[0], s[2]});
        HostTensor b(DType::Float32, {s[2], s[1]}, tb ? Layout::Transposed : Layout::Contiguous);
        HostTensor c(DType::Float32, {s[0], s[1]});
        fill_uniform(a, -1, 1);
        fill_uniform(b, -1, 1);
        fill_uniform(c, -1, 1);
        const nk::PackedB packed(b.desc(), math);
        HostTensor got = c, want = c;
        std::vector<std::atomic<int>> visits(static_cast<size_t>(s[0] * s[1]));
        const nk::GemmEpilogue count = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
          for (int64_t i = r0; i < r1; ++i) {
            for (int64_t j = c0; j < c1; ++j) visits[i * s[1] + j].fetch_add(1);
          }
        };
        nk::gemm_prepacked(got.desc(), a.desc(), b.desc(), packed, 1.5, 0.5, count);
        nk::gemm(want.desc(), a.desc(), b.desc(), 1.5, 0.5, math);
        ASSERT_EQ(got.buf, want.buf);
        for (size_t e = 0; e < visits.size(); ++e) ASSERT_EQ(visits[e].load(), 1) << "element " << e;
      }
    }
  }
}

// The output stage (row bias, scaled column bias, ReLU) fused into the stores gives the bits of
// gemm_prepacked without it followed by the same operations in a pass over C: full and edge
// tiles, one and two K blocks, narrow panels, the few-row path (M <= 8 with B.T), NaN kept.
TEST_P(GemmIsa, PrepackedOutputStageEqualsAPassAfterwards) {
  const int64_t shapes[][3] = {{64, 512, 256}, {64, 10, 600}, {23, 70, 37}, {5, 40, 300},
                               {100, 33, 1100}};
  for (auto& s : shapes) {
    for (bool tb : {false, true}) {
      for (int which = 0; which < 4; ++which) {  // col+relu, row+col, relu only, row+relu
        SCOPED_TRACE(::testing::Message() << s[0] << "x" << s[1] << "x" << s[2] << " tb=" << tb
                                          << " stage " << which);
        HostTensor a(DType::Float32, {s[0], s[2]});
        HostTensor b(DType::Float32, {s[2], s[1]}, tb ? Layout::Transposed : Layout::Contiguous);
        HostTensor c(DType::Float32, {s[0], s[1]});
        HostTensor rb(DType::Float32, {s[0]}), cb(DType::Float32, {s[1]});
        fill_uniform(a, -1, 1);
        fill_uniform(b, -1, 1);
        fill_uniform(rb, -1, 1);
        fill_uniform(cb, -1, 1);
        a.set(3, NAN);  // row 0 of C is NaN: ReLU keeps it
        nk::GemmOutputStage st;
        st.row_bias = (which == 1 || which == 3) ? reinterpret_cast<const float*>(rb.buf.data()) : nullptr;
        st.col_bias = which <= 1 ? reinterpret_cast<const float*>(cb.buf.data()) : nullptr;
        st.col_scale = 0.75f;
        st.relu = which != 1;
        const nk::PackedB packed(b.desc());
        HostTensor got = c, want = c;
        nk::gemm_prepacked(got.desc(), a.desc(), b.desc(), packed, 1.5, 0.0, {}, st);
        nk::gemm_prepacked(want.desc(), a.desc(), b.desc(), packed, 1.5, 0.0);
        float* w = reinterpret_cast<float*>(want.buf.data());
        int64_t relu_zeroed = 0;
        for (int64_t i = 0; i < s[0]; ++i) {
          for (int64_t j = 0; j < s[1]; ++j) {
            float v = w[i * s[1] + j];
            if (st.row_bias) v += st.row_bias[i];
            if (st.col_bias) v += st.col_scale * st.col_bias[j];
            if (st.relu) {
              relu_zeroed += !(v > 0.0f || v != v);
              v = (v > 0.0f || v != v) ? v : 0.0f;
            }
            w[i * s[1] + j] = v;
          }
        }
        EXPECT_TRUE(std::isnan(w[0]));
        if (st.relu) {
          EXPECT_GT(relu_zeroed, 0);
        }
        for (int64_t e = 0; e < s[0] * s[1]; ++e) {
          const float g = reinterpret_cast<const float*>(got.buf.data())[e];
          if (std::memcmp(&g, &w[e], 4) != 0) {
            ADD_FAILURE() << "first difference at " << e << ": " << g << " vs " << w[e];
            break;
          }
        }
        ASSERT_EQ(got.buf, want.buf);
      }
    }
  }
}

TEST(Gemm, PrepackedBUnderAnotherInstructionSetFallsBackToGemm) {
  HostTensor a(DType::Float32, {40, 300}), b(DType::Float32, {300, 50}), c(DType::Float32, {40, 50});
  fill_uniform(a, -1, 1);
  fill_uniform(b, -1, 1);
  const nk::PackedB packed(b.desc());  // panels for the best micro-kernel of this CPU
  nk::testing::set_gemm_isa("avx2");   // 16-column panels now
  HostTensor got = c, want = c;
  nk::gemm_prepacked(got.desc(), a.desc(), b.desc(), packed);
  nk::gemm(want.desc(), a.desc(), b.desc());
  nk::testing::set_gemm_isa("auto");
  EXPECT_EQ(got.buf, want.buf);
  HostTensor other(DType::Float32, {300, 51});  // not the packed matrix: refused
  EXPECT_ANY_THROW(nk::gemm_prepacked(c.desc(), a.desc(), other.desc(), packed));
}

}  // namespace
}  // namespace ktest
