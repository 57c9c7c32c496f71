// nll_loss / nll_loss2d forward and backward.
//
// Every layout is seen as [N, C, S]: N samples, C classes, S spatial positions (S = 1 for
// [N, C]; N = S = 1 for [C]), so one loop serves nll_loss and nll_loss2d. The work is
// O(N * S) (one gathered element per sample), so elements are addressed through their
// strides one by one rather than staged. Sums use fixed chunks of samples added in chunk
// order, so results do not depend on the thread count.
#include "npu/kernels/loss.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "nn_common.h"
#include "npu/kernels/elementwise.h"
#include "npu/kernels/thread_pool.h"

namespace npu::kernels {
namespace detail {
namespace {

// input (or grad_input) as [N, C, S] and target (or per-sample output) as [N, S].
struct NllLayout {
  int64_t N = 1, C = 1, S = 1;
  const TensorDesc* in;

  explicit NllLayout(const TensorDesc& t) : in(&t) {
    NPU_KERNEL_ASSERT(t.ndim >= 1, "nll_loss input must have a class dimension");
    if (t.ndim == 1) {
      C = t.sizes[0];
    } else {
      N = t.sizes[0];
      C = t.sizes[1];
      for (int d = 2; d < t.ndim; ++d) S *= t.sizes[d];
    }
  }
  int64_t samples() const { return N * S; }
  // Offset of class c of sample i (= n * S + s).
  int64_t input_offset(int64_t i, int64_t c) const {
    const TensorDesc& t = *in;
    if (t.ndim == 1) return c * t.strides[0];
    const int64_t n = i / S, s = i % S;
    return n * t.strides[0] + c * t.strides[1] + flat_offset(t, 2, s);
  }
};

// Offset of sample i in a per-sample tensor: [] (one sample), [N] or [N, d1, ..., dk].
int64_t sample_offset(const TensorDesc& t, int64_t i) { return flat_offset(t, 0, i); }

[[noreturn]] void target_out_of_bounds(int64_t t) {
  throw std::out_of_range("Target " + std::to_string(t) + " is out of bounds.");
}

// The target of sample i, checked; returns false for ignore_index.
bool read_target(const TensorDesc& target, int64_t i, int64_t C, int64_t ignore_index,
                 int64_t* t) {
  *t = load_index(target.data, target.dtype, sample_offset(target, i));
  if (*t == ignore_index) return false;
  if (*t < 0 || *t >= C) target_out_of_bounds(*t);
  return true;
}

constexpr int64_t kSampleChunk = 4096;

}  // namespace
}  // namespace detail

bool nll_loss_supports(DType input) { return detail::is_nn_float(input); }

void nll_loss(const TensorDesc& output, const TensorDesc& total_weight, const TensorDesc& input,
              const TensorDesc& target, const TensorDesc* weight, LossReduction reduction,
              int64_t ignore_index) {
  using namespace detail;
  const NllLayout L(input);
  const int64_t M = L.samples();
  const std::vector<double> w = load_vector<double>(weight, L.C, 1.0);

  if (reduction == LossReduction::None && input.ndim >= 2) {
    parallel_for(0, M, kSampleChunk, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        int64_t t;
        double loss = 0;
        if (read_target(target, i, L.C, ignore_index, &t)) {
          loss = -w[t] * load_as_double(input, L.input_offset(i, t));
        }
        store_from_double(output, sample_offset(output, i), loss);
      }
    });
    store_from_double(total_weight, 0, 0.0);
    return;
  }

  // Reduced (or a single sample): per-chunk partial sums of loss and weight.
  const int64_t chunks = (M + kSampleChunk - 1) / kSampleChunk;
  std::vector<double> loss_part(static_cast<size_t>(chunks)), weight_part(loss_part.size());
  parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double ls = 0, ws = 0;
      for (int64_t i = c * kSampleChunk; i < std::min(M, (c + 1) * kSampleChunk); ++i) {
        int64_t t;
        if (!read_target(target, i, L.C, ignore_index, &t)) continue;
        ls -= w[t] * load_as_double(input, L.input_offset(i, t));
        ws += w[t];
      }
      loss_part[c] = ls;
      weight_part[c] = ws;
    }
  });
  double loss = 0, wsum = 0;
  for (int64_t c = 0; c < chunks; ++c) loss += loss_part[c], wsum += weight_part[c];
  if (reduction == LossReduction::Mean) loss /= wsum;
  store_from_double(output, 0, loss);
  store_from_double(total_weight, 0, wsum);
}

void nll_loss_backward(const TensorDesc& grad_input, const TensorDesc& grad_output,
                       const TensorDesc& target, const TensorDesc* weight,
                       LossReduction reduction, int64_t ignore_index,
                       const TensorDesc& total_weight) {
  using namespace detail;
  const NllLayout L(grad_input);
  const int64_t M = L.samples();
  const std::vector<double> w = load_vector<double>(weight, L.C, 1.0);
  fill(grad_input, 0);
  const bool per_sample = reduction == LossReduction::None && grad_input.ndim >= 2;
  double g = 0;
  if (!per_sample) {
    g = load_as_double(grad_output, 0);
    if (reduction == LossReduction::Mean) g /= load_as_double(total_weight, 0);
  }
  parallel_for(0, M, kSampleChunk, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      int64_t t;
      if (!read_target(target, i, L.C, ignore_index, &t)) continue;
      const double gi = per_sample ? load_as_double(grad_output, sample_offset(grad_output, i)) : g;
      store_from_double(grad_input, L.input_offset(i, t), -w[t] * gi);
    }
  });
}

}  // namespace npu::kernels
