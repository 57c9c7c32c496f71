// GradScaler's kernels and the fused optimizers against naive double-precision references
// written from PyTorch's documented update rules, for every parameter dtype, with lists of
// small and multi-chunk tensors, grad_scale / found_inf, amsgrad, maximize, weight decay,
// momentum, nesterov.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernel_test_util.h"
#include "npu/kernels/optimizers.h"

namespace ktest {
namespace {

namespace nk = npu::kernels;

const DType kFloatTypes[] = {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64};
const int64_t kSizes[] = {1, 37, 70001};  // 70001: three chunks of the kernels' 32K

TensorDesc span(HostTensor& t) {
  return TensorDesc::make(t.buf.data(), t.dtype, {t.numel()});
}

// Tolerance of one stored value of dtype t against a double reference.
double tol(DType t, double ref) {
  const double rtol = t == DType::Float64 ? 1e-12 : default_rtol(t);
  return rtol * std::fabs(ref) + rtol * 1e-3;
}

// ---- GradScaler --------------------------------------------------------------------------

TEST(AmpUnscale, MultipliesEveryTensorAndFlagsInfAndNan) {
  for (DType t : kFloatTypes) {
    for (double bad : {0.0, double(INFINITY), double(-INFINITY), double(NAN)}) {
      SCOPED_TRACE(::testing::Message() << dtype_str(t) << " bad=" << bad);
      std::vector<HostTensor> grads;
      for (int64_t n : kSizes) {
        grads.emplace_back(t, std::vector<int64_t>{n});
        fill_uniform(grads.back(), -100, 100);
      }
      if (bad != 0.0) grads[2].set(50000, bad);  // in the second chunk of the big one
      std::vector<HostTensor> before = grads;
      std::vector<TensorDesc> descs;
      for (auto& g : grads) descs.push_back(span(g));
      float found_inf = 0.0f, inv_scale = 0.125f;
      nk::amp_non_finite_check_and_unscale(descs.data(), descs.size(), &found_inf, &inv_scale);
      EXPECT_EQ(found_inf, bad != 0.0 ? 1.0f : 0.0f);
      for (size_t i = 0; i < grads.size(); ++i) {
        for (int64_t j = 0; j < grads[i].numel(); ++j) {
          const double want = round_to(t, before[i].get(j) * 0.125);  // a power of two: exact but
                                                                      // for subnormal results
          const double got = grads[i].get(j);
          if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(got));
          } else {
            ASSERT_EQ(got, want) << "tensor " << i << " element " << j;
          }
        }
      }
    }
  }
}

TEST(AmpUnscale, InvScaleOneOnlyChecksAndFoundInfIsNeverCleared) {
  HostTensor g(DType::Float32, {1000});
  fill_uniform(g, -1, 1);
  g.set(3, 1e-3);
  HostTensor before = g;
  TensorDesc d = span(g);
  float found_inf = 1.0f, one = 1.0f, third = 1.0f / 3;
  nk::amp_non_finite_check_and_unscale(&d, 1, &found_inf, &one);
  EXPECT_EQ(found_inf, 1.0f);  // finite grads leave an earlier 1 alone
  EXPECT_EQ(std::memcmp(g.buf.data(), before.buf.data(), g.buf.size()), 0);
  found_inf = 0.0f;
  nk::amp_non_finite_check_and_unscale(&d, 1, &found_inf, &third);
  EXPECT_EQ(found_inf, 0.0f);
  EXPECT_EQ(g.get(3), double(float(float(1e-3) * third)));  // multiplied in float
}

