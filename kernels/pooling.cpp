// max / avg / adaptive-avg 2-D pooling and their backward passes.
//
// Every op works plane by plane: the last two dims form a row of Rows (rows.h), so a plane
// is read in place when it is contiguous in the compute type and staged otherwise, and
// planes are independent tasks. Backward passes scatter into a zeroed plane buffer of the
// compute type (gradients from overlapping windows add up there) and store it once.
#include "npu/kernels/pooling.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "nn_common.h"
#include "npu/kernels/thread_pool.h"

namespace npu::kernels {
namespace detail {
namespace {

struct Planes {
  int64_t H, W;  // spatial size of this tensor
  Rows rows;
  explicit Planes(const TensorDesc& t)
      : H(t.sizes[t.ndim - 2]), W(t.sizes[t.ndim - 1]), rows(t, 2) {
    NPU_KERNEL_ASSERT(t.ndim >= 3, "pooling takes [N, C, H, W] or [C, H, W]");
  }
  int64_t count() const { return rows.M(); }
};

// Runs fn(plane, in_plane, out_plane) for every plane: `in` loaded (or in place), `out` a
// buffer of `out`'s plane size that is stored afterwards (or written in place).
template <class T, class F>
void for_each_plane(const Planes& out, const Planes& in, int64_t cost_per_plane, F&& fn) {
  const int64_t P = out.count();
  if (P == 0 || out.H * out.W == 0) return;
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(cost_per_plane, 1));
  parallel_for(0, P, grain, [&](int64_t p0, int64_t p1) {
    std::vector<T> ibuf(static_cast<size_t>(in.H * in.W)), obuf(static_cast<size_t>(out.H * out.W));
    for (int64_t p = p0; p < p1; ++p) {
      const T* x = in.rows.template direct<T>(p);
      if (!x && in.H * in.W > 0) {
        in.rows.load(p, ibuf.data());
        x = ibuf.data();
      }
      T* y = out.rows.template direct<T>(p);
      T* dst = y ? y : obuf.data();
      fn(p, x, dst);
      if (!y) out.rows.store(p, dst);
    }
  });
}

// Divisor and clipped bounds of avg_pool window (oh, ow), as ATen defines them.
struct AvgWindow {
  int64_t h0, h1, w0, w1;
  double divisor;
};
AvgWindow avg_window(int64_t oh, int64_t ow, int64_t H, int64_t W, const Pool2dParams& p,
                     bool count_include_pad, int64_t divisor_override) {
  int64_t h0 = oh * p.stride[0] - p.padding[0], w0 = ow * p.stride[1] - p.padding[1];
  int64_t h1 = std::min(h0 + p.kernel[0], H + p.padding[0]);
  int64_t w1 = std::min(w0 + p.kernel[1], W + p.padding[1]);
  const int64_t padded = (h1 - h0) * (w1 - w0);
  h0 = std::max<int64_t>(h0, 0), w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, H), w1 = std::min(w1, W);
  double div = divisor_override > 0 ? double(divisor_override)
               : count_include_pad  ? double(padded)
                                    : double((h1 - h0) * (w1 - w0));
  return {h0, h1, w0, w1, div};
}

// max_pool2d over float planes, outputs [ow_lo, ow_hi) of one row (windows inside the input
// along w; rows outside it are skipped as in the scalar loop), 8 at a time: the same visiting
// order (kh, then kw), the same rule (take a later value if greater or NaN, so a NaN wins and
// the last NaN's index is kept). Returns the end of the columns it did (ow_lo: none); the
// scalar loop does the others.
// Lanes where v beats best, or is NaN (which then stays), take v and its flat offset `at`: the
// scalar loop's comparison, 8 windows at a time.
inline void take_max8(__m256 v, __m256i at, __m256* best, __m256i* bi) {
  const __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, *best, _CMP_GT_OQ),
                                   _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  *best = _mm256_blendv_ps(*best, v, take);
  *bi = _mm256_castps_si256(
      _mm256_blendv_ps(_mm256_castsi256_ps(*bi), _mm256_castsi256_ps(at), take));
}

