// conv2d forward and backward by im2col + gemm.
//
// How it works (per sample n and group g; Cg = C_in / groups, Og = C_out / groups,
// K = Cg * KH * KW, L = OH * OW):
//  - forward:      out[n, g]  [Og, L] = W[g] [Og, K] @ col [K, L] (+ bias, preloaded into
//                  out so that gemm's beta = 1 adds it before the one rounding);
//  - grad_input:   colgrad [K, L] = W[g]^T @ grad_out[n, g], then col2im adds every column
//                  entry back onto the input position it was read from;
//  - grad_weight:  gw[g] [Og, K] += grad_out[n, g] [Og, L] @ col^T [L, K];
//  - grad_bias:    a sum of grad_out over (N, OH, OW) by reduce().
// col[(c * KH + kh) * KW + kw, oh * OW + ow] = input[n, g * Cg + c, oh * sh - ph + kh * dh,
// ow * sw - pw + kw * dw] (0 in the padding), matching weight's [Og, Cg, KH, KW] order, so the
// weight is used as a matrix without copying. A 1x1 kernel with stride 1 and no padding
// skips im2col: the input plane already is that matrix.
//
// Float32 forward with stride 1 along W (not pointwise, not HF32) on an AVX-512 CPU is a direct
// convolution (conv2d_direct, below): the implicit GEMM's product with B read in place from a
// zero-padded copy of the input instead of packed, in 8-channel x 32-pixel register tiles;
// with Conv2dParams::fuse_max_pool2 a tile is two conv rows and is pooled 2x2 in registers
// before its store (other paths: a temporary, then max_pool2d). With Conv2dParams::winograd
// (the offline engine sets it) a 3x3 / stride 1 / one-group forward with >= 16 input channels
// is Winograd F(2x2, 3x3) instead (conv2d_winograd), its products on the same register tile.
// Other float32 forwards (input, weight, bias and an output whose (H, W) merge) are an implicit
// GEMM instead (gemm_implicit.h): per group, one GEMM over the whole batch, C_n = out[n, g] [Og, L]
// = W[g] [Og, K] @ col_n [K, L], where the GEMM driver asks pack_patches() for each K x NC
// block of col_n and it is written straight into the driver's B panels (in L2) from the input:
// no im2col matrix goes through memory, W is packed once for the batch, and the tasks of all
// samples share the threads (a small batch of small samples still keeps every core busy). The
// bias and a fused relu are added to each block of C by the task that computed it, while it is
// in cache. The float32 grad_input of a stride-1 convolution whose padding is at most
// dilation * (k - 1) and whose in channels (per group) are at least 16 and at least its out
// channels is that same implicit GEMM run on grad_output, with the weight flipped and
// transposed (conv2d_grad_input_implicit). The float32 grad_weight (K = Cg * KH * KW >= 64, not
// pointwise) is one implicit GEMM per group whose reduction runs over all N * OH * OW pixels,
// its B panels gathered from a zero-padded copy of the input (conv2d_grad_weight_implicit).
// The other cases take im2col.
//
// Otherwise samples are split into chunks: one chunk (and gemm using every thread) when a sample is
// big, one chunk per thread (single-threaded gemms, since nested parallel_for runs inline)
// when samples are small. Each chunk owns one im2col buffer, and for grad_weight its own
// accumulator; the accumulators are added in chunk order at the end.
#include "npu/kernels/conv.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "gemm_implicit.h"
#include "gemm_microkernels.h"  // OutputStageF, NPU_AVX512
#include "nn_common.h"
#include "npu/kernels/elementwise.h"
#include "npu/kernels/matmul.h"  // also testing::gemm_isa
#include "npu/kernels/pooling.h"
#include "npu/kernels/reduce.h"
#include "npu/kernels/thread_pool.h"
#include "scratch.h"

namespace npu::kernels {
namespace detail {
namespace {

struct ConvGeom {
  int64_t N, C, H, W, O, KH, KW, OH, OW, G, Cg, Og, K, L;
  Conv2dParams p;
  bool pointwise;  // 1x1 kernel, stride 1, no padding: col == the input plane

  ConvGeom(const TensorDesc& in, const TensorDesc& weight, const TensorDesc& out,
           const Conv2dParams& prm)
      : p(prm) {
    NPU_KERNEL_ASSERT(in.ndim == 4 && weight.ndim == 4 && out.ndim == 4,
                      "conv2d takes 4-D input, weight and output");
    N = in.sizes[0], C = in.sizes[1], H = in.sizes[2], W = in.sizes[3];
    O = weight.sizes[0], KH = weight.sizes[2], KW = weight.sizes[3];
    OH = out.sizes[2], OW = out.sizes[3];
    if (p.fuse_max_pool2) {  // out is the pooled output: the convolution's own size
      OH = conv_output_size(H, KH, p.padding[0], p.stride[0], p.dilation[0]);
      OW = conv_output_size(W, KW, p.padding[1], p.stride[1], p.dilation[1]);
      NPU_KERNEL_ASSERT(out.sizes[2] == OH / 2 && out.sizes[3] == OW / 2,
                        "conv2d with a fused 2x2 max pool: the output is not the pooled size");
    }
    G = p.groups;
    NPU_KERNEL_ASSERT(G >= 1 && C % G == 0 && O % G == 0 && weight.sizes[1] == C / G &&
                          out.sizes[1] == O && out.sizes[0] == N,
                      "conv2d shapes do not agree");
    Cg = C / G, Og = O / G, K = Cg * KH * KW, L = OH * OW;
    pointwise = KH == 1 && KW == 1 && p.stride[0] == 1 && p.stride[1] == 1 &&
                p.padding[0] == 0 && p.padding[1] == 0 && OH == H && OW == W;
  }
};

// Stride of dims [first, last] of t merged into one, or -1 when they do not merge.
int64_t merged_stride(const TensorDesc& t, int first, int last) {
  int64_t inner = -1, expected = 0;
  for (int d = last; d >= first; --d) {
    if (t.sizes[d] == 1) continue;
    if (inner < 0) {
      inner = t.strides[d];
      expected = t.strides[d] * t.sizes[d];
    } else if (t.strides[d] == expected) {
      expected *= t.sizes[d];
    } else {
      return -1;
    }
  }
  return inner < 0 ? 1 : inner;
}

TensorDesc matrix(const void* data, DType dt, int64_t rows, int64_t cols, int64_t rs,
                  int64_t cs) {
  const int64_t sizes[2] = {rows, cols}, strides[2] = {rs, cs};
  return TensorDesc::make(data, dt, sizes, 2, strides);
}
TensorDesc transposed(const TensorDesc& m) {
  return matrix(m.data, m.dtype, m.sizes[1], m.sizes[0], m.strides[1], m.strides[0]);
}

// Channels [c0, c0 + c) of sample n of a 4-D tensor as a 3-D [c, H, W] view.
TensorDesc sample_channels(const TensorDesc& t, int64_t n, int64_t c0, int64_t c) {
  const int64_t sizes[3] = {c, t.sizes[2], t.sizes[3]},
                strides[3] = {t.strides[1], t.strides[2], t.strides[3]};
  return TensorDesc::make(elem_ptr(t, n * t.strides[0] + c0 * t.strides[1]), t.dtype, sizes, 3,
                          strides);
}

// A 3-D [c, H, W] view as a [c, H * W] matrix, when H and W merge.
bool as_matrix(const TensorDesc& t3, TensorDesc* m) {
  const int64_t s = merged_stride(t3, 1, 2);
  if (s < 0) return false;
  *m = matrix(t3.data, t3.dtype, t3.sizes[0], t3.sizes[1] * t3.sizes[2], t3.strides[0], s);
  return true;
}

// Output columns [lo, hi) whose input column ow * stride + off lies in [0, size).
void valid_range(int64_t off, int64_t stride, int64_t size, int64_t out, int64_t* lo,
                 int64_t* hi) {
  *lo = off >= 0 ? 0 : (-off + stride - 1) / stride;
  *hi = size - off <= 0 ? 0 : (size - off + stride - 1) / stride;
  *lo = std::min(*lo, out);
  *hi = std::max(*lo, std::min(*hi, out));
}

// col [K, L] (row-major, T) from x3 = input[n, g] ([Cg, H, W], storage S, any strides).
template <class S, class T>
void im2col(const TensorDesc& x3, T* col, const ConvGeom& g) {
  const S* x = static_cast<const S*>(x3.data);
  const int64_t sc = x3.strides[0], sh = x3.strides[1], sw = x3.strides[2];
  const Conv2dParams& p = g.p;
  parallel_for(0, g.K, std::max<int64_t>(1, 65536 / std::max<int64_t>(g.L, 1)),
               [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t c = r / (g.KH * g.KW), kh = (r / g.KW) % g.KH, kw = r % g.KW;
      const int64_t hoff = kh * p.dilation[0] - p.padding[0];
      const int64_t woff = kw * p.dilation[1] - p.padding[1];
      int64_t lo, hi;
      valid_range(woff, p.stride[1], g.W, g.OW, &lo, &hi);
      T* row = col + r * g.L;
      for (int64_t oh = 0; oh < g.OH; ++oh) {
        T* dst = row + oh * g.OW;
        const int64_t ih = oh * p.stride[0] + hoff;
        if (ih < 0 || ih >= g.H) {
          std::fill(dst, dst + g.OW, T(0));
          continue;
        }
        std::fill(dst, dst + lo, T(0));
        const S* src = x + c * sc + ih * sh;
        for (int64_t ow = lo; ow < hi; ++ow) {
          dst[ow] = cast_value<T>(src[(ow * p.stride[1] + woff) * sw]);
        }
        std::fill(dst + hi, dst + g.OW, T(0));
      }
    }
  });
}

// gi [Cg, H, W] (contiguous T, zeroed by the caller) += the columns of col [K, L] put back
// where im2col read them. Parallel over channels, so no two tasks add to one element.
template <class T>
void col2im(const T* col, T* gi, const ConvGeom& g) {
  const Conv2dParams& p = g.p;
  parallel_for(0, g.Cg, std::max<int64_t>(1, 65536 / std::max<int64_t>(g.L * g.KH * g.KW, 1)),
               [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      T* plane = gi + c * g.H * g.W;
      for (int64_t kh = 0; kh < g.KH; ++kh) {
        for (int64_t kw = 0; kw < g.KW; ++kw) {
          const T* row = col + ((c * g.KH + kh) * g.KW + kw) * g.L;
          const int64_t hoff = kh * p.dilation[0] - p.padding[0];
          const int64_t woff = kw * p.dilation[1] - p.padding[1];
          int64_t lo, hi;
          valid_range(woff, p.stride[1], g.W, g.OW, &lo, &hi);
          for (int64_t oh = 0; oh < g.OH; ++oh) {
            const int64_t ih = oh * p.stride[0] + hoff;
            if (ih < 0 || ih >= g.H) continue;
            T* dst = plane + ih * g.W;
            const T* src = row + oh * g.OW;
            for (int64_t ow = lo; ow < hi; ++ow) dst[ow * p.stride[1] + woff] += src[ow];
          }
        }
      }
    }
  });
}

// The weight as G matrices [Og, K]: in place when its last three dims merge, else staged.
template <class T>
struct WeightMatrices {
  std::unique_ptr<T[]> staged;
  TensorDesc w;
  int64_t row_stride, col_stride;