TEST(AmpUpdateScale, GrowsEveryIntervalBacksOffOnInfKeepsFiniteScale) {
  float scale = 1024.0f, found = 0.0f;
  int32_t tracker = 0;
  // Three clean steps with interval 3: growth on the third.
  for (int i = 0; i < 2; ++i) nk::amp_update_scale(&scale, &tracker, &found, 2.0, 0.5, 3);
  EXPECT_EQ(scale, 1024.0f);
  EXPECT_EQ(tracker, 2);
  nk::amp_update_scale(&scale, &tracker, &found, 2.0, 0.5, 3);
  EXPECT_EQ(scale, 2048.0f);
  EXPECT_EQ(tracker, 0);
  // An inf: backoff, tracker restarts.
  nk::amp_update_scale(&scale, &tracker, &found, 2.0, 0.5, 3);
  found = 1.0f;
  nk::amp_update_scale(&scale, &tracker, &found, 2.0, 0.25, 3);
  EXPECT_EQ(scale, 512.0f);
  EXPECT_EQ(tracker, 0);
  // Growth past float's range is refused, but the tracker still restarts.
  scale = 3e38f, found = 0.0f, tracker = 0;
  nk::amp_update_scale(&scale, &tracker, &found, 2.0, 0.5, 1);
  EXPECT_EQ(scale, 3e38f);
  EXPECT_EQ(tracker, 0);
}

// ---- fused Adam / AdamW ------------------------------------------------------------------

struct AdamCase {
  bool adamw, amsgrad, maximize;
  double weight_decay;
  bool scaled;  // grads carry a loss scale of 64 that the kernel divides out
};

void check_adam(DType t, const AdamCase& c) {
  SCOPED_TRACE(::testing::Message() << dtype_str(t) << " adamw=" << c.adamw << " amsgrad="
                                    << c.amsgrad << " maximize=" << c.maximize << " wd="
                                    << c.weight_decay << " scaled=" << c.scaled);
  const double lr = 0.05, beta1 = 0.8, beta2 = 0.95, eps = 1e-6;
  const float grad_scale = 64.0f;
  struct P {
    HostTensor param, grad, m, v, vmax;
    float step;
  };
  std::vector<P> ps;
  float step = 2.0f;
  for (int64_t n : kSizes) {
    P p{HostTensor(t, {n}), HostTensor(t, {n}), HostTensor(t, {n}), HostTensor(t, {n}),
        HostTensor(t, {n}), step++};
    fill_uniform(p.param, -1, 1);
    fill_uniform(p.grad, -1, 1);
    fill_uniform(p.m, -0.1, 0.1);
    fill_uniform(p.v, 0, 0.1);
    fill_uniform(p.vmax, 0, 0.1);
    if (c.scaled) {
      for (int64_t i = 0; i < n; ++i) p.grad.set(i, p.grad.get(i) * grad_scale);
    }
    ps.push_back(std::move(p));
  }
  std::vector<P> before = ps;
  std::vector<nk::AdamItem> items;
  for (auto& p : ps) {
    items.push_back({span(p.param), span(p.grad), span(p.m), span(p.v), span(p.vmax), &p.step});
  }
  nk::AdamOptions o;
  o.lr = lr, o.beta1 = beta1, o.beta2 = beta2, o.eps = eps, o.weight_decay = c.weight_decay;
  o.amsgrad = c.amsgrad, o.maximize = c.maximize, o.decoupled_weight_decay = c.adamw;
  float found_inf = 0.0f;
  o.found_inf = &found_inf;
  if (c.scaled) o.grad_scale = &grad_scale;
  nk::fused_adam(items.data(), items.size(), o);

  for (size_t k = 0; k < ps.size(); ++k) {
    const P& b = before[k];
    const double s = b.step;
    const double bc1 = 1 - std::pow(beta1, s), bc2 = 1 - std::pow(beta2, s);
    int bad = 0;
    for (int64_t i = 0; i < b.param.numel(); ++i) {
      double g = b.grad.get(i) / (c.scaled ? grad_scale : 1.0);
      // The kernel writes the unscaled gradient back (as PyTorch's fused kernels do).
      const bool grad_ok = !c.scaled || std::fabs(ps[k].grad.get(i) - g) <= tol(t, g);
      if (c.maximize) g = -g;
      double param = b.param.get(i);
      if (c.weight_decay != 0) {
        if (c.adamw) param -= lr * c.weight_decay * param;
        else g += c.weight_decay * param;
      }
      const double m = beta1 * b.m.get(i) + (1 - beta1) * g;
      const double v = beta2 * b.v.get(i) + (1 - beta2) * g * g;
      const double second = c.amsgrad ? std::max(b.vmax.get(i), v) : v;
      const double want = param - lr / bc1 * m / (std::sqrt(second) / std::sqrt(bc2) + eps);
      // The step moves the parameter by about lr (0.05): a tolerance of one 16-bit rounding
      // of the result still tells a wrong update apart.
      if (!grad_ok ||
          std::fabs(ps[k].param.get(i) - want) > tol(t, want) + (t == DType::Float32 ? 1e-6 : 0) ||
          std::fabs(ps[k].m.get(i) - m) > tol(t, m) ||
          std::fabs(ps[k].v.get(i) - v) > tol(t, v) + 1e-12 ||
          (c.amsgrad && std::fabs(ps[k].vmax.get(i) - second) > tol(t, second) + 1e-12)) {
        if (bad++ < 3) {
          ADD_FAILURE() << "param " << k << "[" << i << "]: " << ps[k].param.get(i) << " want "
                        << want << ", m " << ps[k].m.get(i) << " want " << m << ", v "
                        << ps[k].v.get(i) << " want " << v;
        }
      }
    }
  }
}

