// softmax / log_softmax (+ backward), layer_norm and rms_norm (+ backward) against
// double-precision references, along every dim, on transposed and mixed-dtype operands.
#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace ktest {
namespace {

namespace nk = npu::kernels;

// Line j of `t` along `dim`: the flat (row-major) indices of its elements.
std::vector<std::vector<int64_t>> lines(const std::vector<int64_t>& sizes, int dim) {
  int64_t inner = 1;
  for (size_t d = dim + 1; d < sizes.size(); ++d) inner *= sizes[d];
  int64_t L = sizes[dim], total = 1;
  for (int64_t s : sizes) total *= s;
  std::vector<std::vector<int64_t>> out;
  if (total == 0) return out;
  for (int64_t o = 0; o < total / (L * inner); ++o)
    for (int64_t j = 0; j < inner; ++j) {
      std::vector<int64_t> l;
      for (int64_t k = 0; k < L; ++k) l.push_back((o * L + k) * inner + j);
      out.push_back(l);
    }
  return out;
}

TEST(Softmax, ForwardAndBackwardEveryDimDtypeAndLayout) {
  struct Cfg { DType in, out; Layout layout; };
  for (Cfg cfg : {Cfg{DType::Float32, DType::Float32, Layout::Contiguous},
                  Cfg{DType::Float32, DType::Float32, Layout::Transposed},
                  Cfg{DType::Float64, DType::Float64, Layout::Contiguous},
                  Cfg{DType::Float16, DType::Float32, Layout::Contiguous},
                  Cfg{DType::BFloat16, DType::BFloat16, Layout::Transposed}}) {
    for (bool log : {false, true}) {
      for (int dim = 0; dim < 3; ++dim) {
        SCOPED_TRACE(::testing::Message() << dtype_str(cfg.in) << "->" << dtype_str(cfg.out)
                                          << " layout " << int(cfg.layout) << " log " << log
                                          << " dim " << dim);
        std::vector<int64_t> sizes = {6, 37, 13};
        HostTensor x(cfg.in, sizes, cfg.layout), y(cfg.out, sizes), ey(cfg.out, sizes);
        fill_uniform(x, -10, 10);
        nk::softmax(y.desc(), x.desc(), dim, log);
        for (auto& l : lines(sizes, dim)) {
          double m = -INFINITY, s = 0;
          for (int64_t i : l) m = std::max(m, x.get(i));
          for (int64_t i : l) s += std::exp(x.get(i) - m);
          for (int64_t i : l) ey.set(i, log ? x.get(i) - m - std::log(s) : std::exp(x.get(i) - m) / s);
        }
        double tol = std::max(2e-6, default_rtol(cfg.out));
        ASSERT_TRUE(all_close(y, ey, tol, tol));

        // Backward, from the kernel's own output.
        HostTensor g(cfg.out, sizes, cfg.layout), gi(cfg.out, sizes), egi(cfg.out, sizes);
        fill_uniform(g, -1, 1);
        nk::softmax_backward(gi.desc(), g.desc(), y.desc(), dim, log);
        for (auto& l : lines(sizes, dim)) {
          double s = 0;
          for (int64_t i : l) s += log ? g.get(i) : g.get(i) * y.get(i);
          for (int64_t i : l) {
            egi.set(i, log ? g.get(i) - std::exp(y.get(i)) * s : y.get(i) * (g.get(i) - s));
          }
        }
        ASSERT_TRUE(all_close(gi, egi, 4 * tol, 4 * tol));
      }
    }
  }
}

TEST(Softmax, LargeRowsUseThePoolAndSumToOne) {
  HostTensor x(DType::Float32, {512, 1031}), y(DType::Float32, {512, 1031});
  fill_uniform(x, -30, 30);
  nk::softmax(y.desc(), x.desc(), 1, false);
  for (int64_t r = 0; r < 512; ++r) {
    double s = 0;
    for (int64_t j = 0; j < 1031; ++j) s += y.get(r * 1031 + j);
    ASSERT_NEAR(s, 1.0, 1e-5) << "row " << r;
  }
}

TEST(Softmax, InfinitiesAndEmpty) {
  float x[4] = {-INFINITY, 0.0f, -INFINITY, 1e30f}, y[4];
  nk::softmax(TensorDesc::make(y, DType::Float32, {4}), TensorDesc::make(x, DType::Float32, {4}), 0, false);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[3], 1.0f);
  nk::softmax(TensorDesc::make(nullptr, DType::Float32, {0, 3}),
              TensorDesc::make(nullptr, DType::Float32, {0, 3}), 1, true);
}