  WeightMatrices(const TensorDesc& weight, const ConvGeom& g) : w(weight) {
    col_stride = merged_stride(weight, 1, 3);
    row_stride = weight.strides[0];
    if (col_stride < 0) {
      staged.reset(new T[static_cast<size_t>(g.O * g.K)]);
      w = TensorDesc::make(staged.get(), dtype_of<T>(), weight.sizes, 4);
      copy(w, weight);
      row_stride = g.K, col_stride = 1;
    }
  }
  TensorDesc group(int64_t gi, const ConvGeom& g) const {
    return matrix(elem_ptr(w, gi * g.Og * row_stride), w.dtype, g.Og, g.K, row_stride,
                  col_stride);
  }
};

// Rows [k0, k0 + kc) x columns [c0, c0 + nc) of the im2col matrix of x ([Cg, H, W] float32 with
// strides sc, sh, sw) as GEMM B panels of nr columns (gemm_implicit.h's pack_b). For each row,
// the columns go by runs of one output row (one input row, or padding), split at panel ends;
// with stride 1 along W a run is a contiguous copy between two zero-filled edges.
void pack_patches(const float* x, int64_t sc, int64_t sh, int64_t sw, const ConvGeom& g,
                  int64_t k0, int64_t kc, int64_t c0, int64_t nc, int nr, float* dst) {
  const Conv2dParams& p = g.p;
  const int64_t khw = g.KH * g.KW, oh0 = c0 / g.OW, ow0 = c0 % g.OW;
  const int64_t padded = (nc + nr - 1) / nr * nr;
  const bool unit_w = p.stride[1] == 1 && sw == 1;
  for (int64_t k = 0; k < kc; ++k) {
    const int64_t r = k0 + k;
    const int64_t c = r / khw, kh = r / g.KW % g.KH, kw = r % g.KW;
    const int64_t hoff = kh * p.dilation[0] - p.padding[0];
    const int64_t woff = kw * p.dilation[1] - p.padding[1];
    int64_t lo, hi;
    valid_range(woff, p.stride[1], g.W, g.OW, &lo, &hi);
    const float* plane = x + c * sc;
    float* row = dst + k * nr;  // column j of this row: row[(j / nr) * kc * nr + j % nr]
    int64_t j = 0, oh = oh0, ow = ow0;
    while (j < padded) {
      const int64_t in_panel = nr - j % nr;
      float* d = row + (j / nr) * kc * nr + j % nr - ow;  // d[ow'] for this run's columns
      if (j >= nc) {  // the last panel's columns past nc
        std::fill(d + ow, d + ow + in_panel, 0.0f);
        j += in_panel;
        continue;
      }
      const int64_t run = std::min({g.OW - ow, in_panel, nc - j});
      const int64_t end = ow + run, ih = oh * p.stride[0] + hoff;
      if (ih < 0 || ih >= g.H) {
        std::fill(d + ow, d + end, 0.0f);
      } else {
        const float* src = plane + ih * sh;
        const int64_t a = std::clamp(lo, ow, end), b = std::clamp(hi, a, end);
        std::fill(d + ow, d + a, 0.0f);
        if (unit_w) {
          const float* s = src + woff;
          for (int64_t i = a; i < b; ++i) d[i] = s[i];
        } else {
          for (int64_t i = a; i < b; ++i) d[i] = src[(i * p.stride[1] + woff) * sw];
        }
        std::fill(d + b, d + end, 0.0f);
      }
      j += run;
      ow = end;
      if (ow == g.OW) ow = 0, ++oh;
    }
  }
}

// pack_patches from a zero-padded copy of the input ([C, Hp, Wp] contiguous planes, Hp = H + 2
// ph, Wp = W + 2 pw; stride 1 along W), with AVX-512. Patch element (c, kh, kw) of output pixel
// (oh, ow) is then xp[row_off(c, kh, kw) + col_off(oh, ow)] with no bounds to check, and 16
// pixels of one output row are 16 consecutive floats: each 16-column chunk of a panel row is
// one masked load per output row it covers (usually one). Segments (column side) and row
// offsets are worked out once per call.
__attribute__((target("avx512f"))) void pack_padded_avx512(const float* xp, int64_t Hp,
                                                            int64_t Wp, const ConvGeom& g,
                                                            int64_t k0, int64_t kc, int64_t c0,
                                                            int64_t nc, int nr, float* dst) {
  const Conv2dParams& p = g.p;
  const int per_panel = nr / 16;
  const int64_t chunks = (nc + nr - 1) / nr * per_panel;
  struct Segment {
    int64_t off;  // lane i reads xp[row_off + off + i]
    __mmask16 mask;
  };
  std::vector<Segment> segs;
  std::vector<int> first(static_cast<size_t>(chunks) + 1);
  for (int64_t ch = 0; ch < chunks; ++ch) {
    first[ch] = static_cast<int>(segs.size());
    int64_t j = ch * 16, l = c0 + j;
    const int64_t end = std::min(nc, j + 16);
    while (j < end) {
      const int64_t oh = l / g.OW, ow = l % g.OW;
      const int64_t run = std::min(g.OW - ow, end - j);
      const int lane0 = static_cast<int>(j - ch * 16), lane1 = static_cast<int>(lane0 + run);
      const auto mask = static_cast<__mmask16>(((1u << lane1) - 1u) & ~((1u << lane0) - 1u));
      segs.push_back({oh * p.stride[0] * Wp + ow - lane0, mask});
      j += run, l += run;
    }
  }
  first[chunks] = static_cast<int>(segs.size());
  std::vector<int64_t> row_off(static_cast<size_t>(kc));
  const int64_t khw = g.KH * g.KW;
  for (int64_t k = 0; k < kc; ++k) {
    const int64_t r = k0 + k;
    const int64_t c = r / khw, kh = r / g.KW % g.KH, kw = r % g.KW;
    row_off[k] = (c * Hp + kh * p.dilation[0]) * Wp + kw * p.dilation[1];
  }
  for (int64_t ch = 0; ch < chunks; ++ch) {
    float* d = dst + (ch / per_panel) * kc * nr + (ch % per_panel) * 16;
    const Segment* s0 = segs.data() + first[ch];
    const Segment* s1 = segs.data() + first[ch + 1];
    if (s1 - s0 == 1 && s0->mask == 0xFFFF) {  // the common case: 16 pixels of one row
      const float* base = xp + s0->off;
      for (int64_t k = 0; k < kc; ++k) {
        _mm512_storeu_ps(d + k * nr, _mm512_loadu_ps(base + row_off[k]));
      }
      continue;
    }
    for (int64_t k = 0; k < kc; ++k) {
      __m512 v = _mm512_setzero_ps();
      // masked-out lanes are not read: the address may lie before the row (or the buffer)
      for (const Segment* sg = s0; sg < s1; ++sg) {
        const auto addr = reinterpret_cast<std::intptr_t>(xp) +
                          (row_off[k] + sg->off) * std::intptr_t(sizeof(float));
        v = _mm512_mask_loadu_ps(v, sg->mask, reinterpret_cast<const float*>(addr));
      }
      _mm512_storeu_ps(d + k * nr, v);
    }
  }
}

bool patch_packing_avx512() {
  static const bool supported = has_avx512();
  // Follows gemm's instruction-set cap, so that tests reach the portable path too.
  return supported && std::strcmp(testing::gemm_isa(DType::Float32, DType::Float32), "avx2") != 0;
}

// The pointwise case of pack_patches: col_n is x itself, a [Cg, L] matrix with row stride sc.
void pack_rows(const float* x, int64_t sc, int64_t k0, int64_t kc, int64_t c0, int64_t nc,
               int nr, float* dst) {
  for (int64_t q = 0; q * nr < nc; ++q) {
    const int64_t cols = std::min<int64_t>(nr, nc - q * nr);
    float* d = dst + q * kc * nr;
    for (int64_t k = 0; k < kc; ++k) {
      const float* s = x + (k0 + k) * sc + c0 + q * nr;
      std::copy(s, s + cols, d + k * nr);
      std::fill(d + k * nr + cols, d + (k + 1) * nr, 0.0f);
    }
  }
}

// Zero-padded copy of samples [n0, n0 + nb) of the input into xp ([nb, C, Hp, Wp]), its values
// rounded to HF32 when the conv computes in HF32: once per input element here, where rounding
// the packed patches would round each element once per kernel tap and per column block.
void pad_input(const TensorDesc& input, int64_t n0, int64_t nb, const ConvGeom& g, int64_t Hp,
               int64_t Wp, float* xp) {
  const bool hf32 = g.p.math == CubeMath::HF32;
  const float* x = static_cast<const float*>(input.data);
  const int64_t s0 = input.strides[0], s1 = input.strides[1], s2 = input.strides[2],
                s3 = input.strides[3];
  const int64_t ph = g.p.padding[0], pw = g.p.padding[1];
  parallel_for(0, nb * g.C, std::max<int64_t>(1, 16384 / (Hp * Wp)), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float* src = x + (n0 + i / g.C) * s0 + (i % g.C) * s1;
      float* dst = xp + i * Hp * Wp;
      std::fill(dst, dst + ph * Wp, 0.0f);
      for (int64_t h = 0; h < g.H; ++h) {
        float* d = dst + (ph + h) * Wp;
        std::fill(d, d + pw, 0.0f);
        const float* sr = src + h * s2;
        if (hf32) {
          for (int64_t w = 0; w < g.W; ++w) d[pw + w] = round_to_hf32(sr[w * s3]);
        } else if (s3 == 1) {
          std::copy(sr, sr + g.W, d + pw);
        } else {
          for (int64_t w = 0; w < g.W; ++w) d[pw + w] = sr[w * s3];
        }
        std::fill(d + pw + g.W, d + Wp, 0.0f);
      }
      std::fill(dst + (ph + g.H) * Wp, dst + Hp * Wp, 0.0f);
    }
  });
}