TEST(FusedAdam, MatchesTheUpdateRuleForEveryDtypeAndOption) {
  const AdamCase cases[] = {{false, false, false, 0.0, false}, {true, false, false, 0.1, false},
                            {false, true, false, 0.1, true},   {true, true, true, 0.01, true},
                            {false, false, true, 0.0, true}};
  for (DType t : kFloatTypes) {
    for (const AdamCase& c : cases) check_adam(t, c);
  }
}

TEST(FusedAdam, FoundInfSkipsTheWholeStepAndTensorLr) {
  HostTensor p(DType::Float32, {100}), g(DType::Float32, {100}), m(DType::Float32, {100}),
      v(DType::Float32, {100});
  fill_uniform(p, -1, 1);
  fill_uniform(g, -1, 1);
  fill_uniform(m, -1, 1);
  fill_uniform(v, 0, 1);
  HostTensor p0 = p, g0 = g, m0 = m, v0 = v;
  float step = 1.0f, found_inf = 1.0f, scale = 4.0f;
  nk::AdamItem item{span(p), span(g), span(m), span(v), {}, &step};
  nk::AdamOptions o;
  o.found_inf = &found_inf;
  o.grad_scale = &scale;
  nk::fused_adam(&item, 1, o);
  for (auto [a, b] : {std::pair{&p, &p0}, {&g, &g0}, {&m, &m0}, {&v, &v0}}) {
    EXPECT_EQ(std::memcmp(a->buf.data(), b->buf.data(), a->buf.size()), 0);
  }
  // lr from a device scalar (double here): the first step of Adam moves by lr * sign(g).
  found_inf = 0.0f;
  const double lr = 0.5;
  o.lr = 123.0;  // ignored in favour of the tensor
  o.lr_tensor = &lr;
  o.lr_dtype = DType::Float64;
  o.grad_scale = nullptr;
  std::memset(m.buf.data(), 0, m.buf.size());
  std::memset(v.buf.data(), 0, v.buf.size());
  nk::fused_adam(&item, 1, o);
  for (int i = 0; i < 100; ++i) {
    EXPECT_NEAR(p.get(i), p0.get(i) - 0.5 * (g0.get(i) > 0 ? 1 : -1), 1e-5) << i;
  }
}

// ---- fused SGD ---------------------------------------------------------------------------

struct SgdCase {
  double momentum, dampening, weight_decay;
  bool nesterov, maximize, first, scaled;
};

