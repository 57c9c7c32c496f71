// Fused Adam / AdamW / SGD: one call updates every parameter of a list, reading each element
// of param, grad and state once and writing it once (the foreach path makes a pass per op).
//
// How it works:
//  - The scalars are fixed once per call: found_inf (a skipped step returns at once), the
//    loss scale, lr (a number or a device tensor), and per parameter its bias corrections
//    from its step count, in double as PyTorch's kernels and torch.optim's Python do.
//  - The list's elements are cut into chunks of 32K spread over the thread pool, so one big
//    embedding and a thousand biases both keep every thread busy.
//  - Per element the math is in float (double for Float64 parameters) with one rounding per
//    stored value; the arithmetic follows PyTorch's fused kernels (grad unscaled and written
//    back, maximize, L2 or decoupled weight decay, moments, amsgrad, bias-corrected step).
#include <cmath>
#include <vector>

#include "dtype_traits.h"
#include "npu/kernels/optimizers.h"
#include "npu/kernels/thread_pool.h"

namespace npu::kernels {
namespace {

using detail::cast_value;
using detail::compute_t;

struct Chunk {
  int64_t item, begin, end;
};
constexpr int64_t kChunk = 1 << 15;

template <class Item>
std::vector<Chunk> chunks_of(const Item* items, int64_t count) {
  std::vector<Chunk> chunks;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t n = items[i].param.numel();
    for (int64_t b = 0; b < n; b += kChunk) chunks.push_back({i, b, std::min(n, b + kChunk)});
  }
  return chunks;
}

template <class F>
void for_chunks(const std::vector<Chunk>& chunks, F&& f) {
  parallel_for(0, static_cast<int64_t>(chunks.size()), chunks.size() <= 2 ? 2 : 1,
               [&](int64_t c0, int64_t c1) {
                 for (int64_t c = c0; c < c1; ++c) f(chunks[c]);
               });
}

double read_lr(double lr, const void* tensor, DType dtype) {
  if (tensor == nullptr) return lr;
  return detail::dispatch_storage(dtype, [&]<class S>() {
    return cast_value<double>(*static_cast<const S*>(tensor));
  });
}

void check_span(const TensorDesc& t, int64_t numel, const char* what) {
  NPU_KERNEL_ASSERT(t.ndim <= 1 && t.is_contiguous() && t.numel() == numel,
                    what);
}

// Per-parameter constants of an Adam step.
struct AdamStep {
  double step_size, bias_correction2_sqrt;
};

template <class S>
void adam_chunk(const AdamItem& it, const Chunk& ch, const AdamOptions& o, double lr,
                const AdamStep& k, const float* grad_scale) {
  using C = compute_t<S>;
  S* p = static_cast<S*>(it.param.data);
  S* g = static_cast<S*>(it.grad.data);
  S* m = static_cast<S*>(it.exp_avg.data);
  S* v = static_cast<S*>(it.exp_avg_sq.data);
  S* vmax = o.amsgrad ? static_cast<S*>(it.max_exp_avg_sq.data) : nullptr;
  // The constants and the order of operations of PyTorch's CPU kernel (and of torch.optim's
  // Python: exp_avg.lerp_(grad, 1 - beta1), param.mul_(1 - lr * wd), ...), so a float32
  // step matches the CPU's to the last bit in most elements.
  const C w = C(1 - o.beta1);  // the lerp weight
  const bool w_small = std::abs(w) < C(0.5);
  const C beta2 = C(o.beta2), one_minus_beta2 = C(1 - o.beta2);
  const C wd = C(o.weight_decay), decay_factor = C(1 - lr * o.weight_decay), eps = C(o.eps);
  const C step_size = C(k.step_size), bc2_sqrt = C(k.bias_correction2_sqrt);
  const bool decay = o.weight_decay != 0;
  for (int64_t i = ch.begin; i < ch.end; ++i) {
    C grad = cast_value<C>(g[i]);
    if (grad_scale) {
      grad = grad / C(*grad_scale);
      g[i] = cast_value<S>(grad);
    }
    if (o.maximize) grad = -grad;
    C param = cast_value<C>(p[i]);
    if (decay) {
      if (o.decoupled_weight_decay) param = param * decay_factor;
      else grad += param * wd;
    }
    const C m0 = cast_value<C>(m[i]);
    const C exp_avg = w_small ? m0 + w * (grad - m0) : grad - (grad - m0) * (C(1) - w);
    const C exp_avg_sq = cast_value<C>(v[i]) * beta2 + one_minus_beta2 * grad * grad;
    m[i] = cast_value<S>(exp_avg);
    v[i] = cast_value<S>(exp_avg_sq);
    C second = exp_avg_sq;
    if (vmax) {
      second = std::max(cast_value<C>(vmax[i]), exp_avg_sq);
      vmax[i] = cast_value<S>(second);
    }
    const C denom = std::sqrt(second) / bc2_sqrt + eps;
    p[i] = cast_value<S>(param - step_size * exp_avg / denom);
  }
}

template <class S>
void sgd_chunk(const SgdItem& it, const Chunk& ch, const SgdOptions& o, double lr,
               const float* grad_scale) {
  using C = compute_t<S>;
  S* p = static_cast<S*>(it.param.data);
  S* g = static_cast<S*>(it.grad.data);
  S* buf = o.momentum != 0 ? static_cast<S*>(it.momentum_buffer.data) : nullptr;
  const C wd = C(o.weight_decay), momentum = C(o.momentum), keep = C(1 - o.dampening);
  const C lr_c = C(lr);
  for (int64_t i = ch.begin; i < ch.end; ++i) {
    C grad = cast_value<C>(g[i]);
    if (grad_scale) {
      grad = grad / C(*grad_scale);
      g[i] = cast_value<S>(grad);
    }
    if (o.maximize) grad = -grad;
    const C param = cast_value<C>(p[i]);
    if (o.weight_decay != 0) grad += param * wd;
    if (buf) {
      C b = o.is_first_step ? grad : momentum * cast_value<C>(buf[i]) + keep * grad;
      buf[i] = cast_value<S>(b);
      grad = o.nesterov ? grad + momentum * b : b;
    }
    p[i] = cast_value<S>(param - lr_c * grad);
  }
}

template <class F>
void dispatch_param(DType t, F&& f) {
  switch (t) {
    case DType::Float32: return f.template operator()<float>();
    case DType::Float16: return f.template operator()<detail::Half>();
    case DType::BFloat16: return f.template operator()<detail::BFloat16>();
    case DType::Float64: return f.template operator()<double>();
    default: NPU_KERNEL_ASSERT(false, "fused optimizer on a non-floating parameter");
  }
}

}  // namespace