// Direct convolution (float32, AVX-512, stride 1 along W): the implicit GEMM without packing B.
// In the zero-padded copy of the input (pad_input: [C, Hp, Wp] planes), patch element
// (c, kh, kw) of output pixel (oh, ow) is xp[row_off(c, kh, kw) + oh * sh * Wp + ow], and 16
// pixels of one output row are 16 consecutive floats. So the GEMM's B (the im2col matrix) is
// read in place: a micro-tile is 8 output channels x two 16-pixel segments of output rows (one
// row of 32, two rows of 16, the masked tail of a row, ...), and each k step loads its two B
// vectors at row_off[k] + the segments' offsets, broadcasts 8 weights and issues 16 FMAs into
// accumulators that hold the tile over all of K. The tile is stored once, bias and ReLU applied
// in registers (the output stage's order: product sum rounded, + bias, then max 0), lanes past
// the row's end masked off. Nothing is packed but the weight (once per call, 8-row panels), so
// the patch packing that was 15% of a 3x3 convolution's time is gone, and the short-K first
// convolution (3 input channels, K = 27) no longer pays a full packed panel per 27 steps.
// Lanes past a row's end read the padding and the next rows (garbage, never stored); the copy
// has 16 zero floats of slack after its last sample for the last row's tail.
struct DirectSeg {
  int64_t in_off;   // offset of lane 0 in the padded sample plane
  int64_t out_off;  // offset of lane 0 in the output channel plane
  __mmask16 mask;   // lanes that are output pixels
};

// 8 x 2 tiles: 16 accumulators. Three segments a tile (24) measured no faster on the 3x3
// convolutions of the benchmark CNN, 8% slower at 64 channels (a bigger patch working set in L1).
constexpr int kDirectMR = 8, kDirectNV = 2;

// max_pool2d's step: v where it is greater than best or NaN, else best.
NPU_AVX512 NPU_ALWAYS_INLINE __m512 pool_take(__m512 best, __m512 v) {
  const __mmask16 later =
      _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_mask_mov_ps(best, later, v);
}

// Index vectors for _mm512_permutex2var_ps(a, idx, b) that gather the even (odd) lanes of the 32
// lanes of a then b: lanes 0-7 from a, lanes 8-15 from b.
NPU_AVX512 NPU_ALWAYS_INLINE __m512i even_lanes_idx() {
  return _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
}
NPU_AVX512 NPU_ALWAYS_INLINE __m512i odd_lanes_idx() {
  return _mm512_add_epi32(even_lanes_idx(), _mm512_set1_epi32(1));
}

// With a fused 2x2 max pool (POOL), the tile's two segments are the same columns of conv rows
// 2 ph and 2 ph + 1: each output channel's 32 values, bias and ReLU applied, are pooled in
// registers into 8 values of pooled row ph (max_pool2d's rule: in the order (0,0), (0,1),
// (1,0), (1,1), a later value is taken if greater or NaN) and only those are stored, through
// m[0] (8 lanes at most) at c[0].
template <int MR, int NV, bool POOL>
NPU_AVX512 void direct_tile(const float* ap, int64_t K, const int64_t* row_off,
                            const float* const* x, float* const* c, const __mmask16* m,
                            int64_t ldc, int64_t rows, const gemm::OutputStageF& stage) {
  static_assert(!POOL || NV == 2, "a pooled tile is two conv rows");
  __m512 acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  const float* xs[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) xs[v] = x[v];
  for (int64_t k = 0; k < K; ++k) {
    const int64_t o = row_off[k];
    __m512 b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) b[v] = _mm512_loadu_ps(xs[v] + o);
    const float* a = ap + k * MR;
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(a[r]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, b[v], acc[r][v]);
    }
  }
  // The GEMM's output stage (+ the row bias, then ReLU), as gemm applies it to a tile.
  if constexpr (POOL) {
    // Lanes 0-7 of the even / odd gathers: the even / odd columns of the top row; lanes 8-15:
    // of the bottom row.
    const __m512i even_idx = even_lanes_idx(), odd_idx = odd_lanes_idx();
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      if (r >= rows) break;
      const __m512 top = stage(r, 0, acc[r][0]), bottom = stage(r, 0, acc[r][1]);
      // take(take(take(a, b), c), d) == take(take(a, b), take(c, d)): both keep the first of
      // equal maxima and the last NaN.
      const __m512 pairs = pool_take(_mm512_permutex2var_ps(top, even_idx, bottom),
                                     _mm512_permutex2var_ps(top, odd_idx, bottom));
      const __m512 pooled = pool_take(pairs, _mm512_shuffle_f32x4(pairs, pairs, 0xEE));
      _mm512_mask_storeu_ps(c[0] + r * ldc, m[0], pooled);
    }
  } else {
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      if (r >= rows) break;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        _mm512_mask_storeu_ps(c[v] + r * ldc, m[v], stage(r, 0, acc[r][v]));
      }
    }
  }
}

// The float32 bias's n values gathered contiguous (the GEMM's row bias), 0 up to `size` floats
// past them; without a bias, `size` zeros (empty by default: the caller passes no row bias).
std::vector<float> contiguous_bias(const TensorDesc* bias, int64_t n, int64_t size = 0) {
  if (!has_data(bias)) return std::vector<float>(static_cast<size_t>(size), 0.0f);
  std::vector<float> rows(static_cast<size_t>(std::max(n, size)), 0.0f);
  const float* b = static_cast<const float*>(bias->data);
  for (int64_t o = 0; o < n; ++o) rows[o] = b[o * bias->strides[0]];
  return rows;
}

// ap[(gr * panels + q) * K * MR + k * MR + r] = W[gr * Og + q * MR + r, k] (0 past Og).
void pack_direct_weight(const TensorDesc& weight, const ConvGeom& g, float* ap) {
  constexpr int MR = kDirectMR;
  const WeightMatrices<float> wm(weight, g);
  const int64_t panels = (g.Og + MR - 1) / MR;
  for (int64_t gr = 0; gr < g.G; ++gr) {
    const TensorDesc a = wm.group(gr, g);
    const float* w = static_cast<const float*>(a.data);
    const int64_t rs = a.strides[0], cs = a.strides[1];
    for (int64_t q = 0; q < panels; ++q) {
      float* d = ap + (gr * panels + q) * g.K * MR;
      const int64_t rows = std::min<int64_t>(MR, g.Og - q * MR);
      const float* src = w + q * MR * rs;
      for (int64_t k = 0; k < g.K; ++k) {  // d written in order, MR streams read
        for (int64_t r = 0; r < MR; ++r) d[k * MR + r] = r < rows ? src[r * rs + k * cs] : 0.0f;
      }
    }
  }
}