void check_sgd(DType t, const SgdCase& c) {
  SCOPED_TRACE(::testing::Message() << dtype_str(t) << " momentum=" << c.momentum << " damp="
                                    << c.dampening << " wd=" << c.weight_decay << " nesterov="
                                    << c.nesterov << " maximize=" << c.maximize << " first="
                                    << c.first << " scaled=" << c.scaled);
  const double lr = 0.1;
  const float grad_scale = 8.0f;
  std::vector<HostTensor> params, grads, bufs;
  for (int64_t n : kSizes) {
    params.emplace_back(t, std::vector<int64_t>{n});
    grads.emplace_back(t, std::vector<int64_t>{n});
    bufs.emplace_back(t, std::vector<int64_t>{n});
    fill_uniform(params.back(), -1, 1);
    fill_uniform(grads.back(), -1, 1);
    fill_uniform(bufs.back(), -1, 1);
  }
  auto p0 = params, g0 = grads, b0 = bufs;
  std::vector<nk::SgdItem> items;
  for (size_t k = 0; k < params.size(); ++k) {
    items.push_back({span(params[k]), span(grads[k]), span(bufs[k])});
  }
  nk::SgdOptions o;
  o.lr = lr, o.momentum = c.momentum, o.dampening = c.dampening;
  o.weight_decay = c.weight_decay, o.nesterov = c.nesterov, o.maximize = c.maximize;
  o.is_first_step = c.first;
  if (c.scaled) o.grad_scale = &grad_scale;
  nk::fused_sgd(items.data(), items.size(), o);
  for (size_t k = 0; k < params.size(); ++k) {
    int bad = 0;
    for (int64_t i = 0; i < params[k].numel(); ++i) {
      double g = g0[k].get(i) / (c.scaled ? grad_scale : 1.0);
      if (c.maximize) g = -g;
      g += c.weight_decay * p0[k].get(i);
      double buf = b0[k].get(i);
      if (c.momentum != 0) {
        buf = c.first ? g : c.momentum * buf + (1 - c.dampening) * g;
        g = c.nesterov ? g + c.momentum * buf : buf;
      }
      const double want = p0[k].get(i) - lr * g;
      if (std::fabs(params[k].get(i) - want) > tol(t, want) + (t == DType::Float32 ? 1e-6 : 0) ||
          std::fabs(bufs[k].get(i) - buf) > tol(t, buf) + 1e-6) {
        if (bad++ < 3) {
          ADD_FAILURE() << "param " << k << "[" << i << "] = " << params[k].get(i) << " want "
                        << want << ", buf " << bufs[k].get(i) << " want " << buf;
        }
      }
    }
  }
}

TEST(FusedSgd, MatchesTheUpdateRuleForEveryDtypeAndOption) {
  const SgdCase cases[] = {{0, 0, 0, false, false, false, false},
                           {0.9, 0, 0.01, false, false, true, false},
                           {0.9, 0.1, 0.01, false, true, false, true},
                           {0.9, 0, 0, true, false, false, true},
                           {0, 0, 0.1, false, true, false, true}};
  for (DType t : kFloatTypes) {
    for (const SgdCase& c : cases) check_sgd(t, c);
  }
}

TEST(FusedSgd, FoundInfSkipsTheStep) {
  HostTensor p(DType::BFloat16, {10}), g(DType::BFloat16, {10});
  fill_uniform(p, -1, 1);
  fill_uniform(g, -1, 1);
  HostTensor p0 = p;
  float found_inf = 1.0f;
  nk::SgdItem item{span(p), span(g), {}};
  nk::SgdOptions o;
  o.lr = 1.0;
  o.found_inf = &found_inf;
  nk::fused_sgd(&item, 1, o);
  EXPECT_EQ(std::memcmp(p.buf.data(), p0.buf.data(), p.buf.size()), 0);
}

}  // namespace
}  // namespace ktest
