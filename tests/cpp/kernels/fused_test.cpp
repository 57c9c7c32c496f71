// add_rms_norm, rotary_mul (half / interleave) and swiglu, forward and backward, against
// double-precision references, for every floating dtype, with broadcast and strided operands.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"

namespace ktest {
namespace {

namespace nk = npu::kernels;

double tol_of(DType t) { return t == DType::Float32 ? 2e-5 : t == DType::Float16 ? 4e-3 : 3e-2; }

TEST(AddRmsNorm, MatchesReference) {
  for (DType t : {DType::Float32, DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(dtype_str(t));
    const int64_t M = 13, N = 77;
    HostTensor x1(t, {M, N}), x2(t, {M, N}, Layout::Transposed), g(t, {N});
    HostTensor y(t, {M, N}), x(t, {M, N}), rstd(DType::Float32, {M, 1});
    HostTensor ey(DType::Float64, {M, N}), ex(t, {M, N}), er(DType::Float64, {M, 1});
    fill_uniform(x1, -2, 2);
    fill_uniform(x2, -2, 2);
    fill_uniform(g, 0.5, 1.5);
    nk::add_rms_norm(y.desc(), rstd.desc(), x.desc(), x1.desc(), x2.desc(), g.desc(), 1, 1e-6);
    for (int64_t r = 0; r < M; ++r) {
      double ss = 0;
      for (int64_t j = 0; j < N; ++j) {
        ex.set(r * N + j, x1.get(r * N + j) + x2.get(r * N + j));  // rounded to t
        ss += ex.get(r * N + j) * ex.get(r * N + j);
      }
      const double rs = 1.0 / std::sqrt(ss / N + 1e-6);
      er.set(r, rs);
      for (int64_t j = 0; j < N; ++j) ey.set(r * N + j, ex.get(r * N + j) * rs * g.get(j));
    }
    EXPECT_TRUE(all_close(x, ex, 0, 0));
    EXPECT_TRUE(all_close(y, ey, tol_of(t), tol_of(t)));
    EXPECT_TRUE(all_close(rstd, er, 1e-5, 0));
  }
}

double rot_ref(const HostTensor& x, int64_t row, int64_t D, int64_t i, nk::RotaryMode mode) {
  if (mode == nk::RotaryMode::Half) {
    const int64_t h = D / 2;
    return i < h ? -x.get(row * D + i + h) : x.get(row * D + i - h);
  }
  return i % 2 == 0 ? -x.get(row * D + i + 1) : x.get(row * D + i - 1);
}

TEST(RotaryMul, ForwardAndBackwardBothModes) {
  for (nk::RotaryMode mode : {nk::RotaryMode::Half, nk::RotaryMode::Interleave}) {
    for (DType t : {DType::Float32, DType::Float16, DType::BFloat16}) {
      SCOPED_TRACE(::testing::Message() << dtype_str(t) << " mode " << int(mode));
      // x [B=2, S=5, N=3, D=10]; r1 / r2 [1, S, 1, D] broadcast over B and N.
      const int64_t B = 2, S = 5, N = 3, D = 10, rows = B * S * N;
      HostTensor x(t, {B, S, N, D}), r1(t, {1, S, 1, D}), r2(t, {1, S, 1, D});
      fill_uniform(x, -2, 2);
      fill_uniform(r1, -1, 1);
      fill_uniform(r2, -1, 1);
      HostTensor r1e = r1.expanded(0, B).expanded(2, N), r2e = r2.expanded(0, B).expanded(2, N);
      HostTensor out(t, {B, S, N, D}), eout(DType::Float64, {B, S, N, D});
      nk::rotary_mul(out.desc(), x.desc(), r1e.desc(), r2e.desc(), mode);
      HostTensor dy(t, {B, S, N, D}), dx(t, {B, S, N, D}), d1(t, {B, S, N, D}),
          d2(t, {B, S, N, D});
      fill_uniform(dy, -1, 1);
      nk::TensorDesc dxd = dx.desc(), d1d = d1.desc(), d2d = d2.desc();
      nk::rotary_mul_backward(&dxd, &d1d, &d2d, dy.desc(), x.desc(), r1e.desc(), r2e.desc(),
                              mode);
      HostTensor edx(DType::Float64, {B, S, N, D}), ed1(DType::Float64, {B, S, N, D}),
          ed2(DType::Float64, {B, S, N, D});
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t s = (r / N) % S;
        for (int64_t i = 0; i < D; ++i) {
          const int64_t at = r * D + i;
          const double a = r1.get(s * D + i), b = r2.get(s * D + i);
          eout.set(at, x.get(at) * a + rot_ref(x, r, D, i, mode) * b);
          ed1.set(at, dy.get(at) * x.get(at));
          ed2.set(at, dy.get(at) * rot_ref(x, r, D, i, mode));
          // dx = dy * r1 + R^T (dy * r2); R^T = -R.
          HostTensor u(DType::Float64, {1, D});
          for (int64_t k = 0; k < D; ++k) u.set(k, dy.get(r * D + k) * r2.get(s * D + k));
          edx.set(at, dy.get(at) * a - rot_ref(u, 0, D, i, mode));
        }
      }
      const double tol = tol_of(t);
      EXPECT_TRUE(all_close(out, eout, tol, tol));
      EXPECT_TRUE(all_close(dx, edx, tol, tol));
      EXPECT_TRUE(all_close(d1, ed1, tol, tol));
      EXPECT_TRUE(all_close(d2, ed2, tol, tol));
    }
  }
}

TEST(Swiglu, ForwardAndBackwardOnStridedHalves) {
  for (DType t : {DType::Float32, DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(dtype_str(t));
    // x [M, 2K] split along the last dim: a = x[:, :K], b = x[:, K:] (row stride 2K).
    const int64_t M = 9, K = 37;
    HostTensor x(t, {M, 2 * K});
    fill_uniform(x, -4, 4);
    HostTensor a = x, b = x;
    a.sizes = {M, K};
    b.sizes = {M, K};
    nk::TensorDesc ad = a.desc(), bd = b.desc();
    bd.data = static_cast<char*>(bd.data) + K * elem_size(t);
    HostTensor out(t, {M, K}), dy(t, {M, K}), ga(t, {M, K}), gb(t, {M, K});
    fill_uniform(dy, -1, 1);
    nk::swiglu(out.desc(), ad, bd);
    nk::swiglu_backward(ga.desc(), gb.desc(), dy.desc(), ad, bd);
    HostTensor eout(DType::Float64, {M, K}), ega(DType::Float64, {M, K}),
        egb(DType::Float64, {M, K});
    for (int64_t r = 0; r < M; ++r) {
      for (int64_t i = 0; i < K; ++i) {
        const double av = x.get(r * 2 * K + i), bv = x.get(r * 2 * K + K + i);
        const double g = dy.get(r * K + i);
        const double s = 1 / (1 + std::exp(-av));
        eout.set(r * K + i, av * s * bv);
        ega.set(r * K + i, g * bv * s * (1 + av * (1 - s)));
        egb.set(r * K + i, g * av * s);
      }
    }
    const double tol = tol_of(t);
    EXPECT_TRUE(all_close(out, eout, tol, tol));
    EXPECT_TRUE(all_close(ga, ega, tol, tol));
    EXPECT_TRUE(all_close(gb, egb, tol, tol));
  }
}

}  // namespace
}  // namespace ktest