// The float32 forward as a direct convolution (above); false when it does not apply: other
// dtypes, HF32, a stride along W, an output whose W stride is not 1, no AVX-512 (or tests
// capping gemm's instruction set), or a pointwise convolution (the implicit GEMM reads those in
// place, without a padded copy). With p.fuse_max_pool2, out is the pooled output (direct_tile
// pools each tile before its store).
// `packed`: the weight's panels made already (PackedConvWeight), or nullptr.
bool conv2d_direct(const TensorDesc& out, const TensorDesc& input, const TensorDesc& weight,
                   const TensorDesc* bias, const ConvGeom& g, const float* packed) {
  const bool with_bias = has_data(bias);
  if (input.dtype != DType::Float32 || weight.dtype != DType::Float32 ||
      out.dtype != DType::Float32 || (with_bias && bias->dtype != DType::Float32) ||
      g.p.math != CubeMath::KeepDtype || g.p.stride[1] != 1 || out.strides[3] != 1 ||
      g.pointwise || !patch_packing_avx512()) {
    return false;
  }
  constexpr int MR = kDirectMR;
  const int64_t Hp = g.H + 2 * g.p.padding[0], Wp = g.W + 2 * g.p.padding[1];
  const int64_t plane = Hp * Wp, sample = g.C * plane;
  const int64_t panels = (g.Og + MR - 1) / MR;
  std::unique_ptr<float[]> own;  // the weight's panels, when not packed already
  if (packed == nullptr) {
    own.reset(new float[static_cast<size_t>(g.G * panels * g.K * MR)]);
    pack_direct_weight(weight, g, own.get());
    packed = own.get();
  }
  const float* const ap = packed;
  std::vector<int64_t> row_off(static_cast<size_t>(g.K));
  const int64_t khw = g.KH * g.KW;
  for (int64_t k = 0; k < g.K; ++k) {
    const int64_t c = k / khw, kh = k / g.KW % g.KH, kw = k % g.KW;
    row_off[k] = c * plane + kh * g.p.dilation[0] * Wp + kw * g.p.dilation[1];
  }
  // Output segments of one sample and channel, paired into tiles (an odd last one is paired
  // with itself, stored through an empty mask). Pooled: a tile is the same 16 columns of conv
  // rows 2 ph and 2 ph + 1 (the last conv row and column of an odd size are never computed),
  // both segments naming the tile's 8 pooled outputs.
  std::vector<DirectSeg> segs;
  const bool pool = g.p.fuse_max_pool2;
  const int64_t sh = g.p.stride[0];
  if (pool) {
    for (int64_t ph = 0; ph < g.OH / 2; ++ph) {
      for (int64_t ow = 0; ow < g.OW / 2 * 2; ow += 16) {
        const int64_t lanes = std::min<int64_t>(16, g.OW / 2 * 2 - ow);
        const auto mask = static_cast<__mmask16>((1u << (lanes / 2)) - 1u);
        segs.push_back({2 * ph * sh * Wp + ow, ph * out.strides[2] + ow / 2, mask});
        segs.push_back({(2 * ph + 1) * sh * Wp + ow, ph * out.strides[2] + ow / 2, mask});
      }
    }
  } else {
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      for (int64_t ow = 0; ow < g.OW; ow += 16) {
        const int64_t lanes = std::min<int64_t>(16, g.OW - ow);
        segs.push_back({oh * sh * Wp + ow, oh * out.strides[2] + ow,
                        static_cast<__mmask16>((1u << lanes) - 1u)});
      }
    }
  }
  constexpr int NV = kDirectNV;
  const int64_t nsegs = static_cast<int64_t>(segs.size());
  const int64_t tiles = (nsegs + NV - 1) / NV;
  const std::vector<float> bias_rows = contiguous_bias(bias, g.G * g.Og);
  // A batch slice of at most ~16 MB (4 M floats) of padded input at a time.
  const int64_t slice = std::clamp<int64_t>((int64_t{4} << 20) / std::max<int64_t>(1, sample), 1,
                                            g.N);
  const std::unique_ptr<float[]> xp(new float[static_cast<size_t>(slice * sample + 16)]);
  std::fill(xp.get() + slice * sample, xp.get() + slice * sample + 16, 0.0f);
  float* const out_data = static_cast<float*>(out.data);
  for (int64_t n0 = 0; n0 < g.N; n0 += slice) {
    const int64_t nb = std::min(slice, g.N - n0);
    pad_input(input, n0, nb, g, Hp, Wp, xp.get());
    if (nb < slice) std::fill(xp.get() + nb * sample, xp.get() + nb * sample + 16, 0.0f);
    const int64_t per_sample = g.G * tiles;
    parallel_for(0, nb * per_sample, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t n = t / per_sample, gr = t % per_sample / tiles, tile = t % tiles;
        const float* xs = xp.get() + n * sample + gr * g.Cg * plane;
        float* cs = out_data + (n0 + n) * out.strides[0] + gr * g.Og * out.strides[1];
        const float* x[NV];
        float* c[NV];
        __mmask16 m[NV];
        for (int v = 0; v < NV; ++v) {  // past the last segment: the last again, stored nowhere
          const int64_t i = std::min(tile * NV + v, nsegs - 1);
          x[v] = xs + segs[i].in_off;
          c[v] = cs + segs[i].out_off;
          m[v] = tile * NV + v < nsegs ? segs[i].mask : static_cast<__mmask16>(0);
        }
        for (int64_t q = 0; q < panels; ++q) {
          const int64_t r0 = q * MR;
          float* cq[NV];
          for (int v = 0; v < NV; ++v) cq[v] = c[v] + r0 * out.strides[1];
          const gemm::OutputStageF stage{
              with_bias ? bias_rows.data() + gr * g.Og + r0 : nullptr, nullptr, 0.0f,
              g.p.fuse_relu};
          (pool ? direct_tile<MR, NV, true> : direct_tile<MR, NV, false>)(
              ap + (gr * panels + q) * g.K * MR, g.K, row_off.data(), x, cq, m, out.strides[1],
              std::min<int64_t>(MR, g.Og - r0), stage);
        }
      }
    });
  }
  return true;
}

// Winograd F(2x2, 3x3) (float32, AVX-512; Conv2dParams::winograd, which the engine sets): a 3x3
// convolution with stride 1, dilation 1, one group and at least 16 input channels computes each
// 2x2 output tile from a 4x4 input tile as Y = A^T [(G g G^T) . (B^T d B)] A: 16 products per
// channel pair for 4 outputs instead of 36. Per block of tile rows of one sample: the input
// transform V[xi][c][t] (16 tiles a vector: lane l is tile t0 + l of one tile row, its four
// columns gathered from the padded input with two permutes per pair of loads), then for each
// 8-channel panel the 16 products M[xi] [8, T] = U[xi] [8, C] @ V[xi] [C, T] by direct_tile (the
// direct convolution's register tile, with row_off[c] = c * T), then the output transform with
// the bias and ReLU (the output stage's order) and, with fuse_max_pool2, the 2x2 max pool of
// the tile, which is exactly a pooling window (tiles start at even rows and columns).
// Not bit-equal to the direct convolution: the transforms add and subtract inputs and products
// before and after the channel sums (see docs/inference.md for the error bound tested).
constexpr int kWinoMR = 8;

// U[((xi * panels + q) * C + c) * 8 + r] = (G g G^T)[xi] of weight [q * 8 + r, c] (0 past O),
// G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]], computed in double.
void pack_winograd_weight(const TensorDesc& weight, int64_t O, int64_t C, float* u) {
  const int64_t panels = (O + kWinoMR - 1) / kWinoMR;
  const float* w = static_cast<const float*>(weight.data);
  const int64_t s0 = weight.strides[0], s1 = weight.strides[1], s2 = weight.strides[2],
                s3 = weight.strides[3];
  static constexpr double G[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  std::fill(u, u + 16 * panels * C * kWinoMR, 0.0f);
  for (int64_t o = 0; o < O; ++o) {
    for (int64_t c = 0; c < C; ++c) {
      double g[3][3], gg[4][3];
      for (int i = 0; i < 3; ++i) {
        for (int j = 0; j < 3; ++j) g[i][j] = w[o * s0 + c * s1 + i * s2 + j * s3];
      }
      for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 3; ++j) {
          gg[i][j] = G[i][0] * g[0][j] + G[i][1] * g[1][j] + G[i][2] * g[2][j];
        }
      }
      for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 4; ++j) {
          const double v = gg[i][0] * G[j][0] + gg[i][1] * G[j][1] + gg[i][2] * G[j][2];
          u[(((i * 4 + j) * panels + o / kWinoMR) * C + c) * kWinoMR + o % kWinoMR] =
              static_cast<float>(v);
        }
      }
    }
  }
}

// The weights Winograd F(2x2, 3x3) takes: 3x3, one group, at least 16 input channels (fewer
// leave too little work per tile for the transforms to pay off).
bool winograd_weight_fits(const ConvGeom& g) {
  return g.KH == 3 && g.KW == 3 && g.G == 1 && g.C >= 16;
}

bool winograd_applies(const TensorDesc& out, const TensorDesc& input, const TensorDesc& weight,
                      const TensorDesc* bias, const ConvGeom& g) {
  return g.p.winograd && input.dtype == DType::Float32 && weight.dtype == DType::Float32 &&
         out.dtype == DType::Float32 && (!has_data(bias) || bias->dtype == DType::Float32) &&
         g.p.math == CubeMath::KeepDtype && winograd_weight_fits(g) && g.p.stride[0] == 1 && g.p.stride[1] == 1 && g.p.dilation[0] == 1 &&
         g.p.dilation[1] == 1 && out.strides[3] == 1 && g.OH > 0 && g.OW > 0 &&
         patch_packing_avx512();
}

// Input transform of 16 tiles, channel c: lanes 0-7 take their columns from x (the top-left of
// their tile in the padded plane, row 2 th, column 2 tw0), lanes 8-15 from x1 (x + 16: the next
// 8 tiles of the row; or 2 rows down: the same tiles of the next tile row). v: V[0][c][t0] (xi
// stride vs), `keep` the lanes that are tiles.
// B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]].
NPU_AVX512 NPU_ALWAYS_INLINE void wino_input_tile(const float* x, const float* x1, int64_t wp,
                                                  float* v, int64_t vs, __mmask16 keep) {
  const __m512i even = even_lanes_idx(), odd = odd_lanes_idx();
  __m512 w[4][4];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) {
    const float *row = x + r * wp, *row1 = x1 + r * wp;
    const __m512 a = _mm512_loadu_ps(row), b = _mm512_loadu_ps(row1);
    const __m512 a2 = _mm512_loadu_ps(row + 2), b2 = _mm512_loadu_ps(row1 + 2);
    const __m512 d0 = _mm512_permutex2var_ps(a, even, b), d1 = _mm512_permutex2var_ps(a, odd, b);
    const __m512 d2 = _mm512_permutex2var_ps(a2, even, b2),
                 d3 = _mm512_permutex2var_ps(a2, odd, b2);
    w[r][0] = _mm512_sub_ps(d0, d2);
    w[r][1] = _mm512_add_ps(d1, d2);
    w[r][2] = _mm512_sub_ps(d2, d1);
    w[r][3] = _mm512_sub_ps(d1, d3);
  }
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    _mm512_mask_storeu_ps(v + (0 * 4 + j) * vs, keep, _mm512_sub_ps(w[0][j], w[2][j]));
    _mm512_mask_storeu_ps(v + (1 * 4 + j) * vs, keep, _mm512_add_ps(w[1][j], w[2][j]));
    _mm512_mask_storeu_ps(v + (2 * 4 + j) * vs, keep, _mm512_sub_ps(w[2][j], w[1][j]));
    _mm512_mask_storeu_ps(v + (3 * 4 + j) * vs, keep, _mm512_sub_ps(w[1][j], w[3][j]));
  }
}