// 8 maxima and their offsets, widened to int64 indices.
inline void store_max8(__m256 best, __m256i bi, float* y, int64_t* idx) {
  _mm256_storeu_ps(y, best);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(idx),
                      _mm256_cvtepi32_epi64(_mm256_castsi256_si128(bi)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(idx + 4),
                      _mm256_cvtepi32_epi64(_mm256_extracti128_si256(bi, 1)));
}

int64_t max_pool_row8(const float* x, int64_t H, int64_t W, int64_t hs, const Pool2dParams& p,
                      int64_t ow_lo, int64_t ow_hi, float* y, int64_t* idx) {
  int64_t rows[64];
  int nrows = 0;
  for (int64_t kh = 0; kh < p.kernel[0] && nrows < 64; ++kh) {
    const int64_t h = hs + kh * p.dilation[0];
    if (h >= 0 && h < H) rows[nrows++] = h;
  }
  if (nrows == 0 || p.kernel[0] > 64 || ow_hi - ow_lo < 8) return ow_lo;
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  if (nrows == 2 && p.kernel[0] == 2 && p.kernel[1] == 2 && p.stride[1] == 2 &&
      p.dilation[0] == 1 && p.dilation[1] == 1) {
    // The common 2x2 / stride 2 window (CNNs' downsampling): plain loads of 16 columns of
    // both rows, split into even and odd columns, instead of four gathers.
    auto split = [](const float* q, __m256* even, __m256* odd) {
      const __m256 a = _mm256_loadu_ps(q), b = _mm256_loadu_ps(q + 8);
      *even = _mm256_castpd_ps(
          _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
      *odd = _mm256_castpd_ps(
          _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
    };
    int64_t ow = ow_lo;
    for (; ow + 8 <= ow_hi; ow += 8) {
      const int64_t ws = ow * 2 - p.padding[1];
      __m256 v[4];
      split(x + rows[0] * W + ws, &v[0], &v[1]);
      split(x + rows[1] * W + ws, &v[2], &v[3]);
      // Flat input offsets of each lane's four candidates, in visiting order.
      const __m256i e0 = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(rows[0] * W + ws)),
                                          _mm256_slli_epi32(lane, 1));
      const __m256i one = _mm256_set1_epi32(1), down = _mm256_set1_epi32(static_cast<int>(
                                                    (rows[1] - rows[0]) * W));
      const __m256i at[4] = {e0, _mm256_add_epi32(e0, one), _mm256_add_epi32(e0, down),
                             _mm256_add_epi32(_mm256_add_epi32(e0, down), one)};
      __m256 best = v[0];
      __m256i bi = at[0];
      for (int i = 1; i < 4; ++i) take_max8(v[i], at[i], &best, &bi);
      store_max8(best, bi, y + ow, idx + ow);
    }
    return ow;
  }
  const __m256i step = _mm256_set1_epi32(static_cast<int>(p.stride[1]));
  int64_t ow = ow_lo;
  for (; ow + 8 <= ow_hi; ow += 8) {
    // Flat input offset of each lane's window start in row 0 of the plane.
    const __m256i w0 = _mm256_add_epi32(
        _mm256_set1_epi32(static_cast<int>(ow * p.stride[1] - p.padding[1])),
        _mm256_mullo_epi32(lane, step));
    __m256 best = _mm256_setzero_ps();
    __m256i bi = _mm256_setzero_si256();
    bool first = true;
    for (int r = 0; r < nrows; ++r) {
      for (int64_t kw = 0; kw < p.kernel[1]; ++kw) {
        const __m256i at = _mm256_add_epi32(
            w0, _mm256_set1_epi32(static_cast<int>(rows[r] * W + kw * p.dilation[1])));
        const __m256 v = _mm256_i32gather_ps(x, at, 4);
        if (first) {
          best = v, bi = at, first = false;
          continue;
        }
        take_max8(v, at, &best, &bi);
      }
    }
    store_max8(best, bi, y + ow, idx + ow);
  }
  return ow;
}

