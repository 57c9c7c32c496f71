// max_pool2d / avg_pool2d / adaptive_avg_pool2d (+ backward) against window loops written
// here from the definitions: padding, stride > 1, dilation, ceil_mode, count_include_pad,
// divisor_override, 3-D inputs, transposed (non-contiguous) planes, 16-bit dtypes, NaN.
// The backward passes of the linear ops are checked as adjoints of the (checked) forward:
// <pool(x), g> == <x, pool_backward(g)> for random x, g.
#include <gtest/gtest.h>

#include <limits>

#include "kernel_test_util.h"
#include "npu/kernels/pooling.h"

namespace ktest {
namespace {

namespace nk = npu::kernels;

struct PoolCase {
  std::vector<int64_t> in_sizes;  // [N, C, H, W] or [C, H, W]
  int64_t kh, kw, sh, sw, ph, pw, dh = 1, dw = 1;
  bool ceil_mode = false;
  DType dtype = DType::Float32;
  Layout layout = Layout::Contiguous;

  nk::Pool2dParams params() const {
    nk::Pool2dParams p;
    p.kernel[0] = kh, p.kernel[1] = kw, p.stride[0] = sh, p.stride[1] = sw;
    p.padding[0] = ph, p.padding[1] = pw, p.dilation[0] = dh, p.dilation[1] = dw;
    p.ceil_mode = ceil_mode;
    return p;
  }
  std::vector<int64_t> out_sizes(bool dilated) const {
    std::vector<int64_t> s = in_sizes;
    const size_t n = s.size();
    s[n - 2] = nk::pool_output_size(s[n - 2], kh, ph, sh, dilated ? dh : 1, ceil_mode);
    s[n - 1] = nk::pool_output_size(s[n - 1], kw, pw, sw, dilated ? dw : 1, ceil_mode);
    return s;
  }
};

int64_t planes(const std::vector<int64_t>& s) {
  int64_t p = 1;
  for (size_t d = 0; d + 2 < s.size(); ++d) p *= s[d];
  return p;
}

double dot(const HostTensor& a, const HostTensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += a.get(i) * b.get(i);
  return s;
}

TEST(Pooling, OutputSizeFormula) {
  EXPECT_EQ(nk::pool_output_size(5, 2, 0, 2, 1, false), 2);
  EXPECT_EQ(nk::pool_output_size(5, 2, 0, 2, 1, true), 3);
  EXPECT_EQ(nk::pool_output_size(6, 3, 1, 2, 1, false), 3);
  EXPECT_EQ(nk::pool_output_size(6, 3, 1, 2, 1, true), 4);
  EXPECT_EQ(nk::pool_output_size(7, 3, 1, 2, 2, false), 3);
  // ceil_mode must not start a window in the right padding: (3 - 1) * 2 >= 4 + 0 drops it.
  EXPECT_EQ(nk::pool_output_size(4, 2, 0, 2, 1, true), 2);
  EXPECT_EQ(nk::pool_output_size(4, 1, 0, 3, 1, true), 2);
}

void check_max_pool(const PoolCase& k) {
  SCOPED_TRACE(::testing::Message() << "k " << k.kh << "x" << k.kw << " s " << k.sh << "," << k.sw
                                    << " p " << k.ph << "," << k.pw << " d " << k.dh << ","
                                    << k.dw << " ceil " << k.ceil_mode << " "
                                    << dtype_str(k.dtype) << " layout " << int(k.layout));
  const auto os = k.out_sizes(true);
  const size_t n = os.size();
  const int64_t H = k.in_sizes[n - 2], W = k.in_sizes[n - 1], OH = os[n - 2], OW = os[n - 1];
  HostTensor x(k.dtype, k.in_sizes, k.layout), y(k.dtype, os), idx(DType::Int64, os),
      ey(k.dtype, os), eidx(DType::Int64, os);
  fill_uniform(x, -5, 5);
  // Ties (a constant region) and a NaN: the first maximum / the NaN must be picked.
  for (int64_t i = 0; i < std::min<int64_t>(x.numel(), 7); ++i) x.set(i, 4.0);
  if (x.numel() > 40) x.set(40, NAN);
  nk::max_pool2d(y.desc(), idx.desc(), x.desc(), k.params());
  for (int64_t p = 0; p < planes(os); ++p) {
    for (int64_t oh = 0; oh < OH; ++oh) {
      for (int64_t ow = 0; ow < OW; ++ow) {
        double best = -INFINITY;
        int64_t bi = -1;
        for (int64_t a = 0; a < k.kh; ++a) {
          for (int64_t b = 0; b < k.kw; ++b) {
            int64_t h = oh * k.sh - k.ph + a * k.dh, w = ow * k.sw - k.pw + b * k.dw;
            if (h < 0 || h >= H || w < 0 || w >= W) continue;
            double v = x.get(p * H * W + h * W + w);
            if (bi < 0 || v > best || std::isnan(v)) best = v, bi = h * W + w;
          }
        }
        ey.set((p * OH + oh) * OW + ow, best);
        eidx.set_int((p * OH + oh) * OW + ow, bi);
      }
    }
  }
  EXPECT_TRUE(all_close(y, ey, 0, 0));
  EXPECT_TRUE(all_close(idx, eidx, 0, 0));
  // Without indices (a null data pointer, as the inference engine asks): the same maxima.
  HostTensor y2(k.dtype, os);
  nk::max_pool2d(y2.desc(), nk::TensorDesc::make(nullptr, DType::Int64, os.data(),
                                                 static_cast<int>(n)),
                 x.desc(), k.params());
  EXPECT_TRUE(all_close(y2, ey, 0, 0));

  HostTensor g(k.dtype, os), gi(k.dtype, k.in_sizes, k.layout), egi(DType::Float64, k.in_sizes);
  fill_uniform(g, -1, 1);
  fill_uniform(gi, 7, 8);  // overwritten
  nk::max_pool2d_backward(gi.desc(), g.desc(), idx.desc());
  for (int64_t i = 0; i < g.numel(); ++i) {
    int64_t p = i / (OH * OW), j = p * H * W + eidx.get_int(i);
    egi.set(j, egi.get(j) + g.get(i));
  }
  const double tol = std::max(1e-6, 2 * default_rtol(k.dtype));
  EXPECT_TRUE(all_close(gi, egi, tol, tol));
}

TEST(Pooling, MaxPoolWithIndicesAndBackward) {
  std::vector<PoolCase> cases = {
      {{2, 3, 9, 11}, 2, 2, 2, 2, 0, 0},
      {{2, 3, 9, 11}, 3, 3, 2, 2, 1, 1},
      {{2, 3, 9, 11}, 3, 2, 2, 1, 1, 1, 2, 3},        // dilation
      {{1, 2, 10, 7}, 3, 3, 2, 2, 1, 0, 1, 1, true},  // ceil_mode
      {{1, 2, 7, 7}, 2, 2, 3, 3, 1, 1, 1, 1, true},   // windows overlapping nothing at the end
      {{4, 8, 8}, 3, 3, 1, 1, 1, 1},                  // [C, H, W], overlapping windows
      {{1, 1, 1, 17}, 1, 3, 1, 2, 0, 1},              // max_pool1d as H = 1
      {{2, 3, 9, 37}, 2, 2, 2, 2, 0, 0},              // 2x2 / 2 vector path, the NaN in it
      {{1, 2, 8, 34}, 2, 2, 2, 2, 1, 1},              // padded: first and last rows partial
  };
  for (PoolCase k : cases) {
    check_max_pool(k);
    k.layout = Layout::Transposed;
    check_max_pool(k);
    k.layout = Layout::Contiguous;
    k.dtype = DType::Float64;
    check_max_pool(k);
    k.dtype = DType::BFloat16;
    check_max_pool(k);
  }
}

void check_avg_pool(const PoolCase& k, bool count_include_pad, int64_t divisor_override) {
  SCOPED_TRACE(::testing::Message() << "k " << k.kh << "x" << k.kw << " s " << k.sh << "," << k.sw
                                    << " p " << k.ph << "," << k.pw << " ceil " << k.ceil_mode
                                    << " include_pad " << count_include_pad << " divisor "
                                    << divisor_override << " " << dtype_str(k.dtype)
                                    << " layout " << int(k.layout));
  const auto os = k.out_sizes(false);
  const size_t n = os.size();
  const int64_t H = k.in_sizes[n - 2], W = k.in_sizes[n - 1], OH = os[n - 2], OW = os[n - 1];
  HostTensor x(k.dtype, k.in_sizes, k.layout), y(k.dtype, os), ey(DType::Float64, os);
  fill_uniform(x, -5, 5);
  nk::avg_pool2d(y.desc(), x.desc(), k.params(), count_include_pad, divisor_override);
  for (int64_t p = 0; p < planes(os); ++p) {
    for (int64_t oh = 0; oh < OH; ++oh) {
      for (int64_t ow = 0; ow < OW; ++ow) {
        double s = 0;
        int64_t inside = 0, padded = 0;
        for (int64_t h = oh * k.sh - k.ph; h < oh * k.sh - k.ph + k.kh; ++h) {
          for (int64_t w = ow * k.sw - k.pw; w < ow * k.sw - k.pw + k.kw; ++w) {
            if (h >= H + k.ph || w >= W + k.pw) continue;  // beyond the right / bottom padding
            ++padded;
            if (h < 0 || h >= H || w < 0 || w >= W) continue;
            ++inside;
            s += x.get(p * H * W + h * W + w);
          }
        }
        double div = divisor_override ? divisor_override : count_include_pad ? padded : inside;
        ey.set((p * OH + oh) * OW + ow, inside ? s / div : 0.0);
      }
    }
  }
  const double tol = std::max(1e-6, 2 * default_rtol(k.dtype));
  EXPECT_TRUE(all_close(y, ey, tol, tol));

  if (k.dtype == DType::Float64) {  // adjoint check needs full precision
    HostTensor g(k.dtype, os), gi(k.dtype, k.in_sizes, k.layout);
    fill_uniform(g, -1, 1);
    fill_uniform(gi, 7, 8);
    nk::avg_pool2d_backward(gi.desc(), g.desc(), k.params(), count_include_pad, divisor_override);
    EXPECT_NEAR(dot(y, g), dot(x, gi), 1e-9 * (1 + std::fabs(dot(y, g))));
  }
}

TEST(Pooling, AvgPoolEveryDivisorRule) {
  std::vector<PoolCase> cases = {
      {{2, 3, 9, 11}, 2, 2, 2, 2, 0, 0},
      {{2, 3, 9, 11}, 3, 3, 2, 2, 1, 1},
      {{1, 2, 10, 7}, 3, 2, 2, 3, 1, 1, 1, 1, true},  // ceil_mode: clipped last windows
      {{1, 2, 5, 5}, 2, 2, 2, 2, 1, 1, 1, 1, true},
      {{3, 8, 8}, 3, 3, 1, 1, 1, 1},
  };
  for (PoolCase k : cases) {
    for (bool include_pad : {true, false}) {
      for (int64_t div : {int64_t(0), int64_t(5)}) {
        for (DType dt : {DType::Float32, DType::Float64, DType::Float16}) {
          k.dtype = dt;
          k.layout = dt == DType::Float64 ? Layout::Transposed : Layout::Contiguous;
          check_avg_pool(k, include_pad, div);
        }
      }
    }
  }
}

TEST(Pooling, AdaptiveAvgPoolAndBackward) {
  struct Cfg { std::vector<int64_t> in; int64_t oh, ow; Layout layout; };
  for (Cfg c : {Cfg{{2, 3, 7, 9}, 3, 4, Layout::Contiguous}, Cfg{{2, 3, 7, 9}, 1, 1, Layout::Transposed},
                Cfg{{4, 5, 5}, 7, 3, Layout::Contiguous},  // output larger than input along H
                Cfg{{1, 2, 8, 8}, 8, 8, Layout::Transposed},
                Cfg{{2, 4, 8, 8}, 1, 1, Layout::Contiguous}}) {  // global: 8 partial sums
    SCOPED_TRACE(::testing::Message() << c.oh << "x" << c.ow);
    std::vector<int64_t> os = c.in;
    const size_t n = os.size();
    const int64_t H = c.in[n - 2], W = c.in[n - 1];
    os[n - 2] = c.oh, os[n - 1] = c.ow;
    HostTensor x(DType::Float64, c.in, c.layout), y(DType::Float64, os), ey(DType::Float64, os);
    fill_uniform(x, -3, 3);
    nk::adaptive_avg_pool2d(y.desc(), x.desc());
    for (int64_t p = 0; p < planes(os); ++p) {
      for (int64_t i = 0; i < c.oh; ++i) {
        for (int64_t j = 0; j < c.ow; ++j) {
          // floor(i H / OH) .. ceil((i + 1) H / OH), in floating point here.
          int64_t h0 = int64_t(std::floor(double(i) * H / c.oh)),
                  h1 = int64_t(std::ceil(double(i + 1) * H / c.oh));
          int64_t w0 = int64_t(std::floor(double(j) * W / c.ow)),
                  w1 = int64_t(std::ceil(double(j + 1) * W / c.ow));
          double s = 0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) s += x.get(p * H * W + h * W + w);
          ey.set((p * c.oh + i) * c.ow + j, s / double((h1 - h0) * (w1 - w0)));
        }
      }
    }
    EXPECT_TRUE(all_close(y, ey, 1e-12, 1e-12));
    HostTensor g(DType::Float64, os), gi(DType::Float64, c.in, c.layout);
    fill_uniform(g, -1, 1);
    fill_uniform(gi, 7, 8);
    nk::adaptive_avg_pool2d_backward(gi.desc(), g.desc());
    EXPECT_NEAR(dot(y, g), dot(x, gi), 1e-9 * (1 + std::fabs(dot(y, g))));

    HostTensor xf(DType::Float32, c.in), yf(DType::Float32, os);  // float32 path agrees
    for (int64_t i = 0; i < x.numel(); ++i) xf.set(i, x.get(i));
    nk::adaptive_avg_pool2d(yf.desc(), xf.desc());
    EXPECT_TRUE(all_close(yf, ey, 1e-5, 1e-5));
  }
}

TEST(Pooling, EmptyBatchAndSupports) {
  HostTensor x(DType::Float32, {0, 3, 4, 4}), y(DType::Float32, {0, 3, 2, 2}),
      idx(DType::Int64, {0, 3, 2, 2});
  nk::Pool2dParams p;
  p.kernel[0] = p.kernel[1] = p.stride[0] = p.stride[1] = 2;
  nk::max_pool2d(y.desc(), idx.desc(), x.desc(), p);
  nk::avg_pool2d(y.desc(), x.desc(), p, true);
  nk::adaptive_avg_pool2d(y.desc(), x.desc());
  EXPECT_TRUE(nk::pooling_supports(DType::Float16));
  EXPECT_FALSE(nk::pooling_supports(DType::Int64));
}

// The values-only 2x2 / stride 2 path (no indices: the inference engine) keeps the indexed
// path's rule bit for bit: among equal values the first in window order (-0 before +0 gives
// -0), a NaN anywhere in the window wins; 8-column vector blocks and a scalar tail.
TEST(Pooling, MaxPool2x2ValuesOnlyKeepsTheFirstOfEqualValuesAndNaN) {
  const std::vector<int64_t> is = {1, 2, 4, 42}, os = {1, 2, 2, 21};
  HostTensor x(DType::Float32, is), y(DType::Float32, os), y_idx(DType::Float32, os),
      idx(DType::Int64, os);
  fill_uniform(x, -1, 1);
  auto at = [&](int64_t c, int64_t h, int64_t w) { return (c * 4 + h) * 42 + w; };
  for (int64_t ow : {0, 9, 20}) {  // first vector block, second, scalar tail
    x.set(at(0, 0, 2 * ow), -0.0);
    x.set(at(0, 0, 2 * ow + 1), 0.0);
    x.set(at(0, 1, 2 * ow), -0.0);
    x.set(at(0, 1, 2 * ow + 1), 0.0);
    x.set(at(1, 3, 2 * ow + 1), NAN);  // the last of its window
  }
  nk::Pool2dParams p;
  p.kernel[0] = p.kernel[1] = p.stride[0] = p.stride[1] = 2;
  nk::max_pool2d(y.desc(), nk::TensorDesc::make(nullptr, DType::Int64, os.data(), 4), x.desc(), p);
  nk::max_pool2d(y_idx.desc(), idx.desc(), x.desc(), p);
  EXPECT_EQ(y.buf, y_idx.buf);  // bit for bit, NaN payload and the sign of zero included
  for (int64_t ow : {0, 9, 20}) {
    EXPECT_TRUE(std::signbit(y.get(ow))) << "ow " << ow;  // -0, the first of the equal zeros
    EXPECT_TRUE(std::isnan(y.get(2 * 21 + 21 + ow))) << "ow " << ow;
  }
  for (int64_t ow = 0; ow < 21; ++ow) {
    if (ow == 0 || ow == 9 || ow == 20) continue;
    double want = -INFINITY;
    for (int64_t a = 0; a < 2; ++a) {
      for (int64_t b = 0; b < 2; ++b) want = std::max(want, x.get(at(1, 2 + a, 2 * ow + b)));
    }
    EXPECT_EQ(y.get(2 * 21 + 21 + ow), want) << "ow " << ow;
  }
}

}  // namespace
}  // namespace ktest