// Output transform of 16 tiles (m: M[0][r][t0], xi stride ms), A^T = [[1, 1, 1, 0],
// [0, 1, -1, -1]], then the stage (bias, ReLU) on each of the 4 outputs. Pooled: their max in
// max_pool2d's order, lanes 0-7 stored at o[0] (mask k[0]), lanes 8-15 at o[1] (k[1], its lanes
// 0-7; 0 when o[0]'s row holds all 16). Else the tiles' columns interleaved: lanes 0-7 of the
// top conv row at o[0], lanes 8-15 at o[1], of the bottom row at o[2] and o[3] (k[i]: the
// columns to store, 0 for none).
template <bool POOL>
NPU_AVX512 NPU_ALWAYS_INLINE void wino_output_tile(const float* m, int64_t ms, int r,
                                                   const gemm::OutputStageF& stage,
                                                   float* const* o, const __mmask16* k) {
  __m512 s[4], t[4];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m512 m0 = _mm512_loadu_ps(m + (0 + j) * ms), m1 = _mm512_loadu_ps(m + (4 + j) * ms),
                 m2 = _mm512_loadu_ps(m + (8 + j) * ms), m3 = _mm512_loadu_ps(m + (12 + j) * ms);
    s[j] = _mm512_add_ps(_mm512_add_ps(m0, m1), m2);
    t[j] = _mm512_sub_ps(_mm512_sub_ps(m1, m2), m3);
  }
  const __m512 y00 = stage(r, 0, _mm512_add_ps(_mm512_add_ps(s[0], s[1]), s[2]));
  const __m512 y01 = stage(r, 0, _mm512_sub_ps(_mm512_sub_ps(s[1], s[2]), s[3]));
  const __m512 y10 = stage(r, 0, _mm512_add_ps(_mm512_add_ps(t[0], t[1]), t[2]));
  const __m512 y11 = stage(r, 0, _mm512_sub_ps(_mm512_sub_ps(t[1], t[2]), t[3]));
  if constexpr (POOL) {
    const __m512 pv = pool_take(pool_take(pool_take(y00, y01), y10), y11);
    _mm512_mask_storeu_ps(o[0], k[0], pv);
    if (k[1] != 0) _mm512_mask_storeu_ps(o[1], k[1], _mm512_shuffle_f32x4(pv, pv, 0xEE));
  } else {
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
    if (k[0] != 0) _mm512_mask_storeu_ps(o[0], k[0], _mm512_permutex2var_ps(y00, lo, y01));
    if (k[1] != 0) _mm512_mask_storeu_ps(o[1], k[1], _mm512_permutex2var_ps(y00, hi, y01));
    if (k[2] != 0) _mm512_mask_storeu_ps(o[2], k[2], _mm512_permutex2var_ps(y10, lo, y11));
    if (k[3] != 0) _mm512_mask_storeu_ps(o[3], k[3], _mm512_permutex2var_ps(y10, hi, y11));
  }
}

// One conv2d_winograd call's shapes and buffers, shared by its blocks.
struct WinoPlan {
  const ConvGeom* g;
  const float* u;           // transformed weight
  const float* xp;          // padded input slice
  const float* bias_rows;   // panels * 8 (0 past O)
  const int64_t* row_off;   // c * T
  float* out;               // out's sample n0
  int64_t os0, os1, os2, Wp, plane, sample, TH, TW, T, panels;
  bool pool, pair;  // pair: TW <= 8, a vector holds two tile rows (wino_block)
};

// Tile rows [th0, th0 + nrows) of sample n of the slice: input transform into V, the 16
// products per 8-channel panel into M, output transform into out. Tile (tr, tw) of the block is
// at t = tr * TW + tw; with rows of at most 8 tiles (w.pair), at t = tr / 2 * 16 + tr % 2 * 8 +
// tw: a vector holds the tiles of two rows.
NPU_AVX512 void wino_block(const WinoPlan& w, float* V, float* M, int64_t n, int64_t th0,
                           int64_t nrows) {
  constexpr int MR = kWinoMR;
  const ConvGeom& g = *w.g;
  const int64_t C = g.C, T = w.T, TW = w.TW;
  const bool pair = w.pair;
  // (tr, tw) of each 16-tile vector: rows in steps of 2 (pair) or 1, columns in steps of 16.
  const int64_t row_step = pair ? 2 : 1, used = pair ? (nrows + 1) / 2 * 16 : nrows * TW;
  const float* xs = w.xp + n * w.sample;
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t tr = 0; tr < nrows; tr += row_step) {
      const float* xrow = xs + c * w.plane + 2 * (th0 + tr) * w.Wp;
      if (pair) {
        const __mmask16 half = tail_mask16(TW);
        wino_input_tile(xrow, xrow + 2 * w.Wp, w.Wp, V + c * T + tr * 8, C * T,
                        static_cast<__mmask16>(half | (tr + 1 < nrows ? half << 8 : 0)));
      } else {
        for (int64_t tw = 0; tw < TW; tw += 16) {
          wino_input_tile(xrow + 2 * tw, xrow + 2 * tw + 16, w.Wp, V + c * T + tr * TW + tw,
                          C * T, tail_mask16(TW - tw));
        }
      }
    }
  }
  float* const cs = w.out + n * w.os0;
  for (int64_t q = 0; q < w.panels; ++q) {
    for (int xi = 0; xi < 16; ++xi) {
      const float* ap = w.u + (xi * w.panels + q) * C * MR;
      const float* vx = V + xi * C * T;
      float* mx = M + xi * MR * T;
      for (int64_t j = 0; j < used; j += 32) {
        const float* x[2] = {vx + j, vx + j + 16};
        float* c[2] = {mx + j, mx + j + 16};
        const __mmask16 m[2] = {0xFFFF, 0xFFFF};
        direct_tile<MR, 2, false>(ap, C, w.row_off, x, c, m, T, MR,
                                  gemm::OutputStageF{nullptr, nullptr, 0.0f, false});
      }
    }
    const gemm::OutputStageF stage{w.bias_rows + q * MR, nullptr, 0.0f, g.p.fuse_relu};
    const int rows = static_cast<int>(std::min<int64_t>(MR, g.O - q * MR));
    for (int r = 0; r < rows; ++r) {
      float* co = cs + (q * MR + r) * w.os1;
      for (int64_t tr = 0; tr < nrows; tr += row_step) {
        const int64_t th = th0 + tr;
        const bool second = pair && tr + 1 < nrows;  // lanes 8-15: tile row th + 1
        for (int64_t tw = 0; tw < TW; tw += 16) {
          const float* mm = M + r * T + (pair ? tr * 8 : tr * TW + tw);
          float* o[4];
          __mmask16 k[4];
          if (w.pool) {
            o[0] = co + th * w.os2 + tw;
            k[0] = tail_mask16(pair ? std::min<int64_t>(TW, 8) : TW - tw);
            o[1] = second ? co + (th + 1) * w.os2 : o[0];
            k[1] = second ? tail_mask16(TW) : 0;
            wino_output_tile<true>(mm, MR * T, r, stage, o, k);
          } else {
            const int64_t cols = g.OW - 2 * tw;  // conv columns from this vector's first
            const bool bottom = 2 * th + 1 < g.OH;
            o[0] = co + 2 * th * w.os2 + 2 * tw;
            o[2] = o[0] + w.os2;
            if (pair) {  // lanes 8-15: conv rows 2 th + 2 and 2 th + 3
              o[1] = o[0] + 2 * w.os2;
              o[3] = o[0] + 3 * w.os2;
              k[0] = tail_mask16(cols);
              k[1] = second ? k[0] : 0;
              k[2] = bottom ? k[0] : 0;
              k[3] = second && 2 * th + 3 < g.OH ? k[0] : 0;
            } else {
              o[1] = o[0] + 16;
              o[3] = o[2] + 16;
              k[0] = tail_mask16(cols);
              k[1] = cols > 16 ? tail_mask16(cols - 16) : 0;
              k[2] = bottom ? k[0] : 0;
              k[3] = bottom ? k[1] : 0;
            }
            wino_output_tile<false>(mm, MR * T, r, stage, o, k);
          }
        }
      }
    }
  }
}

// Winograd's buffers are the thread's scratch (scratch.h; a fresh allocation of a few hundred KB
// per call cost page faults: 11% of a batch-1 32 -> 64 convolution) up to this size, above it
// allocated for the call only. They start on a 64-byte line (V's and M's vectors are whole
// lines).
constexpr size_t kWinoKeptBytes = size_t{4} << 20;

// The convolution by Winograd F(2x2, 3x3) (above), winograd_applies() being true. `u`: the
// weight transformed already (PackedConvWeight::winograd), or nullptr.
void conv2d_winograd(const TensorDesc& out, const TensorDesc& input, const TensorDesc& weight,
                     const TensorDesc* bias, const ConvGeom& g, const float* u) {
  constexpr int MR = kWinoMR;
  const int64_t C = g.C, O = g.O, panels = (O + MR - 1) / MR;
  std::unique_ptr<float[]> own;
  if (u == nullptr) {
    own.reset(new float[static_cast<size_t>(16 * panels * C * MR)]);
    pack_winograd_weight(weight, O, C, own.get());
    u = own.get();
  }
  const bool pool = g.p.fuse_max_pool2;
  // Tiles: pooled, only those of whole pooling windows; else ceil, the last row / column of an
  // odd size computed and not stored (the padded copy has a zero row and column more).
  const int64_t TH = pool ? g.OH / 2 : (g.OH + 1) / 2, TW = pool ? g.OW / 2 : (g.OW + 1) / 2;
  if (TH == 0 || TW == 0) return;
  const int64_t Hp = g.H + 2 * g.p.padding[0] + 1, Wp = g.W + 2 * g.p.padding[1] + 1;
  const int64_t plane = Hp * Wp, sample = C * plane;
  // Blocks of tile rows of about 64 tiles; with several threads, halved while there are fewer
  // blocks than threads, down to 32 tiles (one direct_tile step: fewer would be computed anyway).
  const bool pair = TW <= 8;
  int64_t rows_blk = pair ? 8 : std::max<int64_t>(1, 64 / TW);
  const int64_t min_rows = pair ? 4 : std::max<int64_t>(1, 32 / TW);
  const int64_t threads = num_threads();
  while (threads > 1 && rows_blk / 2 >= min_rows &&
         g.N * ((TH + rows_blk - 1) / rows_blk) < threads) {
    rows_blk /= 2;
  }
  rows_blk = std::min(rows_blk, TH);
  const int64_t blocks = (TH + rows_blk - 1) / rows_blk;
  // V / M row length, whole 32-tile steps
  const int64_t T = ((pair ? (rows_blk + 1) / 2 * 16 : rows_blk * TW) + 31) / 32 * 32;
  std::vector<int64_t> row_off(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) row_off[c] = c * T;
  const std::vector<float> bias_rows = contiguous_bias(bias, O, panels * MR);
  const int64_t slice = std::clamp<int64_t>((int64_t{4} << 20) / sample, 1, g.N);
  // Slack: the last tiles' loads read up to 4 rows and 34 columns on (lanes never stored).
  const int64_t slack = 4 * Wp + 64;
  AlignedBuffer xp_big;
  float* const xp = scratch_up_to<float>(kWinoInput, static_cast<size_t>(slice * sample + slack),
                                         kWinoKeptBytes, xp_big);
  std::fill(xp + slice * sample, xp + slice * sample + slack, 0.0f);
  for (int64_t n0 = 0; n0 < g.N; n0 += slice) {
    const int64_t nb = std::min(slice, g.N - n0);
    pad_input(input, n0, nb, g, Hp, Wp, xp);
    if (nb < slice) std::fill(xp + nb * sample, xp + nb * sample + slack, 0.0f);
    const WinoPlan plan{&g, u, xp, bias_rows.data(), row_off.data(),
                        static_cast<float*>(out.data) + n0 * out.strides[0], out.strides[0],
                        out.strides[1], out.strides[2], Wp, plane, sample, TH, TW, T, panels,
                        pool, pair};
    parallel_for(0, nb * blocks, 1, [&](int64_t b0, int64_t b1) {
      // The lanes of V past a block's tiles are read (never stored): zeros or stale values.
      // + 16: the last tile's 16-lane loads of V and M run up to 16 floats past 16 * rows * T.
      AlignedBuffer v_big, m_big;
      float* const V = scratch_up_to<float>(kWinoV, static_cast<size_t>(16 * C * T + 16),
                                            kWinoKeptBytes, v_big);
      float* const M = scratch_up_to<float>(kWinoM, static_cast<size_t>(16 * MR * T + 16),
                                            kWinoKeptBytes, m_big);
      for (int64_t bi = b0; bi < b1; ++bi) {
        const int64_t th0 = bi % blocks * rows_blk;
        wino_block(plan, V, M, bi / blocks, th0, std::min(rows_blk, TH - th0));
      }
    });
  }
}

