// GradScaler's kernels: the non-finite check with unscaling over a list of gradients, and the
// dynamic loss scale's update. Both run on the stream after the backward pass with no host
// round trip: the scale, inv_scale, found_inf and the growth tracker stay device scalars.
#include <cmath>
#include <vector>

#include "dtype_traits.h"
#include "npu/kernels/optimizers.h"
#include "npu/kernels/thread_pool.h"

namespace npu::kernels {
namespace {

// Chunks of the list's elements, so that one big gradient and many small ones both spread
// over the pool.
struct Chunk {
  int64_t item, begin, end;
};
constexpr int64_t kChunk = 1 << 15;

std::vector<Chunk> chunks_of(const TensorDesc* descs, int64_t count) {
  std::vector<Chunk> chunks;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t n = descs[i].numel();
    for (int64_t b = 0; b < n; b += kChunk) chunks.push_back({i, b, std::min(n, b + kChunk)});
  }
  return chunks;
}

// Returns whether g[begin, end) held an inf or NaN; multiplies it by inv_scale unless that is 1.
template <class S>
bool check_and_unscale(S* g, int64_t begin, int64_t end, float inv_scale) {
  using C = detail::compute_t<S>;  // float for 16-bit grads, double for double
  const C scale = static_cast<C>(inv_scale);
  bool non_finite = false;
  if (inv_scale == 1.0f) {
    for (int64_t i = begin; i < end; ++i) non_finite |= !std::isfinite(detail::cast_value<C>(g[i]));
    return non_finite;
  }
  for (int64_t i = begin; i < end; ++i) {
    const C v = detail::cast_value<C>(g[i]);
    non_finite |= !std::isfinite(v);
    g[i] = detail::cast_value<S>(v * scale);
  }
  return non_finite;
}

}  // namespace

void amp_non_finite_check_and_unscale(const TensorDesc* grads, int64_t count, float* found_inf,
                                      const float* inv_scale) {
  const float scale = *inv_scale;
  const std::vector<Chunk> chunks = chunks_of(grads, count);
  // One flag per chunk, merged at the end: workers never write to the same cache line twice.
  std::vector<unsigned char> flags(chunks.size(), 0);
  parallel_for(0, static_cast<int64_t>(chunks.size()), chunks.size() <= 2 ? 2 : 1,
               [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const Chunk& ch = chunks[c];
      const TensorDesc& g = grads[ch.item];
      NPU_KERNEL_ASSERT(g.ndim <= 1 && g.is_contiguous(), "unscale takes dense 1-D spans");
      flags[c] = detail::dispatch_storage(g.dtype, [&]<class S>() -> bool {
        if constexpr (std::is_floating_point_v<detail::compute_t<S>>) {
          return check_and_unscale(static_cast<S*>(g.data), ch.begin, ch.end, scale);
        } else {
          NPU_KERNEL_ASSERT(false, "unscale of a non-floating gradient");
        }
      });
    }
  });
  for (unsigned char f : flags) {
    if (f) {
      *found_inf = 1.0f;
      break;
    }
  }
}

void amp_update_scale(float* scale, int32_t* growth_tracker, const float* found_inf,
                      double growth_factor, double backoff_factor, int64_t growth_interval) {
  if (*found_inf != 0.0f) {
    *scale = static_cast<float>(*scale * backoff_factor);
    *growth_tracker = 0;
    return;
  }
  const int32_t successful = *growth_tracker + 1;
  if (successful == growth_interval) {
    const float grown = static_cast<float>(*scale * growth_factor);
    if (std::isfinite(grown)) *scale = grown;
    *growth_tracker = 0;
  } else {
    *growth_tracker = successful;
  }
}

}  // namespace npu::kernels
