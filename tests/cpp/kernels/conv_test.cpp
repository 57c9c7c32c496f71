// conv2d forward and backward against direct convolution loops in double: stride, padding,
// dilation, groups (incl. depthwise), 1x1 kernels, bias or none, column-major (non-mergeable)
// operands through the staging paths, 16-bit dtypes, output masks, an empty batch, and a
// sample large enough for the one-sample-at-a-time path. Float32 forward with a contiguous
// output is the implicit-GEMM path (patches packed straight into GEMM panels): its own cases
// cover several K blocks, column blocks whose panels straddle output rows, batches split
// across threads, strided inputs and a fused relu.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "kernel_test_util.h"
#include "npu/kernels/conv.h"
#include "npu/kernels/matmul.h"
#include "npu/kernels/pooling.h"

namespace ktest {
namespace {

namespace nk = npu::kernels;

struct ConvCase {
  int64_t N, C, H, W, O, KH, KW;
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, groups = 1;
  bool bias = true;
  DType dtype = DType::Float32;
  Layout layout = Layout::Contiguous;  // of input, weight, output and grads
  bool transposed_input = false;        // the input alone column-major
  bool relu = false;                    // Conv2dParams::fuse_relu
};

void check_conv(const ConvCase& k) {
  SCOPED_TRACE(::testing::Message()
               << "N" << k.N << " C" << k.C << " " << k.H << "x" << k.W << " O" << k.O << " k"
               << k.KH << "x" << k.KW << " s" << k.sh << "," << k.sw << " p" << k.ph << ","
               << k.pw << " d" << k.dh << "," << k.dw << " g" << k.groups << " bias " << k.bias
               << " " << dtype_str(k.dtype) << " layout " << int(k.layout) << " t_in "
               << k.transposed_input << " relu " << k.relu);
  nk::Conv2dParams p;
  p.stride[0] = k.sh, p.stride[1] = k.sw, p.padding[0] = k.ph, p.padding[1] = k.pw;
  p.dilation[0] = k.dh, p.dilation[1] = k.dw, p.groups = k.groups;
  p.fuse_relu = k.relu;
  const int64_t OH = nk::conv_output_size(k.H, k.KH, k.ph, k.sh, k.dh);
  const int64_t OW = nk::conv_output_size(k.W, k.KW, k.pw, k.sw, k.dw);
  const int64_t Cg = k.C / k.groups, Og = k.O / k.groups;
  HostTensor x(k.dtype, {k.N, k.C, k.H, k.W}, k.transposed_input ? Layout::Transposed : k.layout),
      w(k.dtype, {k.O, Cg, k.KH, k.KW}, k.layout), b(k.dtype, {k.O}),
      y(k.dtype, {k.N, k.O, OH, OW}, k.layout),
      ey(DType::Float64, {k.N, k.O, OH, OW});
  fill_uniform(x, -1, 1);
  fill_uniform(w, -1, 1);
  fill_uniform(b, -1, 1);
  fill_uniform(y, 5, 6);  // overwritten
  TensorDesc bd = b.desc();
  nk::conv2d(y.desc(), x.desc(), w.desc(), k.bias ? &bd : nullptr, p);

  auto xi = [&](int64_t n, int64_t c, int64_t h, int64_t ww) {
    return ((n * k.C + c) * k.H + h) * k.W + ww;
  };
  auto wi = [&](int64_t o, int64_t c, int64_t a, int64_t bb) {
    return ((o * Cg + c) * k.KH + a) * k.KW + bb;
  };
  auto yi = [&](int64_t n, int64_t o, int64_t oh, int64_t ow) {
    return ((n * k.O + o) * OH + oh) * OW + ow;
  };
  // Visits every (output, input, weight) triple of the convolution.
  auto each_tap = [&](auto&& f) {
    for (int64_t n = 0; n < k.N; ++n)
      for (int64_t o = 0; o < k.O; ++o)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow)
            for (int64_t c = 0; c < Cg; ++c)
              for (int64_t a = 0; a < k.KH; ++a)
                for (int64_t bb = 0; bb < k.KW; ++bb) {
                  int64_t h = oh * k.sh - k.ph + a * k.dh, ww = ow * k.sw - k.pw + bb * k.dw;
                  if (h < 0 || h >= k.H || ww < 0 || ww >= k.W) continue;
                  f(yi(n, o, oh, ow), xi(n, (o / Og) * Cg + c, h, ww), wi(o, c, a, bb));
                }
  };
  for (int64_t i = 0; i < ey.numel(); ++i) ey.set(i, k.bias ? b.get((i / (OH * OW)) % k.O) : 0.0);
  each_tap([&](int64_t yo, int64_t xo, int64_t wo) {
    ey.set(yo, ey.get(yo) + x.get(xo) * w.get(wo));
  });
  // Sums of up to C*KH*KW products of values in [-1, 1].
  const double tol = (k.dtype == DType::Float64 ? 1e-12 : 4 * default_rtol(k.dtype)) *
                     std::sqrt(double(Cg * k.KH * k.KW) + 1);
  if (k.relu) {
    for (int64_t i = 0; i < ey.numel(); ++i) ey.set(i, std::max(ey.get(i), 0.0));
    EXPECT_TRUE(all_close(y, ey, tol, tol));
    return;  // the backward is relu's business, not conv2d_backward's
  }
  EXPECT_TRUE(all_close(y, ey, tol, tol));