// The float32 forward as an implicit GEMM per group (see the top of the file); false when the
// operands do not qualify (dtypes, or an output whose H and W do not merge into stride 1).
bool conv2d_implicit(const TensorDesc& out, const TensorDesc& input, const TensorDesc& weight,
                     const TensorDesc* bias, const ConvGeom& g) {
  const bool with_bias = has_data(bias);
  if (input.dtype != DType::Float32 || weight.dtype != DType::Float32 ||
      out.dtype != DType::Float32 || (with_bias && bias->dtype != DType::Float32) ||
      merged_stride(out, 2, 3) != 1) {
    return false;
  }
  const WeightMatrices<float> wm(weight, g);
  const int64_t sc = input.strides[1], sh = input.strides[2], sw = input.strides[3];
  const int64_t sn = input.strides[0];
  const bool rows = g.pointwise && merged_stride(input, 2, 3) == 1;
  // Patches from a zero-padded copy (pack_padded_avx512), a batch slice of at most ~16 MB at a
  // time, when the rows are contiguous along W.
  const bool padded = !rows && g.p.stride[1] == 1 && patch_packing_avx512();
  const int64_t Hp = g.H + 2 * g.p.padding[0], Wp = g.W + 2 * g.p.padding[1];
  const int64_t slice =
      padded ? std::clamp<int64_t>((int64_t{4} << 20) / std::max<int64_t>(1, g.C * Hp * Wp), 1, g.N)
             : g.N;
  // pad_input writes all of it: no zero-filling allocation
  const std::unique_ptr<float[]> xp(padded ? new float[static_cast<size_t>(slice * g.C * Hp * Wp)]
                                           : nullptr);
  const bool relu = g.p.fuse_relu;
  float* const out_data = static_cast<float*>(out.data);
  const std::vector<float> bias_rows = contiguous_bias(bias, g.G * g.Og);
  for (int64_t n0 = 0; n0 < g.N; n0 += slice) {
    const int64_t nb = std::min(slice, g.N - n0);
    if (padded) pad_input(input, n0, nb, g, Hp, Wp, xp.get());
    for (int64_t gr = 0; gr < g.G; ++gr) {
      ImplicitGemm ig;
      ig.M = g.Og, ig.N = g.L, ig.K = g.K, ig.batch = nb;
      ig.math = g.p.math;
      ig.b_is_hf32 = padded;  // pad_input rounded the padded copy
      ig.a = wm.group(gr, g);
      ig.c = out_data + n0 * out.strides[0] + gr * g.Og * out.strides[1];
      ig.ldc = out.strides[1], ig.c_batch_stride = out.strides[0];
      const float* x_group = static_cast<const float*>(input.data) + n0 * sn + gr * g.Cg * sc;
      if (rows) {
        ig.pack_b = [&](int64_t n, int64_t k0, int64_t kc, int64_t c0, int64_t nc, int nr,
                        float* dst) { pack_rows(x_group + n * sn, sc, k0, kc, c0, nc, nr, dst); };
      } else if (padded) {
        const float* xp_group = xp.get() + gr * g.Cg * Hp * Wp;
        ig.pack_b = [&, xp_group](int64_t n, int64_t k0, int64_t kc, int64_t c0, int64_t nc,
                                  int nr, float* dst) {
          // nr is 32 (AVX-512 micro-kernels, the only ones used where this packer is)
          NPU_KERNEL_ASSERT(nr % 16 == 0, "conv2d: padded patch packing needs 16-column panels");
          pack_padded_avx512(xp_group + n * g.C * Hp * Wp, Hp, Wp, g, k0, kc, c0, nc, nr, dst);
        };
      } else {
        ig.pack_b = [&](int64_t n, int64_t k0, int64_t kc, int64_t c0, int64_t nc, int nr,
                        float* dst) {
          pack_patches(x_group + n * sn, sc, sh, sw, g, k0, kc, c0, nc, nr, dst);
        };
      }
      // The bias and ReLU are applied by the GEMM's micro-kernels as they store C.
      ig.stage.row_bias = with_bias ? bias_rows.data() + gr * g.Og : nullptr;
      ig.stage.relu = relu;
      gemm_implicit(ig);
    }
  }
  return true;
}

// grad_input of a float32 conv2d with stride 1 as an implicit GEMM: it is the forward
// convolution of grad_output ([N, O, OH, OW]) with the weight flipped in (KH, KW) and with its
// in/out channels swapped per group (wt[g * Cg + c, o, kh, kw] = W[g * Og + o, c, KH-1-kh,
// KW-1-kw], [C, Og, KH, KW]), padding dilation * (k - 1) - padding and the same dilation and
// groups. That padding must not be negative (padding <= dilation * (k - 1)); a stride above 1
// would need a dilated grad_output. It is taken only where it does less work than im2col +
// col2im: its packed B has Og * KH * KW rows per pixel where im2col's column matrix has
// Cg * KH * KW, and each packed element feeds Cg rows of the GEMM (M = Cg), so it needs
// Cg >= Og and Cg >= 16. Measured on 3x3 convolutions, grad_input alone, one kernel thread,
// process CPU time (2026-12-07, loaded 2-core host): 16->16 -19%, 32->32 -14%, 64->64 -11%,
// 128->128 -12%, 64->32 -40%; but 8->16 +20%, 16->64 +66%, 32->64 +17%, 32->128 +44%.
// False when the case does not qualify (the caller then takes the im2col path).
bool conv2d_grad_input_implicit(const TensorDesc& grad_input, const TensorDesc& grad_output,
                                const TensorDesc& weight, const ConvGeom& g) {
  const Conv2dParams& p = g.p;
  const int64_t ph = p.dilation[0] * (g.KH - 1) - p.padding[0];
  const int64_t pw = p.dilation[1] * (g.KW - 1) - p.padding[1];
  if (grad_input.dtype != DType::Float32 || grad_output.dtype != DType::Float32 ||
      weight.dtype != DType::Float32 || p.stride[0] != 1 || p.stride[1] != 1 || ph < 0 ||
      pw < 0 || g.Cg < g.Og || g.Cg < 16 || merged_stride(grad_input, 2, 3) != 1) {
    return false;
  }
  const int64_t khw = g.KH * g.KW;
  std::unique_ptr<float[]> flipped(new float[static_cast<size_t>(g.C * g.Og * khw)]);
  const float* w = static_cast<const float*>(weight.data);
  const int64_t s0 = weight.strides[0], s1 = weight.strides[1], s2 = weight.strides[2],
                s3 = weight.strides[3];
  for (int64_t gr = 0; gr < g.G; ++gr) {
    for (int64_t c = 0; c < g.Cg; ++c) {
      for (int64_t o = 0; o < g.Og; ++o) {
        float* dst = flipped.get() + ((gr * g.Cg + c) * g.Og + o) * khw;
        const float* src = w + (gr * g.Og + o) * s0 + c * s1;
        for (int64_t kh = 0; kh < g.KH; ++kh) {
          for (int64_t kw = 0; kw < g.KW; ++kw) {
            dst[(g.KH - 1 - kh) * g.KW + (g.KW - 1 - kw)] = src[kh * s2 + kw * s3];
          }
        }
      }
    }
  }
  const int64_t sizes[4] = {g.C, g.Og, g.KH, g.KW};
  const TensorDesc wt = TensorDesc::make(flipped.get(), DType::Float32, sizes, 4);
  Conv2dParams pt = p;
  pt.padding[0] = ph, pt.padding[1] = pw;
  pt.fuse_relu = false;
  const ConvGeom gt(grad_output, wt, grad_input, pt);
  NPU_KERNEL_ASSERT(gt.OH == g.H && gt.OW == g.W,
                    "conv2d_backward: the transposed convolution's output is not the input's size");
  return conv2d_implicit(grad_input, grad_output, wt, nullptr, gt);
}

// 16-column chunk i (i < chunks) of one packed row: row[(16 i / nr) * kc * nr + 16 i % nr + l]
// = base[idx[16 i + l]].
__attribute__((target("avx512f"))) void gather_chunks_avx512(const float* base,
                                                              const int32_t* idx, int64_t chunks,
                                                              int nr, int64_t kc, float* row) {
  for (int64_t i = 0; i < chunks; ++i) {
    const int64_t j = i * 16;
    const __m512i vi = _mm512_loadu_si512(idx + j);
    _mm512_storeu_ps(row + (j / nr) * kc * nr + j % nr, _mm512_i32gather_ps(vi, base, 4));
  }
}

