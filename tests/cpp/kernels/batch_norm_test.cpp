// batch_norm forward (training and eval) and backward against per-channel loops in double:
// [N, C], [N, C, H, W] and large [N, C, D, H, W] (plane-by-plane path), transposed inputs and
// gradients (whole-channel path),
// optional weight / bias, Float16 input with float32 stats, output masks; group_norm_backward
// against the textbook form in double.
#include <gtest/gtest.h>

#include <optional>

#include "kernel_test_util.h"
#include "npu/kernels/batch_norm.h"

namespace ktest {
namespace {

namespace nk = npu::kernels;

struct BnCase {
  std::vector<int64_t> sizes;
  DType dtype = DType::Float32;
  bool affine = true, training = true;
  Layout layout = Layout::Contiguous;
  std::optional<Layout> grad_layout;  // of dy and dx; the input's when unset
};

// Flat indices of channel c's elements in a row-major [N, C, S] tensor.
std::vector<int64_t> channel_elems(const std::vector<int64_t>& sizes, int64_t c) {
  int64_t S = 1;
  for (size_t d = 2; d < sizes.size(); ++d) S *= sizes[d];
  std::vector<int64_t> idx;
  for (int64_t n = 0; n < sizes[0]; ++n)
    for (int64_t s = 0; s < S; ++s) idx.push_back((n * sizes[1] + c) * S + s);
  return idx;
}

void check_bn(const BnCase& k) {
  SCOPED_TRACE(::testing::Message() << "ndim " << k.sizes.size() << " numel0 " << k.sizes[0]
                                    << " " << dtype_str(k.dtype) << " affine " << k.affine
                                    << " training " << k.training << " layout " << int(k.layout));
  const int64_t C = k.sizes[1];
  const double momentum = 0.1, eps = 1e-5;
  HostTensor x(k.dtype, k.sizes, k.layout), y(k.dtype, k.sizes), ey(DType::Float64, k.sizes);
  HostTensor w(DType::Float32, {C}), b(DType::Float32, {C}), rm(DType::Float32, {C}),
      rv(DType::Float32, {C}), sm(DType::Float32, {C}), si(DType::Float32, {C});
  fill_uniform(x, -2, 3);
  fill_uniform(w, 0.5, 1.5);
  fill_uniform(b, -1, 1);
  fill_uniform(rm, -0.5, 0.5);
  fill_uniform(rv, 0.5, 2);
  HostTensor rm0 = rm, rv0 = rv;
  TensorDesc wd = w.desc(), bd = b.desc(), rmd = rm.desc(), rvd = rv.desc(), smd = sm.desc(),
             sid = si.desc();
  nk::batch_norm(y.desc(), &smd, &sid, x.desc(), k.affine ? &wd : nullptr,
                 k.affine ? &bd : nullptr, &rmd, &rvd, k.training, momentum, eps);

  std::vector<double> mean(C), invstd(C);
  HostTensor erm = rm0, erv = rv0;
  for (int64_t c = 0; c < C; ++c) {
    auto idx = channel_elems(k.sizes, c);
    const double n = double(idx.size());
    if (k.training) {
      double s = 0, ss = 0;
      for (int64_t i : idx) s += x.get(i);
      for (int64_t i : idx) ss += (x.get(i) - s / n) * (x.get(i) - s / n);
      mean[c] = s / n;
      invstd[c] = 1 / std::sqrt(ss / n + eps);
      erm.set(c, (1 - momentum) * rm0.get(c) + momentum * mean[c]);
      erv.set(c, (1 - momentum) * rv0.get(c) + momentum * ss / (n - 1));
    } else {
      mean[c] = rm0.get(c);
      invstd[c] = 1 / std::sqrt(rv0.get(c) + eps);
    }
    for (int64_t i : idx) {
      ey.set(i, (x.get(i) - mean[c]) * invstd[c] * (k.affine ? w.get(c) : 1) +
                    (k.affine ? b.get(c) : 0));
    }
  }
  const double tol = std::max(2e-5, 2 * default_rtol(k.dtype));
  EXPECT_TRUE(all_close(y, ey, tol, tol));
  EXPECT_TRUE(all_close(rm, erm, 1e-5, 1e-6));
  EXPECT_TRUE(all_close(rv, erv, 1e-5, 1e-6));
  if (k.training) {
    HostTensor esm(DType::Float32, {C}), esi(DType::Float32, {C});
    for (int64_t c = 0; c < C; ++c) esm.set(c, mean[c]), esi.set(c, invstd[c]);
    EXPECT_TRUE(all_close(sm, esm, 1e-5, 1e-6));
    EXPECT_TRUE(all_close(si, esi, 1e-5, 1e-6));
  }

  // Backward with every output wanted, then grad_input alone.
  const Layout gl = k.grad_layout.value_or(k.layout);
  HostTensor dy(k.dtype, k.sizes, gl), dx(k.dtype, k.sizes, gl),
      edx(DType::Float64, k.sizes), gw(DType::Float32, {C}), gb(DType::Float32, {C}),
      egw(DType::Float64, {C}), egb(DType::Float64, {C});
  fill_uniform(dy, -1, 1);
  TensorDesc dxd = dx.desc(), gwd = gw.desc(), gbd = gb.desc();
  nk::batch_norm_backward(&dxd, &gwd, &gbd, dy.desc(), x.desc(), k.affine ? &wd : nullptr,
                          &rmd, &rvd, &smd, &sid, k.training, eps);
  for (int64_t c = 0; c < C; ++c) {
    auto idx = channel_elems(k.sizes, c);
    const double n = double(idx.size()), wc = k.affine ? w.get(c) : 1;
    double sdy = 0, sdyx = 0;
    for (int64_t i : idx) {
      sdy += dy.get(i);
      sdyx += dy.get(i) * (x.get(i) - mean[c]) * invstd[c];
    }
    egb.set(c, sdy);
    egw.set(c, sdyx);
    for (int64_t i : idx) {
      double xhat = (x.get(i) - mean[c]) * invstd[c];
      edx.set(i, k.training ? wc * invstd[c] * (dy.get(i) - sdy / n - xhat * sdyx / n)
                            : dy.get(i) * wc * invstd[c]);
    }
  }
  const double gtol = std::max(1e-4, 4 * default_rtol(k.dtype));
  EXPECT_TRUE(all_close(dx, edx, gtol, gtol));
  EXPECT_TRUE(all_close(gw, egw, 1e-4, 1e-4));
  EXPECT_TRUE(all_close(gb, egb, 1e-4, 1e-4));

  HostTensor dx2(k.dtype, k.sizes);
  TensorDesc dx2d = dx2.desc();
  nk::batch_norm_backward(&dx2d, nullptr, nullptr, dy.desc(), x.desc(), k.affine ? &wd : nullptr,
                          &rmd, &rvd, &smd, &sid, k.training, eps);
  EXPECT_TRUE(all_close(dx2, edx, gtol, gtol));
}

TEST(BatchNorm, TrainingAndEvalOverLayoutsAndDtypes) {
  for (bool training : {true, false}) {
    for (bool affine : {true, false}) {
      for (DType dt : {DType::Float32, DType::Float64}) {
        BnCase k;
        k.training = training, k.affine = affine, k.dtype = dt;
        k.sizes = {16, 5};  // BatchNorm1d
        check_bn(k);
        k.sizes = {4, 6, 7, 9};
        check_bn(k);
        k.layout = Layout::Transposed;
        check_bn(k);
        k.sizes = {3, 4, 5};
        check_bn(k);
      }
    }
  }
}

// Dense planes are used in place, strided ones gathered: the input and its gradients must agree
// on the segmentation whichever of them is strided.
TEST(BatchNorm, InputAndGradientsOfDifferentLayouts) {
  for (bool training : {true, false}) {
    BnCase k;
    k.training = training;
    k.sizes = {4, 6, 7, 9};
    k.grad_layout = Layout::Transposed;
    check_bn(k);
    k.layout = Layout::Transposed;
    k.grad_layout = Layout::Contiguous;
    check_bn(k);
  }
}

TEST(BatchNorm, LargeChannelsGoPlaneByPlaneAndHalfUsesFloatStats) {
  BnCase k;
  k.sizes = {3, 2, 4, 100, 60};  // 72000 elements per channel: per-plane segments
  check_bn(k);
  k.layout = Layout::Transposed;
  check_bn(k);
  k.sizes = {5, 3, 8, 8};
  k.layout = Layout::Contiguous;
  k.dtype = DType::Float16;
  check_bn(k);
  k.dtype = DType::BFloat16;
  k.training = false;
  check_bn(k);
}

// SyncBatchNorm's pieces compose to the single-process kernels: stats + elemt is batch_norm's
// training forward, backward_reduce + backward_elemt (count = the channel's n) its backward;
// the sums, and the gather of two identical ranks, agree with the same statistics.
void check_sync_pieces(const std::vector<int64_t>& sizes, DType dtype, Layout layout) {
  SCOPED_TRACE(::testing::Message() << "ndim " << sizes.size() << " " << dtype_str(dtype)
                                    << " layout " << int(layout));
  const int64_t C = sizes[1];
  const double eps = 1e-5;
  int64_t n = 1;
  for (size_t d = 0; d < sizes.size(); ++d) n *= d == 1 ? 1 : sizes[d];
  HostTensor x(dtype, sizes, layout), y(dtype, sizes), dy(dtype, sizes, layout), dx(dtype, sizes);
  HostTensor w(DType::Float32, {C}), b(DType::Float32, {C}), sm(DType::Float32, {C}),
      si(DType::Float32, {C}), gw(DType::Float32, {C}), gb(DType::Float32, {C});
  fill_uniform(x, -2, 3);
  fill_uniform(dy, -1, 1);
  fill_uniform(w, 0.5, 1.5);
  fill_uniform(b, -1, 1);
  const TensorDesc wd = w.desc(), bd = b.desc(), smd = sm.desc(), sid = si.desc(),
                   dxd = dx.desc(), gwd = gw.desc(), gbd = gb.desc();
  nk::batch_norm(y.desc(), &smd, &sid, x.desc(), &wd, &bd, nullptr, nullptr, true, 0.1, eps);
  nk::batch_norm_backward(&dxd, &gwd, &gbd, dy.desc(), x.desc(), &wd, nullptr, nullptr, &smd,
                          &sid, true, eps);

  HostTensor mean(DType::Float32, {C}), invstd(DType::Float32, {C});
  nk::batch_norm_stats(mean.desc(), invstd.desc(), x.desc(), eps);
  EXPECT_TRUE(all_close(mean, sm, 1e-6, 1e-6));
  EXPECT_TRUE(all_close(invstd, si, 1e-6, 1e-6));

  HostTensor y2(dtype, sizes);
  const TensorDesc meand = mean.desc(), invd = invstd.desc();
  nk::batch_norm_elemt(y2.desc(), x.desc(), &wd, &bd, meand, invd);
  EXPECT_TRUE(all_close(y2, y, 1e-5, 1e-5));

  HostTensor sdy(DType::Float32, {C}), sdx(DType::Float32, {C}), gw2(DType::Float32, {C}),
      gb2(DType::Float32, {C}), count(DType::Int32, {1});
  const TensorDesc sdyd = sdy.desc(), sdxd = sdx.desc(), gw2d = gw2.desc(), gb2d = gb2.desc();
  nk::batch_norm_backward_reduce(&sdyd, &sdxd, &gw2d, &gb2d, dy.desc(), x.desc(), meand, invd);
  EXPECT_TRUE(all_close(gw2, gw, 1e-4, 1e-4));
  EXPECT_TRUE(all_close(gb2, gb, 1e-4, 1e-4));
  count.set(0, double(n));
  HostTensor dx2(dtype, sizes);
  nk::batch_norm_backward_elemt(dx2.desc(), dy.desc(), x.desc(), meand, invd, &wd, sdyd, sdxd,
                                count.desc());
  const double tol = std::max(1e-4, 4 * default_rtol(dtype));
  EXPECT_TRUE(all_close(dx2, dx, tol, tol));

  // sums: sum = n * mean, square_sum = n * (var + mean^2)
  HostTensor sum(DType::Float32, {C}), sq(DType::Float32, {C}), esum(DType::Float64, {C}),
      esq(DType::Float64, {C});
  nk::batch_norm_sums(sum.desc(), sq.desc(), x.desc());
  for (int64_t c = 0; c < C; ++c) {
    const double m = mean.get(c), var = 1 / (invstd.get(c) * invstd.get(c)) - eps;
    esum.set(c, n * m);
    esq.set(c, n * (var + m * m));
  }
  EXPECT_TRUE(all_close(sum, esum, 1e-4, 1e-3));
  EXPECT_TRUE(all_close(sq, esq, 1e-4, 1e-3));

  // two ranks holding the same data: the same mean and invstd; running_var's unbiased variance
  // over 2n elements.
  HostTensor m2(DType::Float32, {2, C}), i2(DType::Float32, {2, C}), counts(DType::Float32, {2}),
      mo(DType::Float32, {C}), io(DType::Float32, {C}), rv(DType::Float32, {C}),
      erv(DType::Float64, {C});
  for (int64_t r = 0; r < 2; ++r) {
    counts.set(r, double(n));
    for (int64_t c = 0; c < C; ++c) m2.set(r * C + c, mean.get(c)), i2.set(r * C + c, invstd.get(c));
  }
  for (int64_t c = 0; c < C; ++c) {
    rv.set(c, 1.0);
    const double var = 1 / (invstd.get(c) * invstd.get(c)) - eps;
    erv.set(c, 0.9 + 0.1 * var * (2 * n) / (2 * n - 1));
  }
  const TensorDesc rvd = rv.desc();
  nk::batch_norm_gather_stats(mo.desc(), io.desc(), m2.desc(), i2.desc(), nullptr, &rvd, 0.1, eps,
                              counts.desc());
  EXPECT_TRUE(all_close(mo, mean, 1e-6, 1e-6));
  EXPECT_TRUE(all_close(io, invstd, 1e-5, 1e-5));
  EXPECT_TRUE(all_close(rv, erv, 1e-5, 1e-5));
}

TEST(SyncBatchNormPieces, ComposeToBatchNorm) {
  check_sync_pieces({16, 5}, DType::Float32, Layout::Contiguous);
  check_sync_pieces({4, 6, 7, 9}, DType::Float32, Layout::Contiguous);
  check_sync_pieces({4, 6, 7, 9}, DType::Float32, Layout::Transposed);
  check_sync_pieces({3, 2, 4, 100, 60}, DType::Float32, Layout::Contiguous);  // plane by plane
  check_sync_pieces({5, 3, 8, 8}, DType::Float16, Layout::Contiguous);
  check_sync_pieces({5, 3, 8, 8}, DType::Float64, Layout::Contiguous);
}

TEST(BatchNorm, EmptyBatchLeavesRunningStats) {
  HostTensor x(DType::Float32, {0, 3, 2, 2}), y(DType::Float32, {0, 3, 2, 2}),
      rm(DType::Float32, {3}), rv(DType::Float32, {3}), sm(DType::Float32, {3}),
      si(DType::Float32, {3});
  fill_uniform(rm, 1, 2);
  fill_uniform(rv, 1, 2);
  HostTensor rm0 = rm, rv0 = rv;
  TensorDesc rmd = rm.desc(), rvd = rv.desc(), smd = sm.desc(), sid = si.desc();
  nk::batch_norm(y.desc(), &smd, &sid, x.desc(), nullptr, nullptr, &rmd, &rvd, true, 0.1, 1e-5);
  EXPECT_TRUE(all_close(rm, rm0, 0, 0));
  EXPECT_TRUE(all_close(rv, rv0, 0, 0));
  EXPECT_EQ(sm.get(0), 0);
  EXPECT_TRUE(nk::batch_norm_supports(DType::Float16));
  EXPECT_FALSE(nk::batch_norm_supports(DType::Int32));
}

// group_norm_backward against the textbook form in double, on [N, C, HxW] (the adapter's view):
// per (n, g), dx = rstd * (w dy - mean(w dy) - xhat * mean(w dy xhat)) over the group's
// D * HxW values, grad_weight = sum dy xhat, grad_bias = sum dy. Float32 / Float64 / Float16 /
// BFloat16 inputs, a column-major input, groups of one channel and of all of them, no weight,
// and output masks (absent outputs).
struct GnCase {
  int64_t n, c, hw, group;
  DType dtype = DType::Float32;
  bool affine = true;
  Layout layout = Layout::Contiguous;
};

void check_gn_backward(const GnCase& k) {
  SCOPED_TRACE(::testing::Message() << k.n << "x" << k.c << "x" << k.hw << " group " << k.group
                                    << " " << dtype_str(k.dtype) << " affine " << k.affine
                                    << " layout " << int(k.layout));
  const int64_t D = k.c / k.group, G = k.group;
  HostTensor x(k.dtype, {k.n, k.c, k.hw}, k.layout), dy(k.dtype, {k.n, k.c, k.hw});
  HostTensor w(DType::Float32, {k.c}), mean(DType::Float32, {k.n, G}), rstd(DType::Float32, {k.n, G});
  fill_uniform(x, -2, 3);
  fill_uniform(dy, -1, 1);
  fill_uniform(w, 0.5, 1.5);
  auto at = [&](int64_t n, int64_t c, int64_t s) { return (n * k.c + c) * k.hw + s; };
  for (int64_t n = 0; n < k.n; ++n) {
    for (int64_t g = 0; g < G; ++g) {
      double s = 0, ss = 0;
      for (int64_t c = g * D; c < (g + 1) * D; ++c)
        for (int64_t i = 0; i < k.hw; ++i) s += x.get(at(n, c, i));
      const double mu = s / double(D * k.hw);
      for (int64_t c = g * D; c < (g + 1) * D; ++c)
        for (int64_t i = 0; i < k.hw; ++i) ss += (x.get(at(n, c, i)) - mu) * (x.get(at(n, c, i)) - mu);
      mean.set(n * G + g, mu);
      rstd.set(n * G + g, 1 / std::sqrt(ss / double(D * k.hw) + 1e-5));
    }
  }
  HostTensor dx(k.dtype, {k.n, k.c, k.hw}), dw(DType::Float32, {k.c}), db(DType::Float32, {k.c});
  TensorDesc dxd = dx.desc(), dwd = dw.desc(), dbd = db.desc(), wd = w.desc();
  nk::group_norm_backward(&dxd, &dwd, &dbd, dy.desc(), x.desc(), mean.desc(), rstd.desc(),
                          k.affine ? &wd : nullptr, k.group);

  HostTensor edx(DType::Float64, {k.n, k.c, k.hw}), edw(DType::Float64, {k.c}),
      edb(DType::Float64, {k.c});
  std::vector<double> gw(k.c, 0.0), gb(k.c, 0.0);
  for (int64_t n = 0; n < k.n; ++n) {
    for (int64_t g = 0; g < G; ++g) {
      const double mu = mean.get(n * G + g), rs = rstd.get(n * G + g);
      double m1 = 0, m2 = 0;  // mean(w dy), mean(w dy xhat) over the group
      for (int64_t c = g * D; c < (g + 1) * D; ++c) {
        const double wc = k.affine ? w.get(c) : 1.0;
        for (int64_t i = 0; i < k.hw; ++i) {
          const double d = dy.get(at(n, c, i)), xh = (x.get(at(n, c, i)) - mu) * rs;
          m1 += wc * d, m2 += wc * d * xh;
          gw[c] += d * xh, gb[c] += d;
        }
      }
      m1 /= double(D * k.hw), m2 /= double(D * k.hw);
      for (int64_t c = g * D; c < (g + 1) * D; ++c) {
        const double wc = k.affine ? w.get(c) : 1.0;
        for (int64_t i = 0; i < k.hw; ++i) {
          const double xh = (x.get(at(n, c, i)) - mu) * rs;
          edx.set(at(n, c, i), rs * (wc * dy.get(at(n, c, i)) - m1 - xh * m2));
        }
      }
    }
  }
  for (int64_t c = 0; c < k.c; ++c) edw.set(c, gw[c]), edb.set(c, gb[c]);
  const double tol = std::max(1e-5, 2 * default_rtol(k.dtype));
  EXPECT_TRUE(all_close(dx, edx, tol, tol));
  EXPECT_TRUE(all_close(dw, edw, 1e-5, 1e-5));
  EXPECT_TRUE(all_close(db, edb, 1e-5, 1e-5));
}

TEST(GroupNormBackward, MatchesDoubleReference) {
  for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    check_gn_backward({4, 6, 25, 3, t});
    check_gn_backward({2, 8, 7, 8, t});   // one channel per group
    check_gn_backward({3, 5, 11, 1, t});  // one group of every channel
    check_gn_backward({2, 6, 9, 2, t, false});
  }
  check_gn_backward({3, 6, 10, 3, DType::Float32, true, Layout::Transposed});
  check_gn_backward({1, 4, 70000, 2, DType::Float32});  // planes over the parallel grain
}

TEST(GroupNormBackward, OutputMaskSkipsAbsentOutputs) {
  HostTensor x(DType::Float32, {2, 4, 3}), dy(DType::Float32, {2, 4, 3});
  HostTensor mean(DType::Float32, {2, 2}), rstd(DType::Float32, {2, 2}), dw(DType::Float32, {4});
  fill_uniform(x, -1, 1);
  fill_uniform(dy, -1, 1);
  fill_uniform(mean, -0.1, 0.1);
  fill_uniform(rstd, 0.9, 1.1);
  TensorDesc dwd = dw.desc();
  nk::group_norm_backward(nullptr, &dwd, nullptr, dy.desc(), x.desc(), mean.desc(), rstd.desc(),
                          nullptr, 2);
  for (int64_t c = 0; c < 4; ++c) {
    double want = 0;
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t i = 0; i < 3; ++i)
        want += dy.get((n * 4 + c) * 3 + i) *
                (x.get((n * 4 + c) * 3 + i) - mean.get(n * 2 + c / 2)) * rstd.get(n * 2 + c / 2);
    EXPECT_NEAR(dw.get(c), want, 1e-5);
  }
}

}  // namespace
}  // namespace ktest