  HostTensor go(k.dtype, {k.N, k.O, OH, OW}, k.layout), gi(k.dtype, x.sizes, k.layout),
      gw(k.dtype, w.sizes, k.layout), gb(k.dtype, {k.O}), egi(DType::Float64, x.sizes),
      egw(DType::Float64, w.sizes), egb(DType::Float64, {k.O});
  fill_uniform(go, -1, 1);
  fill_uniform(gi, 5, 6);
  fill_uniform(gw, 5, 6);
  TensorDesc gid = gi.desc(), gwd = gw.desc(), gbd = gb.desc();
  nk::conv2d_backward(&gid, &gwd, &gbd, go.desc(), x.desc(), w.desc(), p);
  each_tap([&](int64_t yo, int64_t xo, int64_t wo) {
    egi.set(xo, egi.get(xo) + go.get(yo) * w.get(wo));
    egw.set(wo, egw.get(wo) + go.get(yo) * x.get(xo));
  });
  for (int64_t i = 0; i < go.numel(); ++i) {
    int64_t o = (i / (OH * OW)) % k.O;
    egb.set(o, egb.get(o) + go.get(i));
  }
  const double wtol = tol * std::sqrt(double(k.N * OH * OW) + 1);
  EXPECT_TRUE(all_close(gi, egi, tol, tol));
  EXPECT_TRUE(all_close(gw, egw, wtol, wtol));
  EXPECT_TRUE(all_close(gb, egb, wtol, wtol));

