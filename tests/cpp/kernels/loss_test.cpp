// nll_loss / nll_loss2d forward and backward against a loop over samples written here:
// every reduction, with and without class weights, ignore_index, Int32 / Int64 targets,
// [C], [N, C] and [N, C, H, W] inputs, transposed (non-contiguous) inputs, 16-bit dtypes,
// empty batches, all-ignored means and out-of-range targets.
#include <gtest/gtest.h>

#include <stdexcept>

#include "kernel_test_util.h"
#include "npu/kernels/loss.h"

namespace ktest {
namespace {

namespace nk = npu::kernels;
using nk::LossReduction;

struct NllCase {
  std::vector<int64_t> input_sizes;  // [C], [N, C] or [N, C, d...]
  DType dtype = DType::Float32;
  DType target_dtype = DType::Int64;
  bool weighted = false;
  LossReduction reduction = LossReduction::Mean;
  int64_t ignore_index = -100;
  Layout layout = Layout::Contiguous;
};

// Target shape: input's shape without the class dimension.
std::vector<int64_t> target_shape(const std::vector<int64_t>& in) {
  if (in.size() == 1) return {};
  std::vector<int64_t> t = {in[0]};
  t.insert(t.end(), in.begin() + 2, in.end());
  return t;
}

// Flat row-major index of (sample i, class c) in the input.
int64_t input_index(const std::vector<int64_t>& in, int64_t i, int64_t c) {
  if (in.size() == 1) return c;
  int64_t S = 1;
  for (size_t d = 2; d < in.size(); ++d) S *= in[d];
  return ((i / S) * in[1] + c) * S + i % S;
}

void check_nll(const NllCase& k) {
  SCOPED_TRACE(::testing::Message() << "ndim " << k.input_sizes.size() << " " << dtype_str(k.dtype)
                                    << " target " << dtype_str(k.target_dtype) << " weighted "
                                    << k.weighted << " reduction " << int(k.reduction)
                                    << " ignore " << k.ignore_index);
  const auto& in = k.input_sizes;
  const int64_t C = in.size() == 1 ? in[0] : in[1];
  HostTensor x(k.dtype, in, k.layout), target(k.target_dtype, target_shape(in)),
      w(k.dtype, {C});
  fill_uniform(x, -3, 0);
  fill_uniform(w, 0.5, 2);
  const int64_t M = target.numel();
  for (int64_t i = 0; i < M; ++i) {
    // About one target in five is ignore_index when it is a valid class or -100.
    int64_t t = static_cast<int64_t>(rng()() % C);
    if (rng()() % 5 == 0) t = k.ignore_index;
    target.set_int(i, t);
  }
  const bool per_sample = k.reduction == LossReduction::None && in.size() >= 2;
  HostTensor out(k.dtype, per_sample ? target.sizes : std::vector<int64_t>{}),
      total(k.dtype, {}), eout = out;
  TensorDesc wd = w.desc();
  nk::nll_loss(out.desc(), total.desc(), x.desc(), target.desc(), k.weighted ? &wd : nullptr,
               k.reduction, k.ignore_index);

  double sum = 0, wsum = 0;
  for (int64_t i = 0; i < M; ++i) {
    int64_t t = target.get_int(i);
    double l = 0, wt = 0;
    if (t != k.ignore_index) {
      wt = k.weighted ? w.get(t) : 1.0;
      l = -wt * x.get(input_index(in, i, t));
    }
    if (per_sample) eout.set(i, l);
    sum += l;
    wsum += wt;
  }
  if (!per_sample) eout.set(0, k.reduction == LossReduction::Mean ? sum / wsum : sum);
  HostTensor etotal(k.dtype, {});
  etotal.set(0, per_sample ? 0.0 : wsum);
  const double tol = std::max(1e-6, default_rtol(k.dtype));
  EXPECT_TRUE(all_close(out, eout, tol, tol));
  EXPECT_TRUE(all_close(total, etotal, tol, tol));

  // Backward from a random upstream gradient.
  HostTensor go(k.dtype, out.sizes), gi(k.dtype, in, k.layout), egi(k.dtype, in);
  fill_uniform(go, -1, 1);
  fill_uniform(gi, 5, 6);  // must be overwritten
  nk::nll_loss_backward(gi.desc(), go.desc(), target.desc(), k.weighted ? &wd : nullptr,
                        k.reduction, k.ignore_index, total.desc());
  for (int64_t i = 0; i < M; ++i) {
    int64_t t = target.get_int(i);
    if (t == k.ignore_index) continue;
    double g = per_sample ? go.get(i) : go.get(0);
    if (k.reduction == LossReduction::Mean) g /= total.get(0);
    egi.set(input_index(in, i, t), -(k.weighted ? w.get(t) : 1.0) * g);
  }
  EXPECT_TRUE(all_close(gi, egi, tol, tol));
}

TEST(NllLoss, EveryReductionWeightAndTargetDtype) {
  for (LossReduction r : {LossReduction::None, LossReduction::Mean, LossReduction::Sum}) {
    for (bool weighted : {false, true}) {
      for (DType td : {DType::Int64, DType::Int32}) {
        for (DType dt : {DType::Float32, DType::Float64}) {
          NllCase k;
          k.input_sizes = {37, 11};
          k.dtype = dt, k.target_dtype = td, k.weighted = weighted, k.reduction = r;
          check_nll(k);
          k.ignore_index = 3;  // a valid class index being ignored
          check_nll(k);
        }
      }
    }
  }
}

TEST(NllLoss, SingleSampleSpatialTransposedAndHalf) {
  for (LossReduction r : {LossReduction::None, LossReduction::Mean, LossReduction::Sum}) {
    NllCase k;
    k.reduction = r;
    k.weighted = true;
    k.input_sizes = {9};  // [C] with a 0-dim target
    check_nll(k);
    k.input_sizes = {3, 5, 4, 6};  // nll_loss2d
    check_nll(k);
    k.input_sizes = {2, 4, 3};  // one spatial dim
    k.layout = Layout::Transposed;
    check_nll(k);
    k.input_sizes = {20, 7};
    check_nll(k);
    k.layout = Layout::Contiguous;
    k.dtype = DType::Float16;
    check_nll(k);
    k.dtype = DType::BFloat16;
    k.input_sizes = {2, 3, 5, 5};
    check_nll(k);
  }
}

TEST(NllLoss, LargeBatchUsesManyChunks) {
  NllCase k;
  k.input_sizes = {20000, 5};
  k.weighted = true;
  check_nll(k);
  k.reduction = LossReduction::None;
  check_nll(k);
}

TEST(NllLoss, EmptyBatchAndAllIgnored) {
  HostTensor x(DType::Float32, {0, 4}), t(DType::Int64, {0}), out(DType::Float32, {}),
      total(DType::Float32, {});
  nk::nll_loss(out.desc(), total.desc(), x.desc(), t.desc(), nullptr, LossReduction::Mean, -100);
  EXPECT_TRUE(std::isnan(out.get(0)));
  EXPECT_EQ(total.get(0), 0);
  nk::nll_loss(out.desc(), total.desc(), x.desc(), t.desc(), nullptr, LossReduction::Sum, -100);
  EXPECT_EQ(out.get(0), 0);

  HostTensor x2(DType::Float32, {3, 4}), t2(DType::Int64, {3});
  fill_uniform(x2, -1, 0);
  for (int i = 0; i < 3; ++i) t2.set_int(i, -100);
  nk::nll_loss(out.desc(), total.desc(), x2.desc(), t2.desc(), nullptr, LossReduction::Mean,
               -100);
  EXPECT_TRUE(std::isnan(out.get(0)));
  EXPECT_EQ(total.get(0), 0);
}

TEST(NllLoss, OutOfRangeTargetThrowsWithAtenMessage) {
  HostTensor x(DType::Float32, {4, 5}), t(DType::Int64, {4}), out(DType::Float32, {}),
      total(DType::Float32, {}), gi(DType::Float32, {4, 5});
  for (int i = 0; i < 4; ++i) t.set_int(i, i);
  t.set_int(2, 7);
  for (LossReduction r : {LossReduction::None, LossReduction::Mean}) {
    HostTensor o(DType::Float32, r == LossReduction::None ? std::vector<int64_t>{4}
                                                          : std::vector<int64_t>{});
    try {
      nk::nll_loss(o.desc(), total.desc(), x.desc(), t.desc(), nullptr, r, -100);
      ADD_FAILURE() << "no exception";
    } catch (const std::out_of_range& e) {
      EXPECT_STREQ(e.what(), "Target 7 is out of bounds.");
    }
  }
  t.set_int(2, -1);  // negative and not ignore_index
  EXPECT_THROW(nk::nll_loss_backward(gi.desc(), out.desc(), t.desc(), nullptr,
                                     LossReduction::Sum, -100, total.desc()),
               std::out_of_range);
  EXPECT_TRUE(nk::nll_loss_supports(DType::BFloat16));
  EXPECT_FALSE(nk::nll_loss_supports(DType::Int64));
}

}  // namespace
}  // namespace ktest