// The 2x2 / stride 2 window without padding or dilation, values only (inference: no indices
// wanted), over a float plane: row oh of y from input rows 2 oh and 2 oh + 1 of x, with
// max_pool_row8's rule (a later value is taken if greater or NaN, in the order (0,0), (0,1),
// (1,0), (1,1)), so the values equal the indexed path's. No index vector is built or written.
void max_pool_2x2_values(const float* x, int64_t W, int64_t OH, int64_t OW, float* y) {
  auto split = [](const float* q, __m256* even, __m256* odd) {
    const __m256 a = _mm256_loadu_ps(q), b = _mm256_loadu_ps(q + 8);
    *even = _mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
    *odd = _mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
  };
  auto take = [](__m256 best, __m256 v) {
    const __m256 m = _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    return _mm256_blendv_ps(best, v, m);
  };
  for (int64_t oh = 0; oh < OH; ++oh) {
    const float* r0 = x + 2 * oh * W;
    const float* r1 = r0 + W;
    float* yr = y + oh * OW;
    int64_t ow = 0;
    for (; ow + 8 <= OW; ow += 8) {
      __m256 v0, v1, v2, v3;
      split(r0 + 2 * ow, &v0, &v1);
      split(r1 + 2 * ow, &v2, &v3);
      _mm256_storeu_ps(yr + ow, take(take(take(v0, v1), v2), v3));
    }
    for (; ow < OW; ++ow) {
      const float v[4] = {r0[2 * ow], r0[2 * ow + 1], r1[2 * ow], r1[2 * ow + 1]};
      float best = v[0];
      for (int i = 1; i < 4; ++i) {
        if (v[i] > best || std::isnan(v[i])) best = v[i];
      }
      yr[ow] = best;
    }
  }
}

int64_t adaptive_start(int64_t o, int64_t in, int64_t out) { return (o * in) / out; }
int64_t adaptive_end(int64_t o, int64_t in, int64_t out) { return ((o + 1) * in + out - 1) / out; }

}  // namespace
}  // namespace detail

bool pooling_supports(DType input) { return detail::is_nn_float(input); }