  // Output mask: grad_input only; the other buffers must stay untouched.
  HostTensor gi2(k.dtype, x.sizes), gw2(k.dtype, w.sizes);
  fill_uniform(gw2, 5, 6);
  HostTensor gw2_before = gw2;
  TensorDesc gi2d = gi2.desc();
  nk::conv2d_backward(&gi2d, nullptr, nullptr, go.desc(), x.desc(), w.desc(), p);
  EXPECT_TRUE(all_close(gi2, egi, tol, tol));
  EXPECT_TRUE(all_close(gw2, gw2_before, 0, 0));
}

TEST(Conv2d, StridePaddingDilationGroups) {
  std::vector<ConvCase> cases = {
      {2, 3, 7, 8, 4, 3, 3},
      {2, 3, 7, 8, 4, 3, 3, 2, 2, 1, 1},
      {1, 4, 9, 9, 6, 3, 2, 2, 1, 2, 0, 2, 3, 2},  // dilation, asymmetric, groups 2
      {3, 6, 5, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 6},  // depthwise
      {2, 5, 6, 4, 7, 1, 1},                       // pointwise: no im2col
      {2, 4, 6, 6, 4, 1, 1, 2, 2, 0, 0, 1, 1, 2},  // 1x1 with stride (im2col path)
      {1, 2, 1, 13, 3, 1, 4, 1, 2, 0, 1},          // conv1d as H = 1
      {2, 2, 4, 4, 2, 5, 5, 1, 1, 2, 2},           // kernel larger than input, padded
  };
  for (ConvCase k : cases) {
    check_conv(k);
    k.bias = false;
    k.layout = Layout::Transposed;  // staged weight, output and grads
    check_conv(k);
    k.layout = Layout::Contiguous;
    k.dtype = DType::Float64;
    check_conv(k);
  }
}

TEST(Conv2d, ImplicitGemmPath) {
  std::vector<ConvCase> cases = {
      {3, 48, 9, 7, 20, 3, 3, 1, 1, 1, 1},         // K = 432; 20 rows: edge panel
      {2, 64, 9, 7, 20, 3, 3, 1, 1, 1, 1},         // K = 576: one K block (up to 640)
      {2, 80, 9, 7, 20, 3, 3, 1, 1, 1, 1},         // K = 720: two K blocks of 360
      {2, 4, 30, 30, 5, 3, 3, 1, 1, 1, 1},         // L = 900: column blocks, panels span rows
      {5, 3, 11, 13, 30, 3, 3, 2, 1, 0, 2, 1, 2},  // odd sizes, stride, dilation, batch of 5
      {4, 6, 10, 9, 9, 3, 3, 1, 1, 2, 1, 2, 2, 3},  // groups 3, padding > dilation reach
      {3, 8, 12, 12, 40, 1, 1},                    // pointwise, rows copied
      {33, 3, 16, 16, 8, 3, 3, 1, 1, 1, 1},        // the eager CNN's first conv
  };
  for (const char* isa : {"avx2", "auto"}) {  // B panels of 16 and of 32 columns
    SCOPED_TRACE(isa);
    nk::testing::set_gemm_isa(isa);
    for (const ConvCase& k : cases) check_conv(k);
  }
  nk::testing::set_gemm_isa("auto");
  for (ConvCase k : cases) {
    k.transposed_input = true;  // patches gathered through the input's strides
    check_conv(k);
    k.transposed_input = false;
    k.relu = true;
    check_conv(k);
    k.dtype = DType::Float64;  // relu after the generic path
    check_conv(k);
  }
  // A padded input of more than 16 MB: the batch goes in slices of one sample.
  check_conv(ConvCase{2, 1, 1500, 1500, 1, 3, 3, 1, 1, 1, 1});
  ConvCase empty_k{2, 0, 5, 5, 3, 3, 3, 1, 1, 1, 1};  // no input channels: relu(bias)
  empty_k.relu = true;
  check_conv(empty_k);
}

// The direct convolution (float32, stride 1 along W, AVX-512): micro-tiles of two 16-pixel
// segments read straight from the padded input. Rows shorter than, equal to and just past one
// segment (masked tails, a tile that spans two output rows, an odd segment count whose last
// tile pairs with itself), output channels off the 8-row panels, groups, dilation, a stride
// along H, asymmetric padding, the 3-channel first convolution, fused bias / ReLU, and a batch
// cut into padded slices with a short last one. Under the AVX2 cap the same cases take the
// implicit GEMM, so both are held to the same float64 loops.
TEST(Conv2d, DirectPath) {
  std::vector<ConvCase> cases = {
      {1, 3, 24, 40, 32, 3, 3, 1, 1, 1, 1},        // a first conv; OW 40: 16 + 16 + masked 8
      {2, 16, 8, 16, 24, 3, 3, 1, 1, 1, 1},        // OW 16: one tile spans two rows
      {2, 5, 9, 17, 13, 3, 3, 1, 1, 1, 1},         // OW 17: 16 + masked 1; 13 rows: edge panel
      {1, 4, 5, 7, 9, 3, 3, 1, 1, 1, 1},           // OW 7, 5 segments: the last pairs with itself
      {3, 6, 11, 33, 8, 3, 5, 2, 1, 1, 2},         // stride 2 along H, 3x5, asymmetric padding
      {2, 8, 10, 12, 12, 3, 3, 1, 1, 2, 2, 2, 2, 4},  // dilation 2, groups 4 (Og 3)
      {2, 6, 8, 8, 6, 3, 3, 1, 1, 1, 1, 1, 1, 6},  // depthwise
      {2, 3, 6, 20, 16, 1, 3, 1, 1, 0, 1},         // 1x3, no padding along H
      {2, 4, 7, 9, 5, 2, 2},                       // no padding at all
  };
  for (const char* isa : {"auto", "avx2"}) {
    SCOPED_TRACE(isa);
    nk::testing::set_gemm_isa(isa);
    for (ConvCase k : cases) {
      check_conv(k);
      k.relu = true;
      check_conv(k);
      k.relu = false;
      k.bias = false;
      k.transposed_input = true;  // padded through the input's strides
      check_conv(k);
    }
  }
  nk::testing::set_gemm_isa("auto");
  // 1.44 M floats of padded input a sample: slices of two samples, then one (relu: the
  // forward alone, the backward's float64 loops take long at this size).
  ConvCase big{3, 1, 1200, 1200, 1, 3, 3, 1, 1, 1, 1};
  big.relu = true;
  check_conv(big);
}

// conv2d_prepacked (the weight's panels made once, as the engine does at load) gives conv2d's
// bits: on the direct path (groups, an edge panel, relu and bias) and where it falls back to
// conv2d (a stride along W, HF32, the AVX2 cap); a packed weight of another weight is refused.
TEST(Conv2d, PrepackedWeightEqualsConv) {
  struct Case {
    ConvCase k;
    const char* isa;
    bool hf32;
  };
  const Case cases[] = {
      {{2, 6, 9, 21, 13, 3, 3, 1, 1, 1, 1}, "auto", false},
      {{1, 8, 10, 12, 12, 3, 3, 1, 1, 2, 2, 2, 2, 4}, "auto", false},  // groups 4, dilation
      {{2, 6, 9, 21, 13, 3, 3, 1, 2, 1, 1}, "auto", false},            // stride 2 along W
      {{2, 6, 9, 21, 13, 3, 3, 1, 1, 1, 1}, "auto", true},
      {{2, 6, 9, 21, 13, 3, 3, 1, 1, 1, 1}, "avx2", false},
  };
  for (const Case& c : cases) {
    const ConvCase& k = c.k;
    SCOPED_TRACE(::testing::Message() << c.isa << " C" << k.C << " O" << k.O << " sw" << k.sw
                                      << " g" << k.groups << " hf32 " << c.hf32);
    nk::testing::set_gemm_isa(c.isa);
    nk::Conv2dParams p;
    p.stride[0] = k.sh, p.stride[1] = k.sw, p.padding[0] = k.ph, p.padding[1] = k.pw;
    p.dilation[0] = k.dh, p.dilation[1] = k.dw, p.groups = k.groups;
    p.fuse_relu = true;
    p.math = c.hf32 ? nk::CubeMath::HF32 : nk::CubeMath::KeepDtype;
    const int64_t OH = nk::conv_output_size(k.H, k.KH, k.ph, k.sh, k.dh);
    const int64_t OW = nk::conv_output_size(k.W, k.KW, k.pw, k.sw, k.dw);
    HostTensor x(DType::Float32, {k.N, k.C, k.H, k.W}),
        w(DType::Float32, {k.O, k.C / k.groups, k.KH, k.KW}), b(DType::Float32, {k.O}),
        want(DType::Float32, {k.N, k.O, OH, OW});
    fill_uniform(x, -1, 1);
    fill_uniform(w, -1, 1);
    fill_uniform(b, -1, 1);
    HostTensor got = want;
    fill_uniform(got, 5, 6);  // overwritten
    const TensorDesc bd = b.desc();
    nk::conv2d(want.desc(), x.desc(), w.desc(), &bd, p);
    const nk::PackedConvWeight packed(w.desc(), k.groups);
    nk::conv2d_prepacked(got.desc(), x.desc(), w.desc(), packed, &bd, p);
    EXPECT_EQ(got.buf, want.buf);
    HostTensor other = w;
    EXPECT_THROW(nk::conv2d_prepacked(got.desc(), x.desc(), other.desc(), packed, &bd, p),
                 std::exception);
  }
  nk::testing::set_gemm_isa("auto");
}

// A 2x2 max pool fused into conv2d (Conv2dParams::fuse_max_pool2, the engine's Conv + MaxPool)
// gives the bits of conv2d then max_pool2d: on the direct path, which pools each register tile
// (rows of 16, 32 and 40 columns, odd OH and OW whose last conv row / column the pool drops,
// a tail of 6 columns, an edge panel of 5 channels, groups, a stride along H, relu or none,
// bias or none, a NaN), through conv2d_prepacked, and on the fallback (a temporary then
// max_pool2d: the AVX2 cap, a stride along W, float64).
TEST(Conv2d, FusedMaxPoolEqualsConvThenMaxPoolBitForBit) {
  const ConvCase cases[] = {
      {2, 3, 16, 16, 32, 3, 3, 1, 1, 1, 1},           // OW 16: a tile is two conv rows
      {1, 8, 12, 40, 13, 3, 3, 1, 1, 1, 1},           // 16 + 16 + 8 columns; edge panel
      {2, 5, 9, 17, 8, 3, 3, 1, 1, 1, 1},             // OH 9, OW 17: last row / column dropped
      {1, 4, 6, 7, 9, 3, 3, 1, 1, 1, 1},              // OW 7: 6 columns, 3 pooled
      {2, 8, 13, 32, 12, 3, 3, 2, 1, 1, 1, 1, 1, 4},  // stride 2 along H, groups 4
      {2, 6, 9, 21, 13, 3, 3, 1, 2, 1, 1},            // stride 2 along W: the fallback
  };
  for (const char* isa : {"auto", "avx2"}) {
    nk::testing::set_gemm_isa(isa);
    for (const ConvCase& k : cases) {
      for (DType dt : {DType::Float32, DType::Float64}) {
        for (int variant = 0; variant < 3; ++variant) {  // relu + bias, bias, neither
          const bool relu = variant == 0, with_bias = variant < 2;
          SCOPED_TRACE(::testing::Message() << isa << " C" << k.C << " O" << k.O << " "
                                            << k.H << "x" << k.W << " " << dtype_str(dt)
                                            << " relu " << relu << " bias " << with_bias);
          nk::Conv2dParams p;
          p.stride[0] = k.sh, p.stride[1] = k.sw, p.padding[0] = k.ph, p.padding[1] = k.pw;
          p.groups = k.groups;
          p.fuse_relu = relu;
          const int64_t OH = nk::conv_output_size(k.H, k.KH, k.ph, k.sh, 1);
          const int64_t OW = nk::conv_output_size(k.W, k.KW, k.pw, k.sw, 1);
          HostTensor x(dt, {k.N, k.C, k.H, k.W}), w(dt, {k.O, k.C / k.groups, k.KH, k.KW}),
              b(dt, {k.O}), full(dt, {k.N, k.O, OH, OW}), want(dt, {k.N, k.O, OH / 2, OW / 2});
          fill_uniform(x, -1, 1);
          fill_uniform(w, -1, 1);
          fill_uniform(b, -1, 1);
          x.set(3 * k.W + 5, NAN);  // NaN windows: the pool keeps NaN
          const TensorDesc bd = b.desc();
          const TensorDesc* bias = with_bias ? &bd : nullptr;
          nk::conv2d(full.desc(), x.desc(), w.desc(), bias, p);
          nk::Pool2dParams pp;
          pp.kernel[0] = pp.kernel[1] = pp.stride[0] = pp.stride[1] = 2;
          TensorDesc no_indices = want.desc();
          no_indices.data = nullptr, no_indices.dtype = DType::Int64;
          nk::max_pool2d(want.desc(), no_indices, full.desc(), pp);
          p.fuse_max_pool2 = true;
          HostTensor got = want;
          fill_uniform(got, 5, 6);  // overwritten
          nk::conv2d(got.desc(), x.desc(), w.desc(), bias, p);
          EXPECT_EQ(got.buf, want.buf);
          if (dt == DType::Float32) {
            fill_uniform(got, 5, 6);
            const nk::PackedConvWeight packed(w.desc(), k.groups);
            nk::conv2d_prepacked(got.desc(), x.desc(), w.desc(), packed, bias, p);
            EXPECT_EQ(got.buf, want.buf);
          }
        }
      }
    }
  }
  nk::testing::set_gemm_isa("auto");
}

// Winograd F(2x2, 3x3) (Conv2dParams::winograd; float32, 3x3, stride 1, one group, C >= 16)
// against the float64 loops: |y - ref| <= 16 u (sum |w x| + |b|) per output, u = 2^-24 (see
// docs/inference.md: the largest error seen on these cases is 1.0-2.1 u of that sum; the
// direct convolution's 4-6 u on such shapes). Tile rows shorter than, equal to and longer than one
// 16-tile vector, odd output sizes (the last row / column of tiles half stored), an edge panel,
// no padding, asymmetric padding, a column-major input, relu and bias, and a batch cut into
// padded slices. The fused 2x2 max pool equals max_pool2d of the unpooled Winograd result bit
// for bit, conv2d_prepacked equals conv2d, and shapes it does not take (3 input channels,
// stride 2, 5x5, groups) keep the flag-off bits.
TEST(Conv2d, WinogradWithinBoundOfFloat64AndPoolsBitForBit) {
  struct Case {
    ConvCase k;
    bool relu, bias, transposed;
  };
  const Case cases[] = {
      {{2, 16, 8, 8, 8, 3, 3, 1, 1, 1, 1}, true, true, false},      // 4 tiles a row
      {{1, 32, 32, 32, 64, 3, 3, 1, 1, 1, 1}, true, true, false},   // the CNN's 32 -> 64
      {{2, 64, 16, 16, 128, 3, 3, 1, 1, 1, 1}, false, true, false}, // the CNN's 64 -> 128
      {{1, 17, 11, 37, 13, 3, 3, 1, 1, 1, 1}, true, false, false},  // 19 tiles a row, odd sizes
      {{3, 20, 9, 10, 9, 3, 3}, false, true, true},                 // no padding, OH 7
      {{1, 16, 5, 4, 8, 3, 3, 1, 1, 2, 0}, false, true, false},     // padding 2 / 0, OW 2
      {{3, 16, 300, 290, 8, 3, 3, 1, 1, 1, 1}, true, true, false},  // slices of 2 then 1
  };
  for (const Case& cs : cases) {
    const ConvCase& k = cs.k;
    SCOPED_TRACE(::testing::Message() << "N" << k.N << " C" << k.C << " " << k.H << "x" << k.W
                                      << " O" << k.O << " p" << k.ph << "," << k.pw << " relu "
                                      << cs.relu << " bias " << cs.bias << " t_in "
                                      << cs.transposed);
    nk::Conv2dParams p;
    p.padding[0] = k.ph, p.padding[1] = k.pw;
    p.fuse_relu = cs.relu;
    p.winograd = true;
    const int64_t OH = nk::conv_output_size(k.H, 3, k.ph, 1, 1);
    const int64_t OW = nk::conv_output_size(k.W, 3, k.pw, 1, 1);
    HostTensor x(DType::Float32, {k.N, k.C, k.H, k.W},
                 cs.transposed ? Layout::Transposed : Layout::Contiguous),
        w(DType::Float32, {k.O, k.C, 3, 3}), b(DType::Float32, {k.O}),
        y(DType::Float32, {k.N, k.O, OH, OW});
    fill_uniform(x, -1, 1);
    fill_uniform(w, -1, 1);
    fill_uniform(b, -1, 1);
    fill_uniform(y, 5, 6);  // overwritten
    const TensorDesc bd = b.desc();
    const TensorDesc* bias = cs.bias ? &bd : nullptr;
    nk::conv2d(y.desc(), x.desc(), w.desc(), bias, p);
    const float* xf = x.at<float>(0);
    const float* wf = w.at<float>(0);
    double worst = 0;  // the largest |y - ref| / (u * bound) seen
    for (int64_t n = 0; n < k.N; ++n) {
      for (int64_t o = 0; o < k.O; ++o) {
        for (int64_t oh = 0; oh < OH; ++oh) {
          for (int64_t ow = 0; ow < OW; ++ow) {
            double ref = cs.bias ? b.get(o) : 0.0, mag = std::fabs(ref);
            for (int64_t c = 0; c < k.C; ++c) {
              for (int64_t a = 0; a < 3; ++a) {
                const int64_t h = oh - k.ph + a;
                if (h < 0 || h >= k.H) continue;
                for (int64_t bb = 0; bb < 3; ++bb) {
                  const int64_t ww = ow - k.pw + bb;
                  if (ww < 0 || ww >= k.W) continue;
                  const double prod =
                      double(wf[((o * k.C + c) * 3 + a) * 3 + bb]) *
                      double(xf[n * x.strides[0] + c * x.strides[1] + h * x.strides[2] +
                                ww * x.strides[3]]);
                  ref += prod;
                  mag += std::fabs(prod);
                }
              }
            }
            if (cs.relu) ref = std::max(ref, 0.0);
            const double got = y.get(((n * k.O + o) * OH + oh) * OW + ow);
            const double err = std::fabs(got - ref) / (0x1p-24 * (mag + 1e-30));
            worst = std::max(worst, err);
            ASSERT_LE(err, 16.0) << "n " << n << " o " << o << " (" << oh << ", " << ow
                                 << "): " << got << " vs " << ref;
          }
        }
      }
    }
    std::printf("winograd C%ld %ldx%ld: max |err| = %.2f u sum|wx|\n", long(k.C), long(k.H),
                long(k.W), worst);
    // Pooled: max_pool2d of the unpooled result, bit for bit; prepacked: conv2d's bits.
    HostTensor want(DType::Float32, {k.N, k.O, OH / 2, OW / 2});
    nk::Pool2dParams pp;
    pp.kernel[0] = pp.kernel[1] = pp.stride[0] = pp.stride[1] = 2;
    TensorDesc no_indices = want.desc();
    no_indices.data = nullptr, no_indices.dtype = DType::Int64;
    if (want.numel() > 0) nk::max_pool2d(want.desc(), no_indices, y.desc(), pp);
    nk::Conv2dParams pooled = p;
    pooled.fuse_max_pool2 = true;
    HostTensor got = want;
    fill_uniform(got, 5, 6);
    nk::conv2d(got.desc(), x.desc(), w.desc(), bias, pooled);
    EXPECT_EQ(got.buf, want.buf);
    const nk::PackedConvWeight packed(w.desc(), 1);
    // Made only where it can be used (vec_math.h's has_avx512: F, DQ, VL and BW).
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw");
    ASSERT_EQ(packed.winograd.empty(), !avx512);
    fill_uniform(got, 5, 6);
    nk::conv2d_prepacked(got.desc(), x.desc(), w.desc(), packed, bias, pooled);
    EXPECT_EQ(got.buf, want.buf);
    HostTensor y2 = y;
    fill_uniform(y2, 5, 6);
    nk::conv2d_prepacked(y2.desc(), x.desc(), w.desc(), packed, bias, p);
    EXPECT_EQ(y2.buf, y.buf);
  }
  // Shapes Winograd does not take: the flag changes nothing.
  const ConvCase others[] = {
      {1, 3, 16, 16, 32, 3, 3, 1, 1, 1, 1},           // 3 input channels
      {1, 16, 12, 12, 8, 3, 3, 2, 1, 1, 1},           // stride 2 along H
      {1, 16, 12, 12, 8, 5, 5, 1, 1, 2, 2},           // 5x5
      {1, 32, 12, 12, 8, 3, 3, 1, 1, 1, 1, 1, 1, 2},  // groups 2
  };
  for (const ConvCase& k : others) {
    nk::Conv2dParams p;
    p.stride[0] = k.sh, p.padding[0] = k.ph, p.padding[1] = k.pw, p.groups = k.groups;
    const int64_t OH = nk::conv_output_size(k.H, k.KH, k.ph, k.sh, 1);
    const int64_t OW = nk::conv_output_size(k.W, k.KW, k.pw, 1, 1);
    HostTensor x(DType::Float32, {k.N, k.C, k.H, k.W}),
        w(DType::Float32, {k.O, k.C / k.groups, k.KH, k.KW}), y(DType::Float32, {k.N, k.O, OH, OW});
    fill_uniform(x, -1, 1);
    fill_uniform(w, -1, 1);
    nk::conv2d(y.desc(), x.desc(), w.desc(), nullptr, p);
    HostTensor y2 = y;
    p.winograd = true;
    nk::conv2d(y2.desc(), x.desc(), w.desc(), nullptr, p);
    EXPECT_EQ(y2.buf, y.buf) << "C" << k.C << " k" << k.KH << " s" << k.sh << " g" << k.groups;
  }
}

// HF32 convolution == float32 convolution of input and weight rounded beforehand, bit for bit,
// on the implicit-GEMM forward, the im2col forward (a column-major output) and the backward
// (grad_output rounded too).
// The bias and ReLU fused into the GEMM's stores (AVX-512 micro-kernels, edge tiles, the AVX2
// path) give the bits of the unfused conv followed by y + b then (v > 0 || v != v) ? v : 0
// (NaN kept), over one and two K blocks and a row count with an edge panel.
TEST(Conv2d, FusedBiasReluEqualsConvThenBiasReluBitForBit) {
  const ConvCase cases[] = {{2, 3, 20, 21, 32, 3, 3, 1, 1, 1, 1},
                            {2, 80, 9, 7, 20, 3, 3, 1, 1, 1, 1},
                            {1, 5, 6, 40, 13, 3, 3, 1, 1, 1, 1}};
  for (const char* isa : {"avx2", "auto"}) {
    nk::testing::set_gemm_isa(isa);
    for (const ConvCase& k : cases) {
      SCOPED_TRACE(::testing::Message() << isa << " C" << k.C << " O" << k.O);
      const int64_t OH = k.H, OW = k.W;  // 3x3, padding 1, stride 1
      HostTensor x(DType::Float32, {k.N, k.C, k.H, k.W}), w(DType::Float32, {k.O, k.C, 3, 3}),
          b(DType::Float32, {k.O}), fused(DType::Float32, {k.N, k.O, OH, OW});
      fill_uniform(x, -1, 1);
      fill_uniform(w, -1, 1);
      fill_uniform(b, -1, 1);
      x.set(5 * k.W + 7, NAN);  // a NaN through every output channel near it
      HostTensor plain = fused;
      nk::Conv2dParams p;
      p.padding[0] = p.padding[1] = 1;
      nk::conv2d(plain.desc(), x.desc(), w.desc(), nullptr, p);
      p.fuse_relu = true;
      TensorDesc bd = b.desc();
      nk::conv2d(fused.desc(), x.desc(), w.desc(), &bd, p);
      HostTensor want = plain;
      int64_t nans = 0;
      for (int64_t i = 0; i < want.numel(); ++i) {
        const float v = static_cast<float>(plain.get(i)) + static_cast<float>(b.get(i / (OH * OW) % k.O));
        want.set(i, (v > 0.0f || v != v) ? v : 0.0f);
        nans += std::isnan(v);
      }
      EXPECT_GT(nans, 0);
      EXPECT_EQ(fused.buf, want.buf);
    }
  }
  nk::testing::set_gemm_isa("auto");
}

TEST(Conv2d, Hf32ReadsInputWeightAndGradOutputAsHf32) {
  auto rounded = [](const HostTensor& t) {
    HostTensor r = t;
    for (int64_t i = 0; i < r.numel(); ++i) *r.at<float>(i) = nk::round_to_hf32(*t.at<float>(i));
    return r;
  };
  for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
    SCOPED_TRACE(int(layout));
    nk::Conv2dParams p, hf;
    p.padding[0] = p.padding[1] = 1;
    hf = p;
    hf.math = nk::CubeMath::HF32;
    HostTensor x(DType::Float32, {2, 5, 9, 8}, layout), w(DType::Float32, {4, 5, 3, 3}, layout),
        b(DType::Float32, {4}), g(DType::Float32, {2, 4, 9, 8}, layout);
    fill_uniform(x, -1, 1);
    fill_uniform(w, -1, 1);
    fill_uniform(b, -1, 1);
    fill_uniform(g, -1, 1);
    const HostTensor xr = rounded(x), wr = rounded(w), gr = rounded(g);
    HostTensor got(DType::Float32, {2, 4, 9, 8}, layout), want = got, plain = got;
    const TensorDesc bd = b.desc();
    nk::conv2d(got.desc(), x.desc(), w.desc(), &bd, hf);
    nk::conv2d(want.desc(), xr.desc(), wr.desc(), &bd, p);
    nk::conv2d(plain.desc(), x.desc(), w.desc(), &bd, p);
    EXPECT_EQ(got.buf, want.buf);
    EXPECT_NE(got.buf, plain.buf);
    HostTensor gi(DType::Float32, {2, 5, 9, 8}, layout), gw(DType::Float32, {4, 5, 3, 3}, layout);
    HostTensor gi_want = gi, gw_want = gw;
    const TensorDesc gid = gi.desc(), gwd = gw.desc(), giw = gi_want.desc(), gww = gw_want.desc();
    nk::conv2d_backward(&gid, &gwd, nullptr, g.desc(), x.desc(), w.desc(), hf);
    nk::conv2d_backward(&giw, &gww, nullptr, gr.desc(), xr.desc(), wr.desc(), p);
    EXPECT_EQ(gi.buf, gi_want.buf);
    EXPECT_EQ(gw.buf, gw_want.buf);
  }
}

TEST(Conv2d, HalfDtypesLargeSampleAndEmptyBatch) {
  ConvCase k{2, 3, 6, 6, 4, 3, 3, 1, 1, 1, 1};
  k.dtype = DType::Float16;
  check_conv(k);
  k.dtype = DType::BFloat16;
  k.groups = 1;
  check_conv(k);
  // 2 * 32 * 144 * 1024 flops per sample: one sample at a time, gemm on every thread.
  check_conv(ConvCase{2, 16, 32, 32, 32, 3, 3, 1, 1, 1, 1});
  // Empty batch: nothing written forward; zero weight / bias grads.
  check_conv(ConvCase{0, 3, 5, 5, 2, 3, 3});
  EXPECT_TRUE(nk::conv2d_supports(DType::Float16, DType::Float32, DType::Float16));
  EXPECT_FALSE(nk::conv2d_supports(DType::Float64, DType::Float32, DType::Float64));
  EXPECT_EQ(nk::conv_output_size(7, 3, 1, 2, 1), 4);
  EXPECT_EQ(nk::conv_output_size(9, 3, 0, 1, 2), 5);
}

}  // namespace
}  // namespace ktest