// Rows [k0, k0 + kc) x columns [c0, c0 + nc) of the batch's patch matrix P [N * L, K] (row
// (n, oh, ow) is the input patch that output pixel reads, column (c, kh, kw); P is im2col's
// matrix transposed, for all samples) as GEMM B panels of nr columns, gathered from xp, a
// zero-padded copy of the input ([N, C, Hp, Wp], already offset to the group's first channel).
void pack_weight_patches(const float* xp, int64_t Hp, int64_t Wp, const ConvGeom& g,
                         int64_t k0, int64_t kc, int64_t c0, int64_t nc, int nr, float* dst) {
  const Conv2dParams& p = g.p;
  const int64_t khw = g.KH * g.KW, sample = g.C * Hp * Wp;
  const int64_t panels = (nc + nr - 1) / nr;
  std::vector<int64_t> col_off(static_cast<size_t>(nc));
  for (int64_t j = 0; j < nc; ++j) {
    const int64_t col = c0 + j;
    const int64_t c = col / khw, kh = col / g.KW % g.KH, kw = col % g.KW;
    col_off[j] = (c * Hp + kh * p.dilation[0]) * Wp + kw * p.dilation[1];
  }
  int64_t n = k0 / g.L, oh = k0 % g.L / g.OW, ow = k0 % g.OW;
  // Full 16-column chunks by AVX-512 gathers (int32 offsets: a sample's padded planes hold
  // fewer than 2^31 floats), the rest one element at a time.
  const bool gather = patch_packing_avx512() && nr % 16 == 0 && sample < (int64_t{1} << 31);
  const int64_t full_chunks = gather ? nc / 16 : 0;
  std::vector<int32_t> idx(static_cast<size_t>(full_chunks * 16));
  for (int64_t j = 0; j < full_chunks * 16; ++j) idx[j] = static_cast<int32_t>(col_off[j]);
  for (int64_t k = 0; k < kc; ++k) {
    const float* base = xp + n * sample + oh * p.stride[0] * Wp + ow * p.stride[1];
    if (full_chunks > 0) {
      gather_chunks_avx512(base, idx.data(), full_chunks, nr, kc, dst + k * nr);
      const int64_t done = full_chunks * 16;
      for (int64_t j = done; j < panels * nr; ++j) {
        dst[(j / nr) * kc * nr + k * nr + j % nr] = j < nc ? base[col_off[j]] : 0.0f;
      }
    } else {
      for (int64_t q = 0; q < panels; ++q) {
        float* d = dst + q * kc * nr + k * nr;
        const int64_t* off = col_off.data() + q * nr;
        const int64_t cols = std::min<int64_t>(nr, nc - q * nr);
        for (int64_t j = 0; j < cols; ++j) d[j] = base[off[j]];
        std::fill(d + cols, d + nr, 0.0f);
      }
    }
    if (++ow == g.OW) {
      ow = 0;
      if (++oh == g.OH) oh = 0, ++n;
    }
  }
}

// grad_weight of a float32 conv2d as an implicit GEMM per group: gw[g] [Og, K] = GO_g [Og,
// N * L] @ P_g [N * L, K], one GEMM whose reduction runs over the whole batch's pixels.
// GO_g is grad_output's channels of the group with (n, oh, ow) merged (a copy, as grad_output's
// N and channel dims do not merge), and the driver asks pack_weight_patches for each block of
// P_g, gathered into its panels from a zero-padded copy of the input: no im2col matrix goes
// through memory and no per-chunk accumulators are added at the end. Taken where that is less
// work: not for a pointwise conv (whose im2col path reads the input as it is), nor for a K =
// Cg * KH * KW under 64 (a 3-channel first conv's 27), where packing dominates: every gathered
// element then feeds few flops, and the driver packs a column block once per row split.
// Measured (3x3, grad_weight alone, one kernel thread, process CPU time, before -> after):
// 8->16 8x8 b128 0.94 -> 0.61 ms, 16->16 16x16 b32 1.50 -> 1.20, 32->32 3.08 -> 1.95, 64->64
// 32x32 b8 6.85 -> 4.90, 64->32 1.56 -> 0.91; but 3->8 16x16 b128 1.05 -> 1.94 and 3->64 32x32
// b8 0.55 -> 1.38 (so K < 64 keeps im2col). False when the case does not qualify (dtypes, a
// grad_weight whose last three dims do not merge, or the cases above).
bool conv2d_grad_weight_implicit(const TensorDesc& grad_weight, const TensorDesc& grad_output,
                                 const TensorDesc& input, const ConvGeom& g) {
  if (grad_weight.dtype != DType::Float32 || grad_output.dtype != DType::Float32 ||
      input.dtype != DType::Float32 || g.pointwise || g.K < 64 ||
      merged_stride(grad_weight, 1, 3) != 1) {
    return false;
  }
  const int64_t Hp = g.H + 2 * g.p.padding[0], Wp = g.W + 2 * g.p.padding[1];
  const std::unique_ptr<float[]> xp(new float[static_cast<size_t>(g.N * g.C * Hp * Wp)]);
  pad_input(input, 0, g.N, g, Hp, Wp, xp.get());
  const int64_t NL = g.N * g.L;
  const std::unique_ptr<float[]> go(new float[static_cast<size_t>(g.O * NL)]);
  {  // go[o, n * L + l] = grad_output[n, o, l]
    const int64_t strides[4] = {g.L, NL, g.OW, 1};
    copy(TensorDesc::make(go.get(), DType::Float32, grad_output.sizes, 4, strides), grad_output);
  }
  float* const gw = static_cast<float*>(grad_weight.data);
  for (int64_t gr = 0; gr < g.G; ++gr) {
    ImplicitGemm ig;
    ig.M = g.Og, ig.N = g.K, ig.K = NL, ig.batch = 1;
    ig.math = g.p.math;
    ig.b_is_hf32 = true;  // B's patches come from the padded copy, which pad_input rounded
    ig.a = matrix(go.get() + gr * g.Og * NL, DType::Float32, g.Og, NL, NL, 1);
    ig.c = gw + gr * g.Og * grad_weight.strides[0];
    ig.ldc = grad_weight.strides[0], ig.c_batch_stride = 0;
    const float* xp_group = xp.get() + gr * g.Cg * Hp * Wp;
    ig.pack_b = [&, xp_group](int64_t, int64_t k0, int64_t kc, int64_t c0, int64_t nc, int nr,
                              float* dst) {
      pack_weight_patches(xp_group, Hp, Wp, g, k0, kc, c0, nc, nr, dst);
    };
    gemm_implicit(ig);
  }
  return true;
}

// Chunks of samples: [N * i / P, N * (i + 1) / P) for i < P.
int64_t sample_chunks(const ConvGeom& g) {
  const double flops = 2.0 * double(g.O) * double(g.K) * double(g.L);
  if (g.N <= 1 || flops >= 4e6) return std::min<int64_t>(g.N, 1);
  return std::min<int64_t>(g.N, num_threads());
}

template <class S, class T>
void conv2d_typed(const TensorDesc& out, const TensorDesc& input, const TensorDesc& weight,
                  const TensorDesc* bias, const ConvGeom& g) {
  const WeightMatrices<T> wm(weight, g);
  const int64_t P = sample_chunks(g);
  const DType ct = dtype_of<T>();
  parallel_for(0, P, 1, [&](int64_t c0, int64_t c1) {
    std::vector<T> col, obuf;  // sized on first use (a pointwise conv may need neither)
    for (int64_t chunk = c0; chunk < c1; ++chunk) {
      for (int64_t n = g.N * chunk / P; n < g.N * (chunk + 1) / P; ++n) {
        for (int64_t gr = 0; gr < g.G; ++gr) {
          const TensorDesc x3 = sample_channels(input, n, gr * g.Cg, g.Cg);
          TensorDesc b;
          if (!(g.pointwise && as_matrix(x3, &b))) {
            col.resize(static_cast<size_t>(g.K * g.L));
            im2col<S, T>(x3, col.data(), g);
            b = matrix(col.data(), ct, g.K, g.L, g.L, 1);
          }
          const TensorDesc o3 = sample_channels(out, n, gr * g.Og, g.Og);
          TensorDesc c;
          const bool staged = !as_matrix(o3, &c);
          if (staged) {
            obuf.resize(static_cast<size_t>(g.Og * g.L));
            c = matrix(obuf.data(), ct, g.Og, g.L, g.L, 1);
          }
          double beta = 0;
          if (has_data(bias)) {
            const TensorDesc bb = matrix(elem_ptr(*bias, gr * g.Og * bias->strides[0]),
                                         bias->dtype, g.Og, g.L, bias->strides[0], 0);
            copy(c, bb);
            beta = 1;
          }
          kernels::gemm(c, wm.group(gr, g), b, 1.0, beta, g.p.math);
          if (staged) {
            const int64_t sizes[3] = {g.Og, g.OH, g.OW};
            copy(o3, TensorDesc::make(obuf.data(), ct, sizes, 3));
          }
        }
      }
    }
  });
}