bool fused_optimizer_supports(DType param) { return is_floating(param); }

void fused_adam(const AdamItem* items, int64_t count, const AdamOptions& o) {
  if (o.found_inf && *o.found_inf == 1.0f) return;
  const double lr = read_lr(o.lr, o.lr_tensor, o.lr_dtype);
  std::vector<AdamStep> steps(count);
  for (int64_t i = 0; i < count; ++i) {
    const AdamItem& it = items[i];
    const int64_t n = it.param.numel();
    check_span(it.param, n, "fused_adam: param is not a dense 1-D span");
    check_span(it.grad, n, "fused_adam: grad does not match its param");
    check_span(it.exp_avg, n, "fused_adam: exp_avg does not match its param");
    check_span(it.exp_avg_sq, n, "fused_adam: exp_avg_sq does not match its param");
    if (o.amsgrad) check_span(it.max_exp_avg_sq, n, "fused_adam: max_exp_avg_sq does not match");
    const double step = *it.step;
    const double bias_correction1 = 1 - std::pow(o.beta1, step);
    const double bias_correction2 = 1 - std::pow(o.beta2, step);
    steps[i] = {lr / bias_correction1, std::sqrt(bias_correction2)};
  }
  for_chunks(chunks_of(items, count), [&](const Chunk& ch) {
    const AdamItem& it = items[ch.item];
    dispatch_param(it.param.dtype, [&]<class S>() {
      adam_chunk<S>(it, ch, o, lr, steps[ch.item], o.grad_scale);
    });
  });
}

void fused_sgd(const SgdItem* items, int64_t count, const SgdOptions& o) {
  if (o.found_inf && *o.found_inf == 1.0f) return;
  const double lr = read_lr(o.lr, o.lr_tensor, o.lr_dtype);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t n = items[i].param.numel();
    check_span(items[i].param, n, "fused_sgd: param is not a dense 1-D span");
    check_span(items[i].grad, n, "fused_sgd: grad does not match its param");
    if (o.momentum != 0) check_span(items[i].momentum_buffer, n, "fused_sgd: momentum_buffer");
  }
  for_chunks(chunks_of(items, count), [&](const Chunk& ch) {
    const SgdItem& it = items[ch.item];
    dispatch_param(it.param.dtype, [&]<class S>() { sgd_chunk<S>(it, ch, o, lr, o.grad_scale); });
  });
}

}  // namespace npu::kernels