// Layer norm / RMS norm reference rows.
struct NormRef {
  std::vector<double> y, mean, rstd, dx, dw, db;
};

NormRef norm_ref(const HostTensor& x, const HostTensor* w, const HostTensor* b,
                 const HostTensor& dy, int64_t N, double eps, bool rms) {
  int64_t M = x.numel() / N;
  NormRef r;
  r.y.resize(M * N), r.dx.resize(M * N), r.dw.assign(N, 0), r.db.assign(N, 0);
  for (int64_t i = 0; i < M; ++i) {
    double mu = 0, var = 0;
    for (int64_t j = 0; j < N; ++j) mu += x.get(i * N + j);
    mu = rms ? 0 : mu / N;
    for (int64_t j = 0; j < N; ++j) var += (x.get(i * N + j) - mu) * (x.get(i * N + j) - mu);
    double rs = 1 / std::sqrt(var / N + eps);
    r.mean.push_back(mu), r.rstd.push_back(rs);
    double a = 0, bb = 0;
    for (int64_t j = 0; j < N; ++j) {
      double xh = (x.get(i * N + j) - mu) * rs, wj = w ? w->get(j) : 1;
      r.y[i * N + j] = xh * wj + (b ? b->get(j) : 0);
      double g = dy.get(i * N + j) * wj;
      a += g, bb += g * xh;
      r.dw[j] += dy.get(i * N + j) * xh;
      r.db[j] += dy.get(i * N + j);
    }
    a = rms ? 0 : a / N, bb /= N;
    for (int64_t j = 0; j < N; ++j) {
      double xh = (x.get(i * N + j) - mu) * rs, wj = w ? w->get(j) : 1;
      r.dx[i * N + j] = rs * (dy.get(i * N + j) * wj - a - xh * bb);
    }
  }
  return r;
}

HostTensor from(const std::vector<double>& v, DType t, std::vector<int64_t> sizes) {
  HostTensor h(t, sizes);
  for (int64_t i = 0; i < h.numel(); ++i) h.set(i, v[i]);
  return h;
}

TEST(LayerNorm, ForwardBackwardWithAndWithoutAffine) {
  for (DType t : {DType::Float32, DType::Float64, DType::BFloat16}) {
    for (bool affine : {true, false}) {
      for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
        SCOPED_TRACE(::testing::Message() << dtype_str(t) << " affine " << affine << " layout "
                                          << int(layout));
        std::vector<int64_t> sizes = {5, 9, 3, 40};  // normalize the last two dims: N = 120
        HostTensor x(t, sizes, layout), y(t, sizes), dy(t, sizes), dx(t, sizes);
        HostTensor w(t, {3, 40}), b(t, {3, 40}), dw(t, {3, 40}), db(t, {3, 40});
        HostTensor mean(DType::Float32, {5, 9, 1, 1}), rstd(DType::Float32, {5, 9, 1, 1});
        fill_uniform(x, -2, 5);
        fill_uniform(w, 0.5, 1.5);
        fill_uniform(b, -1, 1);
        fill_uniform(dy, -1, 1);
        TensorDesc wd = w.desc(), bd = b.desc(), dwd = dw.desc(), dbd = db.desc(), dxd = dx.desc();
        nk::layer_norm(y.desc(), mean.desc(), rstd.desc(), x.desc(), affine ? &wd : nullptr,
                       affine ? &bd : nullptr, 2, 1e-5);
        nk::layer_norm_backward(&dxd, affine ? &dwd : nullptr, affine ? &dbd : nullptr,
                                dy.desc(), x.desc(), mean.desc(), rstd.desc(),
                                affine ? &wd : nullptr, 2);
        NormRef r = norm_ref(x, affine ? &w : nullptr, affine ? &b : nullptr, dy, 120, 1e-5, false);
        double tol = std::max(1e-5, default_rtol(t));
        EXPECT_TRUE(all_close(y, from(r.y, t, sizes), tol, tol));
        EXPECT_TRUE(all_close(mean, from(r.mean, DType::Float32, {5, 9, 1, 1}), 1e-6, 1e-6));
        EXPECT_TRUE(all_close(rstd, from(r.rstd, DType::Float32, {5, 9, 1, 1}), 1e-6, 1e-6));
        EXPECT_TRUE(all_close(dx, from(r.dx, t, sizes), 4 * tol, 4 * tol));
        if (affine) {
          EXPECT_TRUE(all_close(dw, from(r.dw, t, {3, 40}), tol, 4 * tol));
          EXPECT_TRUE(all_close(db, from(r.db, t, {3, 40}), tol, 4 * tol));
        }
      }
    }
  }
}