template <class S, class T>
void conv2d_backward_typed(const TensorDesc* grad_input, const TensorDesc* grad_weight,
                           const TensorDesc& grad_output, const TensorDesc& input,
                           const TensorDesc& weight, const ConvGeom& g) {
  const bool want_gi = has_data(grad_input), want_gw = has_data(grad_weight);
  if (!want_gi && !want_gw) return;
  const WeightMatrices<T> wm(weight, g);
  const int64_t P = sample_chunks(g);
  const DType ct = dtype_of<T>();
  std::vector<std::vector<T>> gw_part(want_gw ? static_cast<size_t>(std::max<int64_t>(P, 1)) : 0);
  parallel_for(0, P, 1, [&](int64_t c0, int64_t c1) {
    std::vector<T> col(static_cast<size_t>(g.K * g.L)), gobuf, gibuf;
    for (int64_t chunk = c0; chunk < c1; ++chunk) {
      std::vector<T>* acc = want_gw ? &gw_part[chunk] : nullptr;
      if (acc) acc->assign(static_cast<size_t>(g.O * g.K), T(0));
      bool first = true;
      for (int64_t n = g.N * chunk / P; n < g.N * (chunk + 1) / P; ++n) {
        for (int64_t gr = 0; gr < g.G; ++gr) {
          const TensorDesc go3 = sample_channels(grad_output, n, gr * g.Og, g.Og);
          TensorDesc gom;
          if (!as_matrix(go3, &gom)) {
            gobuf.resize(static_cast<size_t>(g.Og * g.L));
            const int64_t sizes[3] = {g.Og, g.OH, g.OW};
            copy(TensorDesc::make(gobuf.data(), ct, sizes, 3), go3);
            gom = matrix(gobuf.data(), ct, g.Og, g.L, g.L, 1);
          }
          const TensorDesc x3 = sample_channels(input, n, gr * g.Cg, g.Cg);
          if (want_gw) {
            TensorDesc xm;
            if (!(g.pointwise && as_matrix(x3, &xm))) {
              im2col<S, T>(x3, col.data(), g);
              xm = matrix(col.data(), ct, g.K, g.L, g.L, 1);
            }
            const TensorDesc gw = matrix(acc->data() + gr * g.Og * g.K, ct, g.Og, g.K, g.K, 1);
            kernels::gemm(gw, gom, transposed(xm), 1.0, first ? 0.0 : 1.0, g.p.math);
          }
          if (want_gi) {
            const TensorDesc gi3 = sample_channels(*grad_input, n, gr * g.Cg, g.Cg);
            const TensorDesc wt = transposed(wm.group(gr, g));
            TensorDesc gim;
            if (g.pointwise && as_matrix(gi3, &gim)) {
              kernels::gemm(gim, wt, gom, 1.0, 0.0, g.p.math);
            } else {
              kernels::gemm(matrix(col.data(), ct, g.K, g.L, g.L, 1), wt, gom, 1.0, 0.0, g.p.math);
              gibuf.assign(static_cast<size_t>(g.Cg * g.H * g.W), T(0));
              col2im(col.data(), gibuf.data(), g);
              const int64_t sizes[3] = {g.Cg, g.H, g.W};
              copy(gi3, TensorDesc::make(gibuf.data(), ct, sizes, 3));
            }
          }
        }
        first = false;
      }
    }
  });
  if (want_gw) {
    std::vector<T> total(static_cast<size_t>(g.O * g.K), T(0));
    for (const auto& part : gw_part) {
      for (size_t i = 0; i < part.size(); ++i) total[i] += part[i];
    }
    copy(*grad_weight, TensorDesc::make(total.data(), ct, grad_weight->sizes, 4));
  }
}

}  // namespace
}  // namespace detail

bool conv2d_supports(DType input, DType weight, DType output) {
  return gemm_supports(input, weight, output);
}

int64_t conv_output_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride,
                         int64_t dilation) {
  const int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1;
  return span < 0 ? 0 : span / stride + 1;
}

namespace detail {
namespace {

// conv2d with a fused 2x2 max pool where the direct convolution does not take it: the
// convolution into a temporary, then max_pool2d into out.
void conv2d_then_pool(const TensorDesc& out, const TensorDesc& input, const TensorDesc& weight,
                      const TensorDesc* bias, const Conv2dParams& p, const ConvGeom& g) {
  Conv2dParams full = p;
  full.fuse_max_pool2 = false;
  std::vector<char> buf(static_cast<size_t>(g.N * g.O * g.OH * g.OW) * dtype_size(out.dtype));
  const TensorDesc conv = TensorDesc::make(buf.data(), out.dtype, {g.N, g.O, g.OH, g.OW});
  conv2d(conv, input, weight, bias, full);
  Pool2dParams pp;
  pp.kernel[0] = pp.kernel[1] = pp.stride[0] = pp.stride[1] = 2;
  TensorDesc no_indices = out;
  no_indices.data = nullptr, no_indices.dtype = DType::Int64;
  max_pool2d(out, no_indices, conv, pp);
}

}  // namespace
}  // namespace detail

void conv2d(const TensorDesc& out, const TensorDesc& input, const TensorDesc& weight,
            const TensorDesc* bias, const Conv2dParams& p) {
  using namespace detail;
  NPU_KERNEL_ASSERT(conv2d_supports(input.dtype, weight.dtype, out.dtype), "conv2d dtypes");
  const ConvGeom g(input, weight, out, p);
  if (out.numel() == 0) return;
  if (winograd_applies(out, input, weight, bias, g)) {
    conv2d_winograd(out, input, weight, bias, g, nullptr);
    return;
  }
  if (p.fuse_max_pool2) {
    if (g.K == 0 || !conv2d_direct(out, input, weight, bias, g, nullptr)) {
      conv2d_then_pool(out, input, weight, bias, p, g);
    }
    return;
  }
  if (g.K == 0) {  // no input channels: only the bias (or 0)
    if (has_data(bias)) {
      TensorDesc bb = out;
      bb.data = bias->data, bb.dtype = bias->dtype;
      bb.strides[0] = bb.strides[2] = bb.strides[3] = 0, bb.strides[1] = bias->strides[0];
      copy(out, bb);
    } else {
      fill(out, 0);
    }
  } else if (conv2d_direct(out, input, weight, bias, g, nullptr) ||
             conv2d_implicit(out, input, weight, bias, g)) {
    return;  // relu fused
  } else {
    dispatch_nn_float(input.dtype, [&]<class S, class T>() {
      conv2d_typed<S, T>(out, input, weight, bias, g);
    });
  }
  if (p.fuse_relu) {
    unary(UnaryOp::Relu, out, out,
          out.dtype == DType::Float64 ? DType::Float64 : DType::Float32);
  }
}

PackedConvWeight::PackedConvWeight(const TensorDesc& weight, int64_t groups)
    : source(weight.data), out_channels(weight.sizes[0]), groups(groups) {
  NPU_KERNEL_ASSERT(weight.ndim == 4 && weight.dtype == DType::Float32 && groups >= 1 &&
                        out_channels % groups == 0,
                    "PackedConvWeight takes a float32 [C_out, C_in / groups, KH, KW] weight");
  // The geometry of the weight alone: input [1, C_in, KH, KW], output [1, C_out, 1, 1].
  const float unused = 0;
  const TensorDesc in = TensorDesc::make(
      &unused, DType::Float32, {1, weight.sizes[1] * groups, weight.sizes[2], weight.sizes[3]});
  const TensorDesc out = TensorDesc::make(&unused, DType::Float32, {1, out_channels, 1, 1});
  Conv2dParams p;
  p.groups = groups;
  const detail::ConvGeom g(in, weight, out, p);
  k = g.K;
  constexpr int MR = detail::kDirectMR;
  panels.resize(static_cast<size_t>(g.G * ((g.Og + MR - 1) / MR) * g.K * MR));
  detail::pack_direct_weight(weight, g, panels.data());
  // The Winograd form only where winograd_applies() can take it: on a host without AVX-512 it
  // would never be read. Both forms are kept: the packed weight is shared by every convolution
  // of this weight (PreparedWeights keys it by weight and groups), and one with a stride, a
  // dilation, HF32 or without Conv2dParams::winograd takes the direct convolution's panels.
  if (detail::winograd_weight_fits(g) && detail::has_avx512()) {
    winograd.resize(static_cast<size_t>(16 * ((g.O + 7) / 8) * 8 * g.C));
    detail::pack_winograd_weight(weight, g.O, g.C, winograd.data());
  }
}

void conv2d_prepacked(const TensorDesc& out, const TensorDesc& input, const TensorDesc& weight,
                      const PackedConvWeight& packed, const TensorDesc* bias,
                      const Conv2dParams& p) {
  using namespace detail;
  NPU_KERNEL_ASSERT(conv2d_supports(input.dtype, weight.dtype, out.dtype), "conv2d dtypes");
  const ConvGeom g(input, weight, out, p);
  NPU_KERNEL_ASSERT(packed.source == weight.data && packed.out_channels == g.O &&
                        packed.groups == g.G && packed.k == g.K,
                    "conv2d_prepacked: the packed weight was made from another weight");
  if (out.numel() != 0 && !packed.winograd.empty() &&
      winograd_applies(out, input, weight, bias, g)) {
    conv2d_winograd(out, input, weight, bias, g, packed.winograd.data());
    return;
  }
  if (out.numel() != 0 && g.K != 0 &&
      conv2d_direct(out, input, weight, bias, g, packed.panels.data())) {
    return;
  }
  conv2d(out, input, weight, bias, p);
}

void conv2d_backward(const TensorDesc* grad_input, const TensorDesc* grad_weight,
                     const TensorDesc* grad_bias, const TensorDesc& grad_output,
                     const TensorDesc& input, const TensorDesc& weight, const Conv2dParams& p) {
  using namespace detail;
  NPU_KERNEL_ASSERT(conv2d_supports(input.dtype, weight.dtype, grad_output.dtype),
                    "conv2d_backward dtypes");
  NPU_KERNEL_ASSERT(!p.fuse_max_pool2, "conv2d_backward: fuse_max_pool2 is forward-only");
  const ConvGeom g(input, weight, grad_output, p);
  if (has_data(grad_bias)) {
    TensorDesc gb = grad_output;  // [1, O, 1, 1] keepdim view of grad_bias
    gb.data = grad_bias->data, gb.dtype = grad_bias->dtype;
    gb.sizes[0] = gb.sizes[2] = gb.sizes[3] = 1;
    gb.strides[0] = gb.strides[2] = gb.strides[3] = 0, gb.strides[1] = grad_bias->strides[0];
    reduce(ReduceOp::Sum, gb, grad_output,
           grad_output.dtype == DType::Float64 ? DType::Float64 : DType::Float32);
  }
  // Empty output or no reduction dimension: the gradients are zeros.
  if (g.L == 0 || g.K == 0 || g.Og == 0) {
    if (has_data(grad_input)) fill(*grad_input, 0);
    if (has_data(grad_weight)) fill(*grad_weight, 0);
    return;
  }
  const TensorDesc* im2col_grad_input = grad_input;
  if (has_data(grad_input) && conv2d_grad_input_implicit(*grad_input, grad_output, weight, g)) {
    im2col_grad_input = nullptr;  // done
  }
  const TensorDesc* im2col_grad_weight = grad_weight;
  if (has_data(grad_weight) && conv2d_grad_weight_implicit(*grad_weight, grad_output, input, g)) {
    im2col_grad_weight = nullptr;
  }
  dispatch_nn_float(input.dtype, [&]<class S, class T>() {
    conv2d_backward_typed<S, T>(im2col_grad_input, im2col_grad_weight, grad_output, input,
                                weight, g);
  });
}

}  // namespace npu::kernels