int64_t pool_output_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride,
                         int64_t dilation, bool ceil_mode) {
  const int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  // Floor division that rounds toward -inf (span may be negative for tiny inputs).
  int64_t out = (span >= 0 ? span / stride : -((-span + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

void max_pool2d(const TensorDesc& out, const TensorDesc& indices, const TensorDesc& in,
                const Pool2dParams& p) {
  using namespace detail;
  const Planes po(out), pi(in), px(indices);
  const bool want_indices = indices.data != nullptr;
  dispatch_compute_float(in.dtype, [&]<class T>() {
    const int64_t H = pi.H, W = pi.W, OH = po.H, OW = po.W;
    // Output columns whose windows lie wholly inside the input along w: [ow_lo, ow_hi).
    const int64_t span_w = (p.kernel[1] - 1) * p.dilation[1];
    const int64_t ow_lo = std::min(OW, (p.padding[1] + p.stride[1] - 1) / p.stride[1]);
    const int64_t ow_hi = std::max(ow_lo, std::min(OW, W - span_w + p.padding[1] > 0
        ? (W - 1 - span_w + p.padding[1]) / p.stride[1] + 1 : 0));
    if constexpr (std::is_same_v<T, float>) {
      if (!want_indices && p.kernel[0] == 2 && p.kernel[1] == 2 && p.stride[0] == 2 &&
          p.stride[1] == 2 && p.padding[0] == 0 && p.padding[1] == 0 && p.dilation[0] == 1 &&
          p.dilation[1] == 1 && 2 * OH <= H && 2 * OW <= W) {
        for_each_plane<T>(po, pi, OH * OW * 4, [&](int64_t, const T* x, T* y) {
          max_pool_2x2_values(x, W, OH, OW, y);
        });
        return;
      }
    }
    for_each_plane<T>(po, pi, OH * OW * p.kernel[0] * p.kernel[1], [&](int64_t plane, const T* x, T* y) {
      std::vector<int64_t> idx(static_cast<size_t>(OH * OW));
      for (int64_t oh = 0; oh < OH; ++oh) {
        const int64_t hs = oh * p.stride[0] - p.padding[0];
        int64_t vector_end = ow_lo;  // the vector loop does [ow_lo, vector_end)
        if constexpr (std::is_same_v<T, float>) {
          if (H * W < (int64_t(1) << 31)) {
            vector_end = max_pool_row8(x, H, W, hs, p, ow_lo, ow_hi, y + oh * OW,
                                       idx.data() + oh * OW);
          }
        }
        for (int64_t ow = 0; ow < OW; ++ow) {
          if (ow == ow_lo && vector_end > ow_lo) {
            ow = vector_end;
            if (ow >= OW) break;
          }
          const int64_t ws = ow * p.stride[1] - p.padding[1];
          T best = -std::numeric_limits<T>::infinity();
          int64_t bi = -1;
          for (int64_t kh = 0; kh < p.kernel[0]; ++kh) {
            const int64_t h = hs + kh * p.dilation[0];
            if (h < 0 || h >= H) continue;
            for (int64_t kw = 0; kw < p.kernel[1]; ++kw) {
              const int64_t w = ws + kw * p.dilation[1];
              if (w < 0 || w >= W) continue;
              const T v = x[h * W + w];
              if (bi < 0 || v > best || std::isnan(v)) best = v, bi = h * W + w;
            }
          }
          y[oh * OW + ow] = best;
          idx[oh * OW + ow] = bi;
        }
      }
      if (want_indices) px.rows.store(plane, idx.data());
    });
  });
}

void max_pool2d_backward(const TensorDesc& grad_input, const TensorDesc& grad_output,
                         const TensorDesc& indices) {
  using namespace detail;
  const Planes pgi(grad_input), pgo(grad_output), px(indices);
  dispatch_compute_float(grad_input.dtype, [&]<class T>() {
    const int64_t HW = pgi.H * pgi.W, OHW = pgo.H * pgo.W;
    if (pgi.count() == 0 || HW == 0) return;
    parallel_for(0, pgi.count(), std::max<int64_t>(1, 65536 / std::max<int64_t>(HW + OHW, 1)),
                 [&](int64_t p0, int64_t p1) {
      std::vector<T> gi(static_cast<size_t>(HW)), go(static_cast<size_t>(OHW));
      std::vector<int64_t> idx(static_cast<size_t>(OHW));
      for (int64_t p = p0; p < p1; ++p) {
        std::fill(gi.begin(), gi.end(), T(0));
        if (OHW > 0) {
          pgo.rows.load(p, go.data());
          px.rows.load(p, idx.data());
        }
        for (int64_t o = 0; o < OHW; ++o) {
          if (idx[o] >= 0 && idx[o] < HW) gi[idx[o]] += go[o];
        }
        pgi.rows.store(p, gi.data());
      }
    });
  });
}

void avg_pool2d(const TensorDesc& out, const TensorDesc& in, const Pool2dParams& p,
                bool count_include_pad, int64_t divisor_override) {
  using namespace detail;
  const Planes po(out), pi(in);
  dispatch_compute_float(in.dtype, [&]<class T>() {
    const int64_t H = pi.H, W = pi.W, OH = po.H, OW = po.W;
    for_each_plane<T>(po, pi, OH * OW * p.kernel[0] * p.kernel[1], [&](int64_t, const T* x, T* y) {
      for (int64_t oh = 0; oh < OH; ++oh) {
        for (int64_t ow = 0; ow < OW; ++ow) {
          const AvgWindow w = avg_window(oh, ow, H, W, p, count_include_pad, divisor_override);
          double s = 0;
          for (int64_t h = w.h0; h < w.h1; ++h)
            for (int64_t c = w.w0; c < w.w1; ++c) s += x[h * W + c];
          y[oh * OW + ow] = (w.h0 >= w.h1 || w.w0 >= w.w1) ? T(0) : T(s / w.divisor);
        }
      }
    });
  });
}

void avg_pool2d_backward(const TensorDesc& grad_input, const TensorDesc& grad_output,
                         const Pool2dParams& p, bool count_include_pad,
                         int64_t divisor_override) {
  using namespace detail;
  const Planes pgi(grad_input), pgo(grad_output);
  dispatch_compute_float(grad_input.dtype, [&]<class T>() {
    const int64_t H = pgi.H, W = pgi.W, OH = pgo.H, OW = pgo.W;
    for_each_plane<T>(pgi, pgo, OH * OW * p.kernel[0] * p.kernel[1] + H * W,
                      [&](int64_t, const T* g, T* gi) {
      std::fill(gi, gi + H * W, T(0));
      for (int64_t oh = 0; oh < OH; ++oh) {
        for (int64_t ow = 0; ow < OW; ++ow) {
          const AvgWindow w = avg_window(oh, ow, H, W, p, count_include_pad, divisor_override);
          const T v = T(g[oh * OW + ow] / w.divisor);
          for (int64_t h = w.h0; h < w.h1; ++h)
            for (int64_t c = w.w0; c < w.w1; ++c) gi[h * W + c] += v;
        }
      }
    });
  });
}

void adaptive_avg_pool2d(const TensorDesc& out, const TensorDesc& in) {
  using namespace detail;
  const Planes po(out), pi(in);
  dispatch_compute_float(in.dtype, [&]<class T>() {
    const int64_t H = pi.H, W = pi.W, OH = po.H, OW = po.W;
    if (OH == 1 && OW == 1) {
      // Global pooling (the engine's GlobalAveragePool, eager adaptive_avg_pool2d(x, 1) too):
      // the plane summed in 8 interleaved double partial sums, not one serial chain of adds
      // (latency-bound, a CNN's classifier head spent 5x onnxruntime's time on it); the last
      // bits of a float64 mean may differ from a serial sum's.
      for_each_plane<T>(po, pi, H * W + 1, [&](int64_t, const T* x, T* y) {
        const int64_t n = H * W;
        double part[8] = {};
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
          for (int j = 0; j < 8; ++j) part[j] += static_cast<double>(x[i + j]);
        }
        for (; i < n; ++i) part[i % 8] += static_cast<double>(x[i]);
        const double s = ((part[0] + part[1]) + (part[2] + part[3])) +
                         ((part[4] + part[5]) + (part[6] + part[7]));
        y[0] = T(s / double(n));
      });
      return;
    }
    for_each_plane<T>(po, pi, H * W + OH * OW, [&](int64_t, const T* x, T* y) {
      for (int64_t oh = 0; oh < OH; ++oh) {
        const int64_t h0 = adaptive_start(oh, H, OH), h1 = adaptive_end(oh, H, OH);
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t w0 = adaptive_start(ow, W, OW), w1 = adaptive_end(ow, W, OW);
          double s = 0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t c = w0; c < w1; ++c) s += x[h * W + c];
          y[oh * OW + ow] = T(s / double((h1 - h0) * (w1 - w0)));
        }
      }
    });
  });
}

void adaptive_avg_pool2d_backward(const TensorDesc& grad_input, const TensorDesc& grad_output) {
  using namespace detail;
  const Planes pgi(grad_input), pgo(grad_output);
  dispatch_compute_float(grad_input.dtype, [&]<class T>() {
    const int64_t H = pgi.H, W = pgi.W, OH = pgo.H, OW = pgo.W;
    for_each_plane<T>(pgi, pgo, H * W + OH * OW, [&](int64_t, const T* g, T* gi) {
      std::fill(gi, gi + H * W, T(0));
      for (int64_t oh = 0; oh < OH; ++oh) {
        const int64_t h0 = adaptive_start(oh, H, OH), h1 = adaptive_end(oh, H, OH);
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t w0 = adaptive_start(ow, W, OW), w1 = adaptive_end(ow, W, OW);
          const T v = T(g[oh * OW + ow] / double((h1 - h0) * (w1 - w0)));
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t c = w0; c < w1; ++c) gi[h * W + c] += v;
        }
      }
    });
  });
}

}  // namespace npu::kernels
