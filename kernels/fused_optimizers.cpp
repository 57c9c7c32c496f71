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
//  - Adam runs 8 elements at a time on AVX2 (the library's baseline) for float and 16-bit
//    parameters, with the same operations in the same order as the scalar loop that finishes
//    each chunk: the step is memory-bound, so the loop must keep up with the memory.
#include <immintrin.h>

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

// Eight values of a float-like storage type as floats, and back (round to nearest even, as
// cast_value does; bfloat16 NaN becomes the canonical 0x7fc0 as in float_to_bf16).
template <class S>
inline __m256 load8(const S* p) {
  if constexpr (std::is_same_v<S, float>) {
    return _mm256_loadu_ps(p);
  } else if constexpr (std::is_same_v<S, detail::Half>) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
}
template <class S>
inline void store8(S* p, __m256 v) {
  if constexpr (std::is_same_v<S, float>) {
    _mm256_storeu_ps(p, v);
  } else if constexpr (std::is_same_v<S, detail::Half>) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  } else {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc0), _mm256_castps_si256(nan));
    // 32 -> 16 bits: packus works within 128-bit lanes; gather the two halves' low quads.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
}

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
  int64_t i = ch.begin;
  if constexpr (std::is_same_v<C, float>) {
    const __m256 v_scale = _mm256_set1_ps(grad_scale ? *grad_scale : 1.0f);
    const __m256 v_sign = _mm256_set1_ps(-0.0f);
    const __m256 v_w = _mm256_set1_ps(w), v_1mw = _mm256_set1_ps(C(1) - w);
    const __m256 v_beta2 = _mm256_set1_ps(beta2), v_1mb2 = _mm256_set1_ps(one_minus_beta2);
    const __m256 v_wd = _mm256_set1_ps(wd), v_decay = _mm256_set1_ps(decay_factor);
    const __m256 v_eps = _mm256_set1_ps(eps), v_step = _mm256_set1_ps(step_size);
    const __m256 v_bc2 = _mm256_set1_ps(bc2_sqrt);
    for (; i + 8 <= ch.end; i += 8) {
      __m256 grad = load8(g + i);
      if (grad_scale) {
        grad = _mm256_div_ps(grad, v_scale);
        store8(g + i, grad);
      }
      if (o.maximize) grad = _mm256_xor_ps(grad, v_sign);
      __m256 param = load8(p + i);
      if (decay) {
        if (o.decoupled_weight_decay) param = _mm256_mul_ps(param, v_decay);
        else grad = _mm256_add_ps(grad, _mm256_mul_ps(param, v_wd));
      }
      const __m256 m0 = load8(m + i);
      const __m256 diff = _mm256_sub_ps(grad, m0);
      const __m256 exp_avg = w_small ? _mm256_add_ps(m0, _mm256_mul_ps(v_w, diff))
                                     : _mm256_sub_ps(grad, _mm256_mul_ps(diff, v_1mw));
      const __m256 exp_avg_sq = _mm256_add_ps(_mm256_mul_ps(load8(v + i), v_beta2),
                                              _mm256_mul_ps(_mm256_mul_ps(v_1mb2, grad), grad));
      store8(m + i, exp_avg);
      store8(v + i, exp_avg_sq);
      __m256 second = exp_avg_sq;
      if (vmax) {
        second = _mm256_max_ps(exp_avg_sq, load8(vmax + i));  // std::max(vmax, v), NaN as it
        store8(vmax + i, second);
      }
      const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(second), v_bc2), v_eps);
      store8(p + i, _mm256_sub_ps(param, _mm256_div_ps(_mm256_mul_ps(v_step, exp_avg), denom)));
    }
  }
  for (; i < ch.end; ++i) {
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