TEST(LayerNorm, ManyRowsAcrossThePool) {
  HostTensor x(DType::Float32, {4000, 64}), y(DType::Float32, {4000, 64}), dy(DType::Float32, {4000, 64});
  HostTensor mean(DType::Float32, {4000}), rstd(DType::Float32, {4000}), w(DType::Float32, {64}),
      dw(DType::Float32, {64}), db(DType::Float32, {64});
  fill_uniform(x, -1, 1);
  fill_uniform(w, -1, 1);
  fill_uniform(dy, -1, 1);
  TensorDesc wd = w.desc(), dwd = dw.desc(), dbd = db.desc();
  nk::layer_norm(y.desc(), mean.desc(), rstd.desc(), x.desc(), &wd, nullptr, 1, 1e-5);
  nk::layer_norm_backward(nullptr, &dwd, &dbd, dy.desc(), x.desc(), mean.desc(), rstd.desc(), &wd, 1);
  NormRef r = norm_ref(x, &w, nullptr, dy, 64, 1e-5, false);
  EXPECT_TRUE(all_close(y, from(r.y, DType::Float32, {4000, 64}), 1e-5, 1e-5));
  EXPECT_TRUE(all_close(dw, from(r.dw, DType::Float32, {64}), 1e-5, 1e-4));
  EXPECT_TRUE(all_close(db, from(r.db, DType::Float32, {64}), 1e-5, 1e-4));
}

TEST(RmsNorm, ForwardBackward) {
  for (DType t : {DType::Float32, DType::Float16}) {
    std::vector<int64_t> sizes = {7, 11, 96};
    HostTensor x(t, sizes, Layout::Transposed), y(t, sizes), dy(t, sizes), dx(t, sizes);
    HostTensor w(t, {96}), dw(DType::Float32, {96}), rstd(DType::Float32, {7, 11, 1});
    fill_uniform(x, -2, 2);
    fill_uniform(w, 0.5, 1.5);
    fill_uniform(dy, -1, 1);
    TensorDesc wd = w.desc(), dwd = dw.desc(), dxd = dx.desc();
    nk::rms_norm(y.desc(), rstd.desc(), x.desc(), &wd, 1, 1e-6);
    nk::rms_norm_backward(&dxd, &dwd, dy.desc(), x.desc(), rstd.desc(), &wd, 1);
    NormRef r = norm_ref(x, &w, nullptr, dy, 96, 1e-6, true);
    double tol = std::max(1e-5, default_rtol(t));
    EXPECT_TRUE(all_close(y, from(r.y, t, sizes), tol, tol)) << dtype_str(t);
    EXPECT_TRUE(all_close(rstd, from(r.rstd, DType::Float32, {7, 11, 1}), tol, tol));
    EXPECT_TRUE(all_close(dx, from(r.dx, t, sizes), 4 * tol, 4 * tol));
    EXPECT_TRUE(all_close(dw, from(r.dw, DType::Float32, {96}), 4 * tol, 4 * tol));
  }
}

}  // namespace
}  // namespace ktest
