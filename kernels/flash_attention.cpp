// Flash attention, forward and backward (FlashAttention-2's tiling on the CPU).
//
// How it works:
//  - Work items are (sequence, head, block of kBr query rows). An item loads its query block
//    as float, then walks the key blocks of kBc keys: S = scale * Q K^T (one GEMM), masked
//    entries -> -inf, then the online softmax: the running row max m and sum l are updated
//    and the accumulator O is rescaled by exp(m_old - m_new) before O += P V (one GEMM).
//    Blocks the band leaves entirely invisible are skipped; blocks it covers entirely need
//    no per-element test.
//  - The forward keeps m and l per row (softmax_max / softmax_sum): O(S) extra memory.
//  - The backward recomputes P = exp(S - m) / l block by block, after D_i = rowsum(dO * O).
//    With enough (sequence, kv head) pairs for the pool, one item per pair walks its key
//    blocks and, for each, the query blocks of every query head of its group: dV += P^T dO,
//    dK += dS^T Q, dQ += dS K with dQ in a float buffer of the item (O(S x D)). With fewer
//    pairs (one long head), dK / dV items run over key blocks and dQ items over query blocks
//    separately: S is recomputed twice, but the pool stays busy. Neither needs atomics, and
//    the results do not depend on the thread count within a strategy.
//  - A position bias (pse) is converted and added block by block, like the scores it shifts;
//    its gradient is scale * dS, written by the item that owns the key block (so no two items
//    write one element). Prefix columns and per-sequence bands only widen / replace the band
//    that classifies blocks.
//  - Dropout is a pure function of (seed, offset, sequence, head, i, j), so the backward
//    replays the forward's mask without storing it.
// Blocks are float buffers; the GEMMs are the library's (called inside a parallel_for they run
// on the calling thread).
// Head dims that are multiples of 32 with no bias and no dropout take the AVX-512 tile path
// instead ("the AVX-512 path" below): the same algorithm on key-major tiles with its own
// micro-kernel, one (sequence, head) per item and its operands laid out once per item; with
// bfloat16 inputs and AMX, its tile products run on the tile unit ("the AMX path").
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "amx_tiles.h"
#include "convert.h"
#include "dtype_traits.h"
#include "kernel_assert.h"
#include "scratch.h"
#include "vec_math.h"
#include "npu/kernels/attention.h"
#include "npu/kernels/matmul.h"
#include "npu/kernels/thread_pool.h"

namespace npu::kernels {
namespace detail {
namespace {

constexpr int64_t kBr = 128;  // query rows per block (64-512 tried; 128 x 256 was the best)
constexpr int64_t kBc = 256;  // keys per block
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Scratch for the block loops, per thread and reused across items and calls (every block writes
// what it reads; the GEMMs never read C when beta is 0). A vector per parallel_for chunk cost an
// mmap, a zeroing pass and a munmap each time (the buffers are sized for 128 x 256 tiles, up to
// 435 KB), most of the kernel for short sequences. One buffer serves the forward block, the key
// block's backward and the dQ loop: each takes it once per chunk, and none runs inside another.
struct BlockScratch;
float* block_scratch(size_t floats) { return thread_scratch<BlockScratch, float>(floats); }

uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Dropout keep test: 24 random bits against keep_prob * 2^24.
struct Dropout {
  bool on = false;
  uint32_t threshold = 0;
  float inv_keep = 1;
  uint64_t seed = 0, offset = 0;

  explicit Dropout(const FlashAttentionArgs& a)
      : on(a.keep_prob < 1.0), seed(a.seed), offset(a.offset) {
    threshold = static_cast<uint32_t>(std::llround(a.keep_prob * 16777216.0));
    inv_keep = a.keep_prob > 0 ? static_cast<float>(1.0 / a.keep_prob) : 0.0f;
  }
  uint64_t head_key(int64_t seq, int64_t head) const {
    return mix64(seed ^ mix64(offset + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(
                                           (seq << 20) + head + 1)));
  }
  bool keep(uint64_t hk, int64_t i, int64_t j) const {
    uint64_t h = mix64(hk + (static_cast<uint64_t>(i) << 32) + static_cast<uint64_t>(j));
    return static_cast<uint32_t>(h >> 40) < threshold;
  }
};

// One sequence of the batch: where its rows lie in the descriptors.
struct Seq {
  int64_t index;   // batch index (or sequence number in varlen)
  int64_t b;       // dim-0 index into q / k / v
  int64_t q0, sq;  // first row and length in q's S dim
  int64_t k0, skv;
};

std::vector<Seq> sequences(const FlashAttentionArgs& a) {
  std::vector<Seq> out;
  if (a.cu_seqlens_q) {
    for (int64_t s = 0; s < a.num_seqs; ++s) {
      out.push_back({s, 0, a.cu_seqlens_q[s], a.cu_seqlens_q[s + 1] - a.cu_seqlens_q[s],
                     a.cu_seqlens_kv[s], a.cu_seqlens_kv[s + 1] - a.cu_seqlens_kv[s]});
    }
  } else {
    for (int64_t b = 0; b < a.q.sizes[0]; ++b) {
      out.push_back({b, b, 0, a.q.sizes[2], 0, a.k.sizes[2]});
    }
  }
  return out;
}

// Rows of one (batch, head) of a 4-D descriptor: load / store as contiguous float rows.
struct HeadRows {
  char* base = nullptr;
  DType dtype = DType::Float32;
  int64_t esize = 4, row_stride = 0, col_stride = 1, cols = 0;

  HeadRows(const TensorDesc& t, int64_t b, int64_t n, int64_t s0)
      : dtype(t.dtype), esize(static_cast<int64_t>(dtype_size(t.dtype))),
        row_stride(t.strides[2]), col_stride(t.strides[3]), cols(t.sizes[3]) {
    const int64_t off = b * t.strides[0] + n * t.strides[1] + s0 * t.strides[2];
    base = static_cast<char*>(t.data) + off * esize;
  }
  // float32 rows with unit column stride are copied as they are (one copy when they are
  // contiguous): no conversion call per row.
  bool plain() const { return dtype == DType::Float32 && col_stride == 1; }
  void load(int64_t r0, int64_t rows, float* dst) const {
    if (plain()) {
      const float* src = reinterpret_cast<const float*>(base) + r0 * row_stride;
      if (row_stride == cols) {
        std::memcpy(dst, src, sizeof(float) * static_cast<size_t>(rows * cols));
      } else {
        for (int64_t r = 0; r < rows; ++r) {
          std::memcpy(dst + r * cols, src + r * row_stride, sizeof(float) * cols);
        }
      }
      return;
    }
    ConvertFn fn = convert_fn(dtype, DType::Float32);
    for (int64_t r = 0; r < rows; ++r) {
      fn(base + (r0 + r) * row_stride * esize, col_stride, dst + r * cols, 1, cols);
    }
  }
  // Rows [r0, r0 + rows) as float rows: where they are when plain() (no copy), else loaded
  // into dst. Returns the first row; *ld receives the distance between rows.
  const float* rows_at(int64_t r0, int64_t rows, float* dst, int64_t* ld) const {
    if (plain()) {
      *ld = row_stride;
      return reinterpret_cast<const float*>(base) + r0 * row_stride;
    }
    load(r0, rows, dst);
    *ld = cols;
    return dst;
  }
  // Rows [r0, r0 + rows) as a [rows, cols] matrix (transposed: [cols, rows]) in place, for a
  // GEMM operand: the GEMM packs (and converts) it itself, so no copy is needed.
  TensorDesc matrix(int64_t r0, int64_t rows, bool transposed) const {
    const void* p = base + r0 * row_stride * esize;
    return transposed ? TensorDesc::make(p, dtype, {cols, rows}, {col_stride, row_stride})
                      : TensorDesc::make(p, dtype, {rows, cols}, {row_stride, col_stride});
  }
  void store(int64_t r0, int64_t rows, const float* src) const {
    if (plain()) {
      float* dst = reinterpret_cast<float*>(base) + r0 * row_stride;
      if (row_stride == cols) {
        std::memcpy(dst, src, sizeof(float) * static_cast<size_t>(rows * cols));
      } else {
        for (int64_t r = 0; r < rows; ++r) {
          std::memcpy(dst + r * row_stride, src + r * cols, sizeof(float) * cols);
        }
      }
      return;
    }
    ConvertFn fn = convert_fn(DType::Float32, dtype);
    for (int64_t r = 0; r < rows; ++r) {
      fn(src + r * cols, 1, base + (r0 + r) * row_stride * esize, col_stride, cols);
    }
  }
};

// softmax_max / softmax_sum rows: [B, N, S, R] float32.
struct StatRows {
  float* base;
  int64_t row_stride, rep, rep_stride;
  StatRows(const TensorDesc& t, int64_t b, int64_t n, int64_t s0)
      : row_stride(t.strides[2]), rep(t.sizes[3]), rep_stride(t.strides[3]) {
    base = static_cast<float*>(t.data) + b * t.strides[0] + n * t.strides[1] + s0 * t.strides[2];
  }
  float get(int64_t r) const { return base[r * row_stride]; }
  void set(int64_t r, float v) const {
    for (int64_t k = 0; k < rep; ++k) base[r * row_stride + k * rep_stride] = v;
  }
};

// The visible set of one (sequence, head): band (or the sequence's own band), the prefix
// columns, and the optional explicit mask.
struct Visibility {
  const uint8_t* mask = nullptr;
  int64_t mask_si = 0, mask_sj = 0;
  int64_t lo, hi;       // the band: lo <= j - i <= hi
  int64_t prefix = 0;   // keys j < prefix are visible from every row (before the mask)

  Visibility(const FlashAttentionArgs& a, const Seq& s, int64_t head) {
    const AttentionBand& band = a.seq_bands ? a.seq_bands[s.index] : a.band;
    const int64_t origin = band.bottom_right ? s.skv - s.sq : 0;
    lo = origin - std::min<int64_t>(band.pre, INT64_MAX / 4);
    hi = origin + std::min<int64_t>(band.next, INT64_MAX / 4);
    if (a.prefix) prefix = a.prefix[s.index];
    if (a.mask && a.mask->data) {
      const TensorDesc& m = *a.mask;
      const int64_t b = m.sizes[0] == 1 ? 0 : s.index, n = m.sizes[1] == 1 ? 0 : head;
      mask = static_cast<const uint8_t*>(m.data) + b * m.strides[0] + n * m.strides[1];
      mask_si = m.strides[2];
      mask_sj = m.strides[3];
    }
  }
  // 0: nothing visible in the block; 1: everything; 2: test each element.
  int classify(int64_t i0, int64_t i1, int64_t j0, int64_t j1) const {
    const int64_t dmin = j0 - (i1 - 1), dmax = (j1 - 1) - i0;
    const bool band_none = dmax < lo || dmin > hi, band_all = dmin >= lo && dmax <= hi;
    if (band_none && j0 >= prefix) return 0;
    if (mask) return 2;
    return band_all || j1 <= prefix ? 1 : 2;
  }
  bool visible(int64_t i, int64_t j) const {
    const int64_t d = j - i;
    if ((d < lo || d > hi) && j >= prefix) return false;
    return !(mask && mask[i * mask_si + j * mask_sj]);
  }
};

// The position bias of one (sequence, head): adds scale * pse to a block of scores.
struct PseRows {
  const char* base = nullptr;
  DType dtype = DType::Float32;
  int64_t esize = 4, row_stride = 0, col_stride = 1;
  mutable std::vector<float> row;  // one converted bias row

  PseRows(const FlashAttentionArgs& a, const Seq& s, int64_t head) {
    if (!a.pse || !a.pse->data) return;
    const TensorDesc& t = *a.pse;
    dtype = t.dtype;
    esize = static_cast<int64_t>(dtype_size(t.dtype));
    const int64_t b = t.sizes[0] == 1 ? 0 : s.index, n = t.sizes[1] == 1 ? 0 : head;
    row_stride = t.sizes[2] == 1 ? 0 : t.strides[2];  // one row for every query ([B, N, 1, Skv])
    col_stride = t.strides[3];
    base = static_cast<const char*>(t.data) + (b * t.strides[0] + n * t.strides[1]) * esize;
    row.resize(static_cast<size_t>(kBc));
  }
  explicit operator bool() const { return base != nullptr; }
  // S[r * ld + c] += scale * pse[i0 + r, j0 + c]
  void add(float* S, int64_t rows, int64_t cols, int64_t ld, int64_t i0, int64_t j0,
           float scale) const {
    ConvertFn fn = convert_fn(dtype, DType::Float32);
    for (int64_t r = 0; r < rows; ++r) {
      if (r == 0 || row_stride != 0) {
        fn(base + ((i0 + r) * row_stride + j0 * col_stride) * esize, col_stride, row.data(), 1,
           cols);
      }
      float* s = S + r * ld;
      for (int64_t c = 0; c < cols; ++c) s[c] += scale * row[c];
    }
  }
};

// The gradient of one (sequence, head)'s bias: scale * dS per score, or summed over the rows
// when the bias has one row. Float32, written by the one item that owns the key block.
struct GradPseRows {
  float* base = nullptr;
  int64_t row_stride = 0, col_stride = 1;
  bool sum_rows = false;

  GradPseRows(const TensorDesc* g, const Seq& s, int64_t head) {
    if (!g || !g->data) return;
    base = static_cast<float*>(g->data) + s.index * g->strides[0] + head * g->strides[1];
    sum_rows = g->sizes[2] == 1;
    row_stride = g->strides[2];
    col_stride = g->strides[3];
  }
  explicit operator bool() const { return base != nullptr; }
  // dS: rows x cols, leading dim cols, not yet scaled.
  void put(const float* dS, int64_t rows, int64_t cols, int64_t i0, int64_t j0,
           float scale) const {
    for (int64_t c = 0; c < cols; ++c) {
      float* g = base + (j0 + c) * col_stride;
      if (sum_rows) {
        double acc = 0;
        for (int64_t r = 0; r < rows; ++r) acc += dS[r * cols + c];
        *g += scale * static_cast<float>(acc);
      } else {
        for (int64_t r = 0; r < rows; ++r) g[(i0 + r) * row_stride] = scale * dS[r * cols + c];
      }
    }
  }
};

// Rows [r0, r0 + rows) of an int8 key / value head, dequantised into dst as floats:
// (x + offset) * scale, scale / offset read at the same (b, h, position, d) as x.
void load_dequantised(const TensorDesc& t, const TensorDesc& scale, const TensorDesc* offset,
                      int64_t b, int64_t h, int64_t s0, int64_t r0, int64_t rows, float* dst,
                      std::vector<float>& tmp) {
  const HeadRows hr(t, b, h, s0);
  hr.load(r0, rows, dst);
  const int64_t cols = hr.cols;
  tmp.resize(static_cast<size_t>(2 * cols));
  float* sc = tmp.data();
  float* off = sc + cols;
  auto row_of = [&](const TensorDesc& d, int64_t pos, float* out) {
    const int64_t es = static_cast<int64_t>(dtype_size(d.dtype));
    const char* p = static_cast<const char*>(d.data) +
                    (b * d.strides[0] + h * d.strides[1] + pos * d.strides[2]) * es;
    convert_fn(d.dtype, DType::Float32)(p, d.strides[3], out, 1, cols);
  };
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t pos = s0 + r0 + r;
    row_of(scale, pos, sc);
    if (offset) {
      row_of(*offset, pos, off);
    } else {
      std::fill(off, off + cols, 0.0f);
    }
    float* x = dst + r * cols;
    for (int64_t c = 0; c < cols; ++c) x[c] = (x[c] + off[c]) * sc[c];
  }
}

TensorDesc mat(const float* p, int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  return TensorDesc::make(p, DType::Float32, {rows, cols}, {rs, cs});
}

// Masks a block of scores (rows x cols, leading dim ld) to -inf where invisible.
void apply_visibility(float* S, int64_t rows, int64_t cols, int64_t ld, const Visibility& vis,
                      int64_t i0, int64_t j0) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      if (!vis.visible(i0 + r, j0 + c)) S[r * ld + c] = kNegInf;
    }
  }
}

float row_max(const float* x, int64_t n) {
  __m256 m = _mm256_set1_ps(kNegInf);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
  float r = hmax256(m);
  for (; i < n; ++i) r = std::max(r, x[i]);
  return r;
}

// x = exp(x - shift) * mul in place; returns sum of exp(x - shift) (before mul).
float exp_row(float* x, int64_t n, float shift, float mul) {
  const __m256 s = _mm256_set1_ps(shift), k = _mm256_set1_ps(mul);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
    acc = _mm256_add_ps(acc, e);
    _mm256_storeu_ps(x + i, _mm256_mul_ps(e, k));
  }
  float sum = hsum256(acc);
  if (i < n) {
    alignas(32) float tmp[8];
    for (int t = 0; t < 8; ++t) tmp[t] = i + t < n ? x[i + t] : kNegInf;
    __m256 e = exp256(_mm256_sub_ps(_mm256_load_ps(tmp), s));
    _mm256_store_ps(tmp, e);
    for (int64_t t = 0; i + t < n; ++t) {
      sum += tmp[t];
      x[i + t] = tmp[t] * mul;
    }
  }
  return sum;
}

struct Dims {
  int64_t nq, nkv, group, d, dv;
};

Dims dims_of(const FlashAttentionArgs& a) {
  Dims d{a.q.sizes[1], a.k.sizes[1], 0, a.q.sizes[3], a.v.sizes[3]};
  NPU_KERNEL_ASSERT(d.nkv > 0 && d.nq % d.nkv == 0, "kv heads must divide query heads");
  d.group = d.nq / d.nkv;
  return d;
}

// ---- forward ----------------------------------------------------------------------------

// Rows [i0, i0 + rows) of one (sequence, head) done: O (unnormalised, [rows, Dv]) divided by
// the softmax sums l (a row with nothing visible stays 0), stored, and the statistics m and l
// written for the backward.
void finish_rows(const Seq& s, int64_t n, int64_t i0, int64_t rows, int64_t Dv, float* O,
                 const float* m, const float* l, const TensorDesc& out, const TensorDesc& smax,
                 const TensorDesc& ssum) {
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = l[r] > 0 ? 1.0f / l[r] : 0.0f;
    for (int64_t c = 0; c < Dv; ++c) O[r * Dv + c] *= inv;
  }
  HeadRows(out, s.b, n, s.q0).store(i0, rows, O);
  const StatRows sm(smax, s.b, n, s.q0 + i0), ss(ssum, s.b, n, s.q0 + i0);
  for (int64_t r = 0; r < rows; ++r) {
    sm.set(r, m[r]);
    ss.set(r, l[r]);
  }
}

void forward_block(const FlashAttentionArgs& a, const Dims& dm, const Dropout& drop,
                   const Seq& s, int64_t n, int64_t i0, const TensorDesc& out,
                   const TensorDesc& smax, const TensorDesc& ssum) {
  const int64_t rows = std::min(kBr, s.sq - i0), D = dm.d, Dv = dm.dv, h = n / dm.group;
  // An int8 key / value (antiquant) is dequantised block by block into Kq / Vq.
  const bool dequant = a.k.dtype == DType::Int8;
  const int64_t kv_floats = dequant ? kBc * (D + Dv) : 0;
  float* Q = block_scratch(static_cast<size_t>(kBr * D + kBr * kBc + kBr * Dv + 2 * kBr +
                                               kv_floats));
  float* S = Q + kBr * D;
  float* O = S + kBr * kBc;
  float* m = O + kBr * Dv;
  float* l = m + kBr;
  float* Kq = l + kBr;
  float* Vq = Kq + kBc * D;
  std::vector<float> dequant_tmp;
  std::fill(O, O + rows * Dv, 0.0f);
  std::fill(m, m + rows, kNegInf);
  std::fill(l, l + rows, 0.0f);
  HeadRows(a.q, s.b, n, s.q0).load(i0, rows, Q);
  const HeadRows kr(a.k, s.b, h, s.k0), vr(a.v, s.b, h, s.k0);
  const Visibility vis(a, s, n);
  const PseRows pse(a, s, n);
  const uint64_t hk = drop.on ? drop.head_key(s.index, n) : 0;
  for (int64_t j0 = 0; j0 < s.skv; j0 += kBc) {
    const int64_t cols = std::min(kBc, s.skv - j0);
    const int cls = vis.classify(i0, i0 + rows, j0, j0 + cols);
    if (cls == 0) continue;
    if (dequant) {
      load_dequantised(a.k, *a.antiquant.k_scale, a.antiquant.k_offset, s.b, h, s.k0, j0, cols,
                       Kq, dequant_tmp);
      load_dequantised(a.v, *a.antiquant.v_scale, a.antiquant.v_offset, s.b, h, s.k0, j0, cols,
                       Vq, dequant_tmp);
    }
    gemm(mat(S, rows, cols, cols, 1), mat(Q, rows, D, D, 1),
         dequant ? mat(Kq, D, cols, 1, D) : kr.matrix(j0, cols, true), a.scale, 0.0);
    if (pse) pse.add(S, rows, cols, cols, i0, j0, static_cast<float>(a.scale));
    if (cls == 2) apply_visibility(S, rows, cols, cols, vis, i0, j0);
    for (int64_t r = 0; r < rows; ++r) {
      float* row = S + r * cols;
      const float mnew = std::max(m[r], row_max(row, cols));
      if (mnew == kNegInf) {  // nothing visible in this row yet
        std::fill(row, row + cols, 0.0f);
        continue;
      }
      const float sum = exp_row(row, cols, mnew, 1.0f);
      const float corr = std::exp(m[r] - mnew);
      l[r] = l[r] * corr + sum;
      m[r] = mnew;
      if (corr != 1.0f) {
        for (int64_t c = 0; c < Dv; ++c) O[r * Dv + c] *= corr;
      }
      if (drop.on) {
        for (int64_t c = 0; c < cols; ++c) {
          row[c] = drop.keep(hk, i0 + r, j0 + c) ? row[c] * drop.inv_keep : 0.0f;
        }
      }
    }
    gemm(mat(O, rows, Dv, Dv, 1), mat(S, rows, cols, cols, 1),
         dequant ? mat(Vq, cols, Dv, Dv, 1) : vr.matrix(j0, cols, false), 1.0, 1.0);
  }
  finish_rows(s, n, i0, rows, Dv, O, m, l, out, smax, ssum);
}

// ---- few query rows: decoding ----------------------------------------------------------
//
// A sequence with at most kDecodeRows query rows (one new token, or a few speculative ones,
// against a KV cache) would fill a 64- or 128-row query block with padding: its tile or GEMM
// work is that of 64-128 rows. Here each (sequence, head) reads its keys and values once: the
// scores of its rows over all keys by dot products (Skv floats per row of scratch), one exact
// softmax, then O = P V by axpys. Same masks, bias and statistics as forward_block. Float32
// keys and values with unit column stride (a KV cache) are read where they are: copying each
// (sequence, head)'s rows into scratch first, once per query head of a group, was 8% of a
// decode step of decode_bench's LLaMA at batch 8 (38 MB of memcpy a step).
constexpr int64_t kDecodeRows = 8;

float dot_f32(const float* x, const float* y, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc0);
  }
  float sum = hsum256(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum += x[i] * y[i];
  return sum;
}

void decode_block(const FlashAttentionArgs& a, const Dims& dm, const Seq& s, int64_t n,
                  const TensorDesc& out, const TensorDesc& smax, const TensorDesc& ssum) {
  const int64_t rows = s.sq, skv = s.skv, D = dm.d, Dv = dm.dv, h = n / dm.group;
  float* Q = block_scratch(static_cast<size_t>(rows * D + rows * skv + rows * Dv + 2 * rows +
                                               kBc * std::max(D, Dv)));
  float* S = Q + rows * D;  // [rows, skv]
  float* O = S + rows * skv;
  float* m = O + rows * Dv;
  float* l = m + rows;
  float* KV = l + rows;  // one block of keys, then of values, as float rows
  HeadRows(a.q, s.b, n, s.q0).load(0, rows, Q);
  const HeadRows kr(a.k, s.b, h, s.k0), vr(a.v, s.b, h, s.k0);
  const Visibility vis(a, s, n);
  const PseRows pse(a, s, n);
  const float scale = static_cast<float>(a.scale);
  for (int64_t j0 = 0; j0 < skv; j0 += kBc) {
    const int64_t cols = std::min(kBc, skv - j0);
    const int cls = vis.classify(0, rows, j0, j0 + cols);
    if (cls == 0) {
      for (int64_t r = 0; r < rows; ++r) std::fill_n(S + r * skv + j0, cols, kNegInf);
      continue;
    }
    int64_t ldk;
    const float* K = kr.rows_at(j0, cols, KV, &ldk);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        // A key the row cannot see costs no product (a static KV cache's unfilled tail:
        // about half of its keys over a generate); apply_visibility below sets its -inf.
        S[r * skv + j0 + c] = cls == 2 && !vis.visible(r, j0 + c)
                                  ? kNegInf
                                  : scale * dot_f32(Q + r * D, K + c * ldk, D);
      }
    }
    if (pse) pse.add(S + j0, rows, cols, skv, 0, j0, scale);
    if (cls == 2) apply_visibility(S + j0, rows, cols, skv, vis, 0, j0);
  }
  std::fill(O, O + rows * Dv, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    m[r] = row_max(S + r * skv, skv);
    l[r] = m[r] == kNegInf ? 0.0f : exp_row(S + r * skv, skv, m[r], 1.0f);
  }
  for (int64_t j0 = 0; j0 < skv; j0 += kBc) {
    const int64_t cols = std::min(kBc, skv - j0);
    if (vis.classify(0, rows, j0, j0 + cols) == 0) continue;
    int64_t ldv;
    const float* V = vr.rows_at(j0, cols, KV, &ldv);
    for (int64_t r = 0; r < rows; ++r) {
      if (m[r] == kNegInf) continue;  // nothing visible: the row's output is 0
      const float* p = S + r * skv + j0;
      float* o = O + r * Dv;
      for (int64_t c = 0; c < cols; ++c) {
        const float w = p[c];
        if (w == 0.0f) continue;
        const float* v = V + c * ldv;
        for (int64_t d = 0; d < Dv; ++d) o[d] += w * v[d];
      }
    }
  }
  finish_rows(s, n, 0, rows, Dv, O, m, l, out, smax, ssum);
}

// ---- few query rows, grouped heads: one item per (sequence, kv head) ---------------------
//
// decode_block's work for every query head of a grouped-query group at once, on AVX-512, for
// float32 keys and values read in place and head dims that are multiples of 16:
//  - the G query heads' rows (R = G x rows) share each key row's load: a score is the zmm
//    FMAs of the head dim and one reduce; a key no row sees costs nothing;
//  - keys past the last one any row sees (a static KV cache's unfilled tail) are left out of
//    the softmax and of P V;
//  - O = P V four rows and up to 64 columns at a time in registers: each value row is loaded
//    once per four rows instead of once per row, and O is not read and written per key.
// decode_block ran each head of a group as its own item (the group's keys and values read
// once per head, a dot product of AVX2 halves and a scalar axpy per key): 12 us of each decode
// step's 8 attention calls in decode_bench's LLaMA at batch 1. Same statistics and masks as
// decode_block; sums are added in another order.
std::atomic<bool> g_decode_grouped{true};
std::atomic<int64_t> g_decode_grouped_items{0};  // testing: items run by decode_group

bool fast_path_cpu();  // AVX-512 F / BW / VL / DQ (below)

bool decode_grouped_applies(const FlashAttentionArgs& a, const Dims& dm) {
  auto plain_f32 = [](const TensorDesc& t) {
    return t.dtype == DType::Float32 && t.strides[3] == 1;
  };
  return g_decode_grouped.load(std::memory_order_relaxed) && fast_path_cpu() &&
         !(a.pse && a.pse->data) && plain_f32(a.k) && plain_f32(a.v) && dm.d > 0 &&
         dm.d % 16 == 0 && dm.dv > 0 && dm.dv % 16 == 0;
}

// One item per (sequence, kv head) leaves threads idle when there are fewer items than
// threads (batch 1 with few kv heads, multi-query attention): then one item per query head.
bool decode_grouped_fills_pool(std::size_t seqs, const Dims& dm) {
  return static_cast<int64_t>(seqs) * dm.nkv >= num_threads() || dm.nq == dm.nkv;
}

// acc[r][v] += p[r][j] * V[j][16 v ...] over keys j of `keys` (the keys some row sees), for
// four rows of P (leading dim ldp) and NV vectors of 16 values from column d0; stored to O.
// A row that cannot see a key some other row of the group sees adds 0 * V[j]: an Inf or NaN in
// such a value row makes that output NaN, where decode_block (which skips p == 0) stays finite,
// as does the CPU's flash kernel for keys outside its causal blocks (masks per head or causal
// rows of 3-8 queries only; finite caches, the usual case, give the same result either way).
template <int NV>
NPU_AVX512 void pv_rows4(const float* P, int64_t ldp, const float* V, int64_t ldv,
                         const int32_t* keys, int64_t nkeys, int64_t d0, float* O, int64_t ldo) {
  __m512 acc[4][NV];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (int64_t t = 0; t < nkeys; ++t) {
    const int64_t j = keys[t];
    __m512 vv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) vv[v] = _mm512_loadu_ps(V + j * ldv + d0 + 16 * v);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      const __m512 p = _mm512_set1_ps(P[r * ldp + j]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(p, vv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(O + r * ldo + d0 + 16 * v, acc[r][v]);
  }
}

NPU_AVX512 void decode_group(const FlashAttentionArgs& a, const Dims& dm, const Seq& s,
                             int64_t h, const TensorDesc& out, const TensorDesc& smax,
                             const TensorDesc& ssum) {
  const int64_t G = dm.group, rows = s.sq, R = G * rows, skv = s.skv, D = dm.d, Dv = dm.dv;
  const int64_t R4 = (R + 3) / 4 * 4;  // P and O padded to whole groups of four rows
  const int64_t nd = D / 16;
  float* Q = block_scratch(static_cast<size_t>(R * D + R4 * skv + R4 * Dv + 2 * R + skv));
  float* S = Q + R * D;  // [R4, skv]
  float* O = S + R4 * skv;
  float* m = O + R4 * Dv;
  float* l = m + R;
  int32_t* keys = reinterpret_cast<int32_t*>(l + R);  // the keys some row sees, ascending
  std::vector<Visibility> vis;
  vis.reserve(static_cast<size_t>(G));
  for (int64_t g = 0; g < G; ++g) {
    HeadRows(a.q, s.b, h * G + g, s.q0).load(0, rows, Q + g * rows * D);
    vis.emplace_back(a, s, h * G + g);
  }
  int64_t ldk, ldv;
  const float* K = HeadRows(a.k, s.b, h, s.k0).rows_at(0, skv, nullptr, &ldk);
  const float* V = HeadRows(a.v, s.b, h, s.k0).rows_at(0, skv, nullptr, &ldv);
  const float scale = static_cast<float>(a.scale);
  // Scores: S[q][j] = scale * (Q_q . K_j) where row q sees key j, else -inf.
  int64_t nkeys = 0;
  for (int64_t j = 0; j < skv; ++j) {
    const float* k = K + j * ldk;
    bool any = false;
    for (int64_t g = 0; g < G; ++g) {
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t q = g * rows + r;
        if (!vis[g].visible(r, j)) {
          S[q * skv + j] = kNegInf;
          continue;
        }
        any = true;
        const float* x = Q + q * D;
        __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(x), _mm512_loadu_ps(k));
        for (int64_t c = 1; c < nd; ++c) {
          acc = _mm512_fmadd_ps(_mm512_loadu_ps(x + 16 * c), _mm512_loadu_ps(k + 16 * c), acc);
        }
        S[q * skv + j] = scale * _mm512_reduce_add_ps(acc);
      }
    }
    if (any) keys[nkeys++] = static_cast<int32_t>(j);
  }
  // Softmax over [0, end): the keys past the last one seen are -inf for every row.
  const int64_t end = nkeys ? keys[nkeys - 1] + 1 : 0;
  for (int64_t q = 0; q < R; ++q) {
    float* row = S + q * skv;
    m[q] = end ? row_max(row, end) : kNegInf;
    l[q] = m[q] == kNegInf ? 0.0f : exp_row(row, end, m[q], 1.0f);
    if (m[q] == kNegInf) std::fill(row, row + end, 0.0f);  // nothing visible: O stays 0
  }
  for (int64_t q = R; q < R4; ++q) std::fill(S + q * skv, S + q * skv + end, 0.0f);
  // O = P V over the keys some row sees.
  for (int64_t q0 = 0; q0 < R4; q0 += 4) {
    const float* P = S + q0 * skv;
    float* o = O + q0 * Dv;
    int64_t d0 = 0;
    for (; d0 + 64 <= Dv; d0 += 64) pv_rows4<4>(P, skv, V, ldv, keys, nkeys, d0, o, Dv);
    switch ((Dv - d0) / 16) {
      case 3: pv_rows4<3>(P, skv, V, ldv, keys, nkeys, d0, o, Dv); break;
      case 2: pv_rows4<2>(P, skv, V, ldv, keys, nkeys, d0, o, Dv); break;
      case 1: pv_rows4<1>(P, skv, V, ldv, keys, nkeys, d0, o, Dv); break;
      default: break;
    }
  }
  for (int64_t g = 0; g < G; ++g) {
    finish_rows(s, h * G + g, 0, rows, Dv, O + g * rows * Dv, m + g * rows, l + g * rows, out,
                smax, ssum);
  }
}

// ---- short sequences: the whole score matrix of a head at once -------------------------
//
// A head with at most kShortRows queries and keys (a small model's 16- or 64-token context)
// is one block of the general path, where the library GEMM's packing and task set-up for
// products of 16 x 16 x 8 cost more than their arithmetic, and every product is a call. Here
// one item is a (sequence, head) in the forward and a (sequence, kv head) in the backward, its
// operands laid out once as floats in thread scratch with the keys and values transposed
// (d-major), so that every inner loop runs over the keys, contiguous: a query row's scores
// s_j = scale * q . k_j, dP_j = dO . v_j, dQ = scale * sum_j dS_j k_j, dK^T += scale * q dS,
// dV^T += dO P. Same statistics, masks and conventions as the general path (a row with nothing
// visible: out 0, max -inf, sum 0); no bias, dropout or int8 keys (they take the general path).
constexpr int64_t kShortRows = 64;

bool short_path_applies(const FlashAttentionArgs& a, const Dims& dm, const std::vector<Seq>& seqs,
                        const TensorDesc* grad_pse) {
  const DType t = a.q.dtype;
  const bool floating = t == DType::Float32 || t == DType::BFloat16 || t == DType::Float16;
  if (!floating || a.k.dtype != t || a.v.dtype != t) return false;
  if ((a.pse && a.pse->data) || a.keep_prob < 1.0 || (grad_pse && grad_pse->data)) return false;
  if (dm.d > kShortRows || dm.dv > kShortRows) return false;
  // Head dims the AVX-512 tile path takes: it is faster from 64-row tiles that are at least
  // half full (measured at 64 x 64, head dims 32 and 64: 1.5-2.7x), slower on 16 x 16 (5x).
  const bool tiles = dm.d % 32 == 0 && dm.dv % 32 == 0 && fast_path_cpu();
  const int64_t most = tiles ? kShortRows / 2 : kShortRows;
  return std::all_of(seqs.begin(), seqs.end(), [most](const Seq& s) {
    return s.sq <= most && s.skv <= most;
  });
}

// y[0, n) += w * x[0, n)
inline void axpy(float* y, float w, const float* x, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] += w * x[j];
}

// x[d * ld + j] = rows[j * cols + d] for j < n, zeros for n <= j < ld.
void transpose_padded(const float* rows, int64_t n, int64_t cols, int64_t ld, float* x) {
  if (ld > n) std::fill_n(x, cols * ld, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t d = 0; d < cols; ++d) x[d * ld + j] = rows[j * cols + d];
  }
}

// The keys' rows [0, skv) of one (sequence, kv head), transposed: out[d * ld + j] = k_j[d]
// (ld >= skv, zeros past skv).
void load_transposed(const TensorDesc& t, const Seq& s, int64_t head, float* rows, float* out,
                     int64_t ld) {
  const HeadRows hr(t, s.b, head, s.k0);
  hr.load(0, s.skv, rows);
  transpose_padded(rows, s.skv, hr.cols, ld, out);
}

// The inverse: stores the key rows [0, skv) whose transpose is x (x[d * ld + j]), through rows.
void store_transposed(const float* x, int64_t ld, const Seq& s, int64_t head, float* rows,
                      const TensorDesc& t) {
  const HeadRows hr(t, s.b, head, s.k0);
  for (int64_t j = 0; j < s.skv; ++j) {
    for (int64_t d = 0; d < hr.cols; ++d) rows[j * hr.cols + d] = x[d * ld + j];
  }
  hr.store(0, s.skv, rows);
}

// srow[j] = scale * q . k_j over the transposed keys, invisible keys -inf; false if the row
// sees no key at all.
bool short_scores(const float* q, const float* Kt, int64_t D, int64_t skv, float scale,
                  const Visibility& vis, int64_t i, float* srow) {
  const int cls = vis.classify(i, i + 1, 0, skv);
  if (cls == 0) return false;
  std::fill_n(srow, skv, 0.0f);
  for (int64_t d = 0; d < D; ++d) axpy(srow, scale * q[d], Kt + d * skv, skv);
  if (cls == 2) {
    for (int64_t j = 0; j < skv; ++j) {
      if (!vis.visible(i, j)) srow[j] = kNegInf;
    }
  }
  return true;
}

void short_forward_head(const FlashAttentionArgs& a, const Dims& dm, const Seq& s, int64_t n,
                        const TensorDesc& out, const TensorDesc& smax, const TensorDesc& ssum) {
  const int64_t sq = s.sq, skv = s.skv, D = dm.d, Dv = dm.dv, h = n / dm.group;
  float* Q = block_scratch(static_cast<size_t>(sq * D + 2 * skv * D + 2 * skv * Dv + skv +
                                               sq * Dv + 2 * sq));
  float* rows = Q + sq * D;  // K or V as rows, before transposing
  float* Kt = rows + skv * std::max(D, Dv);
  float* Vt = Kt + skv * D;
  float* srow = Vt + skv * Dv;
  float* O = srow + skv;
  float* m = O + sq * Dv;
  float* l = m + sq;
  HeadRows(a.q, s.b, n, s.q0).load(0, sq, Q);
  load_transposed(a.k, s, h, rows, Kt, skv);
  load_transposed(a.v, s, h, rows, Vt, skv);
  const Visibility vis(a, s, n);
  const float scale = static_cast<float>(a.scale);
  for (int64_t i = 0; i < sq; ++i) {
    float* o = O + i * Dv;
    m[i] = kNegInf;
    l[i] = 0.0f;
    if (short_scores(Q + i * D, Kt, D, skv, scale, vis, i, srow)) m[i] = row_max(srow, skv);
    if (m[i] == kNegInf) {  // nothing visible: the row's output is 0
      std::fill_n(o, Dv, 0.0f);
      continue;
    }
    l[i] = exp_row(srow, skv, m[i], 1.0f);
    for (int64_t c = 0; c < Dv; ++c) o[c] = dot_f32(srow, Vt + c * skv, skv);
  }
  finish_rows(s, n, 0, sq, Dv, O, m, l, out, smax, ssum);
}

void short_backward_head(const FlashAttentionArgs& a, const Dims& dm, const Seq& s, int64_t h,
                         const TensorDesc& out, const TensorDesc& grad_out,
                         const TensorDesc& smax, const TensorDesc& ssum,
                         const TensorDesc& grad_q, const TensorDesc& grad_k,
                         const TensorDesc& grad_v) {
  const int64_t sq = s.sq, skv = s.skv, D = dm.d, Dv = dm.dv;
  const int64_t kv = skv * std::max(D, Dv);
  float* Kt = block_scratch(static_cast<size_t>(5 * kv + sq * (2 * D + 2 * Dv) + 3 * skv));
  float* Vt = Kt + kv;
  float* dKt = Vt + kv;
  float* dVt = dKt + kv;
  float* rows = dVt + kv;  // a [skv x max(D, Dv)] or [sq x ...] staging area
  float* Q = rows + kv;
  float* dQ = Q + sq * D;
  float* dO = dQ + sq * D;
  float* O = dO + sq * Dv;
  float* p = O + sq * Dv;
  float* dp = p + skv;
  float* ds = dp + skv;
  load_transposed(a.k, s, h, rows, Kt, skv);
  load_transposed(a.v, s, h, rows, Vt, skv);
  std::fill_n(dKt, skv * D, 0.0f);
  std::fill_n(dVt, skv * Dv, 0.0f);
  const float scale = static_cast<float>(a.scale);
  for (int64_t g = 0; g < dm.group; ++g) {
    const int64_t n = h * dm.group + g;
    HeadRows(a.q, s.b, n, s.q0).load(0, sq, Q);
    HeadRows(grad_out, s.b, n, s.q0).load(0, sq, dO);
    HeadRows(out, s.b, n, s.q0).load(0, sq, O);
    const StatRows sm(smax, s.b, n, s.q0), ss(ssum, s.b, n, s.q0);
    const Visibility vis(a, s, n);
    std::fill_n(dQ, sq * D, 0.0f);
    for (int64_t i = 0; i < sq; ++i) {
      const float li = ss.get(i);
      const float* q = Q + i * D;
      const float* go = dO + i * Dv;
      if (!(li > 0) || !short_scores(q, Kt, D, skv, scale, vis, i, p)) continue;
      double di = 0;  // D_i = dO_i . O_i
      for (int64_t c = 0; c < Dv; ++c) di += double(go[c]) * O[i * Dv + c];
      exp_row(p, skv, sm.get(i), 1.0f / li);  // P_ij
      std::fill_n(dp, skv, 0.0f);
      for (int64_t c = 0; c < Dv; ++c) axpy(dp, go[c], Vt + c * skv, skv);
      for (int64_t j = 0; j < skv; ++j) ds[j] = p[j] * (dp[j] - static_cast<float>(di));
      float* dq = dQ + i * D;
      for (int64_t d = 0; d < D; ++d) {
        dq[d] = scale * dot_f32(ds, Kt + d * skv, skv);
        axpy(dKt + d * skv, scale * q[d], ds, skv);
      }
      for (int64_t c = 0; c < Dv; ++c) axpy(dVt + c * skv, go[c], p, skv);
    }
    HeadRows(grad_q, s.b, n, s.q0).store(0, sq, dQ);
  }
  store_transposed(dKt, skv, s, h, rows, grad_k);
  store_transposed(dVt, skv, s, h, rows, grad_v);
}

// One parallel_for over `items` heads, a few per task (each is microseconds of work).
template <class F>
void for_each_head(int64_t items, F&& body) {
  const int64_t grain = std::max<int64_t>(1, items / (4 * num_threads()));
  parallel_for(0, items, grain, [&](int64_t b, int64_t e) {
    for (int64_t it = b; it < e; ++it) body(it);
  });
}

// Work items over (sequence, head, block) flattened.
struct Items {
  std::vector<Seq> seqs;
  std::vector<int64_t> start;  // first item of each (sequence, head)
  int64_t heads, block;
  Items(std::vector<Seq> s, int64_t nheads, int64_t blk, bool by_kv)
      : seqs(std::move(s)), heads(nheads), block(blk) {
    int64_t total = 0;
    for (const Seq& q : seqs) {
      const int64_t len = by_kv ? q.skv : q.sq;
      for (int64_t h = 0; h < heads; ++h) {
        start.push_back(total);
        total += (len + block - 1) / block;
      }
    }
    start.push_back(total);
  }
  int64_t total() const { return start.back(); }
  // (sequence, head, block start) of item `it`.
  void locate(int64_t it, const Seq** s, int64_t* head, int64_t* pos) const {
    const int64_t k = std::upper_bound(start.begin(), start.end(), it) - start.begin() - 1;
    *s = &seqs[k / heads];
    *head = k % heads;
    *pos = (it - start[k]) * block;
  }
};

}  // namespace
}  // namespace detail

// ---- the AVX-512 path: tile kernels of its own ------------------------------------------
//
// For the common case (no bias, no dropout, float keys; head dims multiples of 32) the blocks
// skip the general GEMM: its per-call packing, task set-up and conversions cost as much as a
// 64 x 64 tile's arithmetic. How it works:
//  - The score tile is key-major: S^T [Bk keys x Bq queries], so a query's softmax statistics
//    (max, sum, logsumexp, D_i) are vector lanes and every pass over the tile is whole vectors.
//  - Each (sequence, head) item first lays its operands out once as float32 in the forms the
//    tile products read directly: K, V, Q and dO as rows, Q and dO transposed per block of Bq
//    rows. Every product is then C[8 x 32] += sum_k A(i, k) B(k, j) where B's row k is 32
//    contiguous floats and A is read either along a row (A[i * lda + k]) or down a column
//    (A[k * lda + i]): no per-tile packing at all.
//  - 16-bit inputs are converted once (in the layouts); the products are float32 FMAs. (On this
//    Xeon vdpbf16ps ran at 48 GFLOP/s a core against 167 for float32 FMAs: bfloat16 pairs were
//    slower, so they are not used here.) bfloat16 on a CPU with AMX takes the AMX path below
//    instead: the same tiles, the products on the tile unit.
//  - Forward per query block: S^T = K Q^T, mask, online softmax over the key blocks, and
//    O^T += V^T P^T. Backward per key block and visible query block: S^T, dP^T = V dO^T,
//    P^T = exp(S^T - lse), dS^T = P^T (dP^T - D_i), then dV += P^T dO, dK += dS^T Q and
//    dQ += dS K (dQ, dK, dV in float buffers of the head). Memory is O(S x D) per thread.
//  - Tiles go in passes: the forward walks the key tiles once for 4 query blocks, the backward
//    the query blocks once for 4 key tiles, so the operands of the long side (a head's K and V,
//    or its Q, dO and dQ: 2 MB each at S = 4096, D = 128, the size of a core's L2) come from
//    L3 once per 4 tiles. Every accumulator still takes its tiles in ascending order.
//  - The items are whole heads, equal in work under any band, handed out one at a time, so the
//    threads split them evenly when the head count is a multiple of the thread count (the tile
//    path asks for that, or 4 heads a thread).
namespace detail {
namespace {

#define NPU_FA512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#define NPU_FA_INLINE inline __attribute__((always_inline))

constexpr int64_t kBq = 64;  // queries per tile (the vector dimension: 4 zmm)
constexpr int64_t kBk = 64;  // keys per tile
// Tiles per pass (below), tried at S = 4096, D = 128 (float32, one thread): 1, 2 and 4 for the
// forward, 1 to 16 for the backward; 4 took 4% off the forward's time and 9% off the
// backward's against 1, and more were no better.
constexpr int64_t kPassBlocks = 4;  // the forward's query blocks per pass over the key tiles
constexpr int64_t kPassTiles = 4;   // the backward's key tiles per pass over the query blocks
// The maskz forms with a full mask are the plain instructions; the unmasked intrinsics trip
// GCC 12's false -Wmaybe-uninitialized on their _mm512_undefined_* operand.
constexpr __mmask16 kAll16 = 0xffff;

bool fast_path_cpu() {
  static const bool ok = __builtin_cpu_supports("avx512f") &&
                         __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return ok;
}

// exp(x) for 16 floats: 2^(x log2 e) split into 2^n * 2^f, |f| <= 1/2, 2^f by its Taylor series
// to degree 7 (relative error < 2e-9 before rounding), 2^n by vscalefps. Inputs below -150 log 2
// give 0 (-inf too), as do NaNs.
NPU_FA512 NPU_FA_INLINE __m512 exp512(__m512 x) {
  const __m512 t = _mm512_maskz_max_ps(
      kAll16, _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _mm512_set1_ps(-150.0f));
  const __m512 n =
      _mm512_maskz_roundscale_ps(kAll16, t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_mul_ps(_mm512_sub_ps(t, n), _mm512_set1_ps(0.693147180559945309f));
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(kAll16, p, n);
}

// C[MR x 32] (+)= sum over k of A(i, k) B(k, j). kRowA: A(i, k) = a[i * lda + k], else
// a[k * lda + i]; B(k, j) = b[k * ldb + j]. 2 * MR accumulators (16 or 28) cover the FMA
// latency of both ports.
template <bool kRowA, int MR>
NPU_FA512 void micro_x32(int64_t ksteps, const float* a, int64_t lda, const float* b,
                         int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  __m512 acc0[MR], acc1[MR];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    acc0[i] = accumulate ? _mm512_loadu_ps(c + i * ldc) : _mm512_setzero_ps();
    acc1[i] = accumulate ? _mm512_loadu_ps(c + i * ldc + 16) : _mm512_setzero_ps();
  }
  const float* rows[MR];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) rows[i] = a + i * lda;
#pragma GCC unroll 2
  for (int64_t k = 0; k < ksteps; ++k) {
    const __m512 b0 = _mm512_loadu_ps(b + k * ldb), b1 = _mm512_loadu_ps(b + k * ldb + 16);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_set1_ps(kRowA ? rows[i][k] : a[k * lda + i]);
      acc0[i] = _mm512_fmadd_ps(av, b0, acc0[i]);
      acc1[i] = _mm512_fmadd_ps(av, b1, acc1[i]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    _mm512_storeu_ps(c + i * ldc, acc0[i]);
    _mm512_storeu_ps(c + i * ldc + 16, acc1[i]);
  }
}

// C[M x N] (+)= A B with M % 8 == 0 and N % 32 == 0: each B strip of 32 columns (k x 32 floats,
// in L1) serves every row strip of A. A column-major A (O^T += V^T P^T, dQ) goes 14 rows at a
// time and 8 for the rest (64 = 4 x 14 + 8, 128 = 8 x 14 + 2 x 8): its MR values per k are
// contiguous, and the 14-row kernel's 28 FMAs per 16 loads (against 16 per 10) ran 1.14x the
// 8-row kernel's rate at the tiles' shapes on a two-load-port core (Ice Lake server, L1-resident
// operands: 70 against 61 GFMA/s). A row-major A (14 row pointers, some on the stack) measured
// 0.97-1.10x there: it keeps 8 rows. Each C value sums its k in the same order either way.
template <bool kRowA>
NPU_FA512 void tile_product(int64_t M, int64_t N, int64_t ksteps, const float* a, int64_t lda,
                            const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  int64_t wide = kRowA ? 0 : M / 14;
  while ((M - 14 * wide) % 8 != 0) --wide;
  const int64_t wide_rows = 14 * wide;
  for (int64_t j = 0; j < N; j += 32) {
    if constexpr (!kRowA) {  // (no 14-row kernel for a row-major A is compiled)
      for (int64_t i = 0; i < wide_rows; i += 14) {
        micro_x32<false, 14>(ksteps, a + i, lda, b + j, ldb, c + i * ldc + j, ldc, accumulate);
      }
    }
    for (int64_t i = wide_rows; i < M; i += 8) {
      micro_x32<kRowA, 8>(ksteps, kRowA ? a + i * lda : a + i, lda, b + j, ldb, c + i * ldc + j,
                          ldc, accumulate);
    }
  }
}

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// x [n x d] (n a multiple of kBq) transposed per block of kBq rows: block b is [d x kBq]. A block
// is then a contiguous B operand (a row stride of kBq, not n: a stride of 1024 or 4096 floats
// puts every row of the operand in the same L1 set).
void transpose_blocks(const float* x, int64_t n, int64_t d, float* out) {
  for (int64_t b0 = 0; b0 < n; b0 += kBq) {
    float* blk = out + b0 * d;
    for (int64_t r = 0; r < kBq; ++r) {
      const float* row = x + (b0 + r) * d;
      for (int64_t p = 0; p < d; ++p) blk[p * kBq + r] = row[p];
    }
  }
}

// The rows [0, n) of one (sequence, head) of t as floats, zero rows up to n_pad.
void load_head(const TensorDesc& t, const Seq& s, int64_t head, bool kv, int64_t n,
               int64_t n_pad, float* dst) {
  const HeadRows hr(t, s.b, head, kv ? s.k0 : s.q0);
  hr.load(0, n, dst);
  std::fill(dst + n * hr.cols, dst + n_pad * hr.cols, 0.0f);
}

// Float buffers carved from the thread's block scratch, 64 bytes apart.
template <size_t N>
std::array<float*, N> carve(const std::array<int64_t, N>& sizes) {
  int64_t total = 0;
  for (int64_t z : sizes) total += z + 16;
  float* base = block_scratch(static_cast<size_t>(total));
  std::array<float*, N> out;
  for (size_t i = 0; i < N; ++i) {
    out[i] = base;
    base += sizes[i] + 16;
  }
  return out;
}

bool fast_path_applies(const FlashAttentionArgs& a, const Dims& dm, int64_t items,
                       const TensorDesc* grad_pse) {
  const DType t = a.q.dtype;
  const bool floating = t == DType::Float32 || t == DType::BFloat16 || t == DType::Float16;
  if (!floating || a.k.dtype != t || a.v.dtype != t) return false;
  if ((a.pse && a.pse->data) || a.keep_prob < 1.0 || (grad_pse && grad_pse->data)) return false;
  if (dm.d % 32 != 0 || dm.dv % 32 != 0) return false;
  if (!fast_path_cpu()) return false;
  // One item per (sequence, head): enough of them to keep the pool busy, as the backward's
  // per-head strategy asks; one or three long heads stay on the general path.
  const int64_t threads = num_threads();
  return items >= 4 * threads || items % threads == 0;
}

// Sets the invisible scores of a key-major tile to -inf: keys past the sequence, and what the
// visibility rules hide (a band is a range of queries per key; a mask is read per element).
void mask_tile(float* st, const Visibility& vis, int64_t i0, int64_t j0, int64_t sq,
               int64_t skv) {
  for (int64_t r = 0; r < kBk; ++r) {
    float* row = st + r * kBq;
    const int64_t j = j0 + r;
    if (j >= skv) {
      std::fill(row, row + kBq, kNegInf);
      continue;
    }
    if (vis.mask) {  // read only for real queries: the padding has no mask rows
      for (int64_t c = 0; c < kBq; ++c) {
        if (i0 + c >= sq || !vis.visible(i0 + c, j)) row[c] = kNegInf;
      }
      continue;
    }
    if (j < vis.prefix) continue;
    // visible: lo <= j - i <= hi, i.e. j - hi <= i <= j - lo
    const int64_t first = std::clamp<int64_t>(j - vis.hi - i0, 0, kBq);
    const int64_t last = std::clamp<int64_t>(j - vis.lo - i0 + 1, 0, kBq);
    if (first >= last) {
      std::fill(row, row + kBq, kNegInf);
      continue;
    }
    std::fill(row, row + first, kNegInf);
    std::fill(row + last, row + kBq, kNegInf);
  }
}

// The forward's online softmax over one key-major tile: st holds the raw scores; on return it
// holds the probabilities relative to the updated running max m, l the updated sums and
// OT [dv x Bq] the rescaled accumulator.
NPU_FA512 void softmax_tile(float* st, float scale, float* m, float* l, float* ot, int64_t dv) {
  const __m512 vs = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(kNegInf);
  for (int64_t g = 0; g < kBq; g += 16) {
    __m512 mx = ninf;
    for (int64_t r = 0; r < kBk; ++r) {
      mx = _mm512_maskz_max_ps(kAll16, mx, _mm512_mul_ps(_mm512_loadu_ps(st + r * kBq + g), vs));
    }
    const __m512 mold = _mm512_loadu_ps(m + g);
    const __m512 mnew = _mm512_maskz_max_ps(kAll16, mold, mx);
    // A query with nothing visible yet keeps max -inf: shift by 0 so that exp gives 0, not NaN.
    const __m512 shift = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(mnew, ninf, _CMP_EQ_OQ), mnew,
                                              _mm512_setzero_ps());
    const __m512 corr = exp512(_mm512_sub_ps(mold, shift));
    __m512 sum = _mm512_setzero_ps();
    for (int64_t r = 0; r < kBk; ++r) {
      float* p = st + r * kBq + g;
      const __m512 e = exp512(_mm512_fmsub_ps(_mm512_loadu_ps(p), vs, shift));
      sum = _mm512_add_ps(sum, e);
      _mm512_storeu_ps(p, e);
    }
    _mm512_storeu_ps(l + g, _mm512_fmadd_ps(_mm512_loadu_ps(l + g), corr, sum));
    _mm512_storeu_ps(m + g, mnew);
    if (_mm512_cmp_ps_mask(corr, _mm512_set1_ps(1.0f), _CMP_NEQ_UQ) != 0) {
      for (int64_t c = 0; c < dv; ++c) {
        float* o = ot + c * kBq + g;
        _mm512_storeu_ps(o, _mm512_mul_ps(_mm512_loadu_ps(o), corr));
      }
    }
  }
}

// A query block's finish: out = O / l through the float rows orow, and the statistics m, l.
void write_block(const float* ot, const float* m, const float* l, const Seq& s, int64_t n,
                 int64_t i0, int64_t rows, int64_t Dv, float* orow, const HeadRows& outr,
                 const TensorDesc& smax, const TensorDesc& ssum) {
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = l[r] > 0 ? 1.0f / l[r] : 0.0f;
    for (int64_t c = 0; c < Dv; ++c) orow[r * Dv + c] = ot[c * kBq + r] * inv;
  }
  outr.store(i0, rows, orow);
  const StatRows sm(smax, s.b, n, s.q0 + i0), ss(ssum, s.b, n, s.q0 + i0);
  for (int64_t r = 0; r < rows; ++r) {
    sm.set(r, m[r]);
    ss.set(r, l[r]);
  }
}

NPU_FA512 void forward_head(const FlashAttentionArgs& a, const Dims& dm, const Seq& s, int64_t n,
                            const TensorDesc& out, const TensorDesc& smax,
                            const TensorDesc& ssum) {
  const int64_t D = dm.d, Dv = dm.dv, h = n / dm.group;
  const int64_t sq_pad = round_up(s.sq, kBq), sk_pad = round_up(s.skv, kBk);
  // K rows, V rows, Q rows (to transpose) and transposed, the tile, O^T, m and l of the
  // kPassBlocks query blocks of a pass, an output block.
  const auto [kr, vr, x, qt, tile, ots, ms, ls, orow] =
      carve<9>({sk_pad * D, sk_pad * Dv, sq_pad * D, sq_pad * D, kBk * kBq,
                kPassBlocks * Dv * kBq, kPassBlocks * kBq, kPassBlocks * kBq, kBq * Dv});
  load_head(a.k, s, h, true, s.skv, sk_pad, kr);
  load_head(a.v, s, h, true, s.skv, sk_pad, vr);
  load_head(a.q, s, n, false, s.sq, sq_pad, x);
  transpose_blocks(x, sq_pad, D, qt);
  const Visibility vis(a, s, n);
  const float scale = static_cast<float>(a.scale);
  const HeadRows outr(out, s.b, n, s.q0);
  // kPassBlocks query blocks share each pass over the key tiles, so that a key tile's K and V
  // (2 x 32 KB at D = 128) come from L3 once per pass and from L1 / L2 for the other blocks.
  // Each block still takes its key tiles in ascending order: the sums of one block per pass.
  for (int64_t ip = 0; ip < s.sq; ip += kPassBlocks * kBq) {
    const int64_t blocks = std::min(kPassBlocks, (s.sq - ip + kBq - 1) / kBq);
    std::fill(ots, ots + blocks * Dv * kBq, 0.0f);
    std::fill(ms, ms + blocks * kBq, kNegInf);
    std::fill(ls, ls + blocks * kBq, 0.0f);
    for (int64_t j0 = 0; j0 < s.skv; j0 += kBk) {
      const int64_t cols = std::min(kBk, s.skv - j0);
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t i0 = ip + b * kBq, rows = std::min(kBq, s.sq - i0);
        const int cls = vis.classify(i0, i0 + rows, j0, j0 + cols);
        if (cls == 0) continue;
        float* ot = ots + b * Dv * kBq;
        tile_product<true>(kBk, kBq, D, kr + j0 * D, D, qt + i0 * D, kBq, tile, kBq, false);
        if (cls == 2 || cols < kBk) mask_tile(tile, vis, i0, j0, s.sq, s.skv);
        softmax_tile(tile, scale, ms + b * kBq, ls + b * kBq, ot, Dv);
        tile_product<false>(Dv, kBq, kBk, vr + j0 * Dv, Dv, tile, kBq, ot, kBq, true);
      }
    }
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t i0 = ip + b * kBq, rows = std::min(kBq, s.sq - i0);
      write_block(ots + b * Dv * kBq, ms + b * kBq, ls + b * kBq, s, n, i0, rows, Dv, orow, outr,
                  smax, ssum);
    }
  }
}

// P^T and dS^T of one key-major tile pair, in place: st (S^T) becomes P^T = exp(scale S^T - lse)
// and dp (dP^T) becomes dS^T = P^T (dP^T - D_i).
NPU_FA512 void backward_tile(float* st, float* dp, const float* lse, const float* di,
                             float scale) {
  const __m512 vs = _mm512_set1_ps(scale);
  for (int64_t g = 0; g < kBq; g += 16) {
    const __m512 vl = _mm512_loadu_ps(lse + g), vd = _mm512_loadu_ps(di + g);
    for (int64_t r = 0; r < kBk; ++r) {
      const int64_t o = r * kBq + g;
      const __m512 p = exp512(_mm512_fmsub_ps(_mm512_loadu_ps(st + o), vs, vl));
      _mm512_storeu_ps(st + o, p);
      _mm512_storeu_ps(dp + o, _mm512_mul_ps(p, _mm512_sub_ps(_mm512_loadu_ps(dp + o), vd)));
    }
  }
}

// One kv head of one sequence: dK and dV over all its key blocks, and dQ of each query head of
// its group.
NPU_FA512 void backward_head(const FlashAttentionArgs& a, const Dims& dm, const Seq& s,
                             int64_t h, const TensorDesc& out, const TensorDesc& grad_out,
                             const TensorDesc& smax, const TensorDesc& ssum,
                             const TensorDesc& grad_q, const TensorDesc& grad_k,
                             const TensorDesc& grad_v) {
  const int64_t D = dm.d, Dv = dm.dv;
  const int64_t sq_pad = round_up(s.sq, kBq), sk_pad = round_up(s.skv, kBk);
  // K rows, V rows, Q rows and transposed, dO rows and transposed, O rows, lse, D_i, dQ, dK,
  // dV, the tiles S^T and dP^T.
  const auto [kr, vr, qr, qt, dor, dot, orows, lse, di, dq, dk, dv, tile, dpt] =
      carve<14>({sk_pad * D, sk_pad * Dv, sq_pad * D, sq_pad * D, sq_pad * Dv, sq_pad * Dv,
                 sq_pad * Dv, sq_pad, sq_pad, sq_pad * D, sk_pad * D, sk_pad * Dv, kBk * kBq,
                 kBk * kBq});
  load_head(a.k, s, h, true, s.skv, sk_pad, kr);
  load_head(a.v, s, h, true, s.skv, sk_pad, vr);
  std::fill(dk, dk + sk_pad * D, 0.0f);
  std::fill(dv, dv + sk_pad * Dv, 0.0f);
  const float scale = static_cast<float>(a.scale);
  for (int64_t g = 0; g < dm.group; ++g) {
    const int64_t n = h * dm.group + g;
    load_head(a.q, s, n, false, s.sq, sq_pad, qr);
    transpose_blocks(qr, sq_pad, D, qt);
    load_head(grad_out, s, n, false, s.sq, sq_pad, dor);
    transpose_blocks(dor, sq_pad, Dv, dot);
    load_head(out, s, n, false, s.sq, sq_pad, orows);
    // D_i = rowsum(dO * O); lse = m + log l (+inf where nothing is visible: P = 0 there, and in
    // the padding rows).
    const StatRows sm(smax, s.b, n, s.q0), ss(ssum, s.b, n, s.q0);
    for (int64_t r = 0; r < sq_pad; ++r) {
      double acc = 0;
      for (int64_t c = 0; c < Dv; ++c) acc += double(orows[r * Dv + c]) * dor[r * Dv + c];
      di[r] = static_cast<float>(acc);
      const float lv = r < s.sq ? ss.get(r) : 0.0f;
      lse[r] = lv > 0 ? sm.get(r) + std::log(lv) : std::numeric_limits<float>::infinity();
    }
    std::fill(dq, dq + sq_pad * D, 0.0f);
    const Visibility vis(a, s, n);
    // kPassTiles key tiles share each pass over the query blocks, so that a query block's
    // operands (Q, Q^T, dO, dO^T, dQ: 5 x 32 KB at D = 128) come from L3 once per pass and from
    // L2 for the other tiles. Each dQ block still takes its key tiles in ascending order and
    // each dK / dV tile its query blocks, so the sums are those of one tile per pass.
    for (int64_t jp = 0; jp < s.skv; jp += kPassTiles * kBk) {
      const int64_t jp_end = std::min(s.skv, jp + kPassTiles * kBk);
      for (int64_t i0 = 0; i0 < s.sq; i0 += kBq) {
        const int64_t rows = std::min(kBq, s.sq - i0);
        for (int64_t j0 = jp; j0 < jp_end; j0 += kBk) {
          const int64_t cols = std::min(kBk, s.skv - j0);
          const int cls = vis.classify(i0, i0 + rows, j0, j0 + cols);
          if (cls == 0) continue;
          tile_product<true>(kBk, kBq, D, kr + j0 * D, D, qt + i0 * D, kBq, tile, kBq, false);
          tile_product<true>(kBk, kBq, Dv, vr + j0 * Dv, Dv, dot + i0 * Dv, kBq, dpt, kBq,
                             false);
          if (cls == 2 || cols < kBk) mask_tile(tile, vis, i0, j0, s.sq, s.skv);
          backward_tile(tile, dpt, lse + i0, di + i0, scale);
          // dV += P^T dO;  dK += dS^T Q;  dQ += dS K (the scale is applied once at the end)
          tile_product<true>(kBk, Dv, kBq, tile, kBq, dor + i0 * Dv, Dv, dv + j0 * Dv, Dv, true);
          tile_product<true>(kBk, D, kBq, dpt, kBq, qr + i0 * D, D, dk + j0 * D, D, true);
          tile_product<false>(kBq, D, kBk, dpt, kBq, kr + j0 * D, D, dq + i0 * D, D, true);
        }
      }
    }
    for (int64_t i = 0; i < s.sq * D; ++i) dq[i] *= scale;
    HeadRows(grad_q, s.b, n, s.q0).store(0, s.sq, dq);
  }
  for (int64_t i = 0; i < s.skv * D; ++i) dk[i] *= scale;
  HeadRows(grad_k, s.b, h, s.k0).store(0, s.skv, dk);
  HeadRows(grad_v, s.b, h, s.k0).store(0, s.skv, dv);
}

// ---- the AMX path: bfloat16 tile products on the tile unit -----------------------------
//
// bfloat16 inputs on a CPU with AMX (and the tile state granted by Linux) run the AVX-512
// path's algorithm with its products on the tile unit (TDPBF16PS, amx_tiles.h), as the card's
// cube unit and FlashAttention-2 do: bfloat16 operands, float32 accumulation, the softmax
// statistics, the score tiles and the accumulators (O^T, dQ^T, dK, dV) in float32; P and dS
// are rounded to bfloat16 (nearest even) for the products that take them.
//  - Each item lays its operands out once, as the tiles read them: A operands as bfloat16 rows
//    (K and V by key; V^T and K^T per block of kBk keys, so a block's rows are 128 bytes
//    apart), B operands as k-pair words: Q^T and dO^T per block of kBq queries (the 32-bit
//    words of a bfloat16 row are already pairs of d, so these are word transposes), Q and dO
//    as pairs of query rows.
//  - The key-major float tiles are those of the AVX-512 path (mask_tile, softmax_tile,
//    backward_tile are shared); P^T / dS^T leave them as bfloat16 rows (A of dV += P^T dO,
//    dK += dS^T Q) or pairs of key rows (B of O^T += V^T P^T, dQ^T += K^T dS^T).
//  - dQ^T accumulates per query block ([D x kBq], transposed back once at the end).
std::atomic<bool> g_attention_amx{true};

bool amx_products(DType t) {
  return t == DType::BFloat16 && g_attention_amx.load(std::memory_order_relaxed) &&
         fast_path_cpu() && amx::amx_bf16_usable();
}

// The bfloat16 bits of x in the high half of each 32-bit lane (nearest even; the inputs here
// are finite).
NPU_FA512 NPU_FA_INLINE __m512i bf16_high(__m512 x) {
  const __m512i b = _mm512_castps_si512(x);
  const __m512i odd =
      _mm512_and_si512(_mm512_maskz_srli_epi32(kAll16, b, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_add_epi32(b, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
  return _mm512_and_si512(r, _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
}

// n floats (a multiple of 16) as bfloat16.
NPU_FA512 void rows_to_bf16(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; i += 16) {
    const __m512i h = _mm512_maskz_srli_epi32(kAll16, bf16_high(_mm512_loadu_ps(x + i)), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm512_maskz_cvtepi32_epi16(kAll16, h));
  }
}

// The rows [0, n) of one (sequence, head) of a bfloat16 tensor, copied as they are (no round trip
// through float), zero rows up to n_pad.
void load_head_bf16(const TensorDesc& t, const Seq& s, int64_t head, bool kv, int64_t n,
                    int64_t n_pad, uint16_t* dst) {
  const HeadRows hr(t, s.b, head, kv ? s.k0 : s.q0);
  const int64_t d = hr.cols;
  for (int64_t r = 0; r < n; ++r) {
    const auto* src = reinterpret_cast<const uint16_t*>(hr.base) + r * hr.row_stride;
    if (hr.col_stride == 1) {
      std::memcpy(dst + r * d, src, static_cast<size_t>(d) * sizeof(uint16_t));
    } else {
      for (int64_t c = 0; c < d; ++c) dst[r * d + c] = src[c * hr.col_stride];
    }
  }
  std::fill(dst + n * d, dst + n_pad * d, uint16_t{0});
}

// bfloat16 rows x [n x d] (n a multiple of kBk) transposed per block of kBk rows: block b is
// [d x kBk].
void transpose_blocks_bf16(const uint16_t* x, int64_t n, int64_t d, uint16_t* out) {
  for (int64_t b0 = 0; b0 < n; b0 += kBk) {
    uint16_t* blk = out + b0 * d;
    for (int64_t r = 0; r < kBk; ++r) {
      const uint16_t* row = x + (b0 + r) * d;
      for (int64_t p = 0; p < d; ++p) blk[p * kBk + r] = row[p];
    }
  }
}

// bfloat16 rows [n x d] (n a multiple of kBq) as B operands over d: per block of kBq rows,
// [d / 2 x kBq] words (word p of row r is the pair (d = 2p, 2p + 1)).
void word_transpose_blocks(const uint16_t* rows, int64_t n, int64_t d, uint32_t* out) {
  const int64_t w = d / 2;
  for (int64_t b0 = 0; b0 < n; b0 += kBq) {
    uint32_t* blk = out + b0 * w;
    for (int64_t r = 0; r < kBq; ++r) {
      const uint16_t* row = rows + (b0 + r) * d;
      for (int64_t p = 0; p < w; ++p) {
        blk[p * kBq + r] = uint32_t(row[2 * p]) | (uint32_t(row[2 * p + 1]) << 16);
      }
    }
  }
}

// Column panels: a product whose B and C rows are 128 floats / words (512 bytes) apart ran at
// half the speed of one on 64-wide rows (the rows of a tile then share L1 sets, and loads alias
// the stores 4 KB apart), so the backward's dV / dK and their B operands are kept as panels of
// 64 columns (32 when the head dim is an odd multiple of 32), each panel [rows x width].
int64_t panel_width(int64_t d) { return d % 64 == 0 ? 64 : 32; }

// bfloat16 rows [n x d] (n even) as B operands over the rows, in column panels: panel k holds
// [n / 2 x w] words, word (p, c) the pair (rows 2p, 2p + 1) of column k * w + c.
void pair_rows(const uint16_t* rows, int64_t n, int64_t d, uint32_t* out) {
  const int64_t w = panel_width(d);
  for (int64_t p = 0; p < n / 2; ++p) {
    const uint16_t* r0 = rows + 2 * p * d;
    const uint16_t* r1 = r0 + d;
    for (int64_t c0 = 0; c0 < d; c0 += w) {
      uint32_t* o = out + c0 * (n / 2) + p * w;
      for (int64_t c = 0; c < w; ++c) o[c] = uint32_t(r0[c0 + c]) | (uint32_t(r1[c0 + c]) << 16);
    }
  }
}

// Rows [0, n) of a column-panelled float matrix ([d / w panels] of [n_all x w]) as plain rows
// [n x d], times mul.
void unpanel(const float* x, int64_t n, int64_t n_all, int64_t d, float mul, float* out) {
  const int64_t w = panel_width(d);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c0 = 0; c0 < d; c0 += w) {
      const float* in = x + c0 * n_all + r * w;
      for (int64_t c = 0; c < w; ++c) out[r * d + c0 + c] = in[c] * mul;
    }
  }
}

// A key-major float tile [kBk x kBq] as bfloat16 rows (an A operand over queries), ld values
// apart.
NPU_FA512 void tile_to_rows(const float* t, uint16_t* out, int64_t ld) {
  for (int64_t r = 0; r < kBk; ++r) rows_to_bf16(t + r * kBq, kBq, out + r * ld);
}

// A key-major float tile as pairs of key rows: [kBk / 2 x kBq] words (a B operand over keys).
NPU_FA512 void tile_to_pairs(const float* t, uint32_t* out) {
  for (int64_t p = 0; p < kBk / 2; ++p) {
    const float* r0 = t + 2 * p * kBq;
    const float* r1 = r0 + kBq;
    for (int64_t c = 0; c < kBq; c += 16) {
      const __m512i lo = _mm512_maskz_srli_epi32(kAll16, bf16_high(_mm512_loadu_ps(r0 + c)), 16);
      const __m512i hi = bf16_high(_mm512_loadu_ps(r1 + c));
      _mm512_storeu_si512(out + p * kBq + c, _mm512_or_si512(lo, hi));
    }
  }
}

// Sizes in floats of bfloat16 / word buffers carved from float scratch.
constexpr int64_t halves(int64_t n) { return (n + 1) / 2; }

NPU_AMX_TARGET void forward_head_amx(const FlashAttentionArgs& a, const Dims& dm, const Seq& s,
                                     int64_t n, const TensorDesc& out, const TensorDesc& smax,
                                     const TensorDesc& ssum) {
  const int64_t D = dm.d, Dv = dm.dv, h = n / dm.group;
  const int64_t sq_pad = round_up(s.sq, kBq), sk_pad = round_up(s.skv, kBk);
  const int64_t x_floats = std::max(sq_pad * D, sk_pad * std::max(D, Dv));
  // Float rows (to convert), K rows, V^T blocks, Q rows, Q^T words, the tile, P^T pairs, O^T,
  // m and l of a pass's query blocks, an output block.
  const auto [x, kb_f, vt_f, qb_f, qt_f, tile, pt_f, ots, ms, ls, orow] =
      carve<11>({x_floats, halves(sk_pad * D), halves(sk_pad * Dv), halves(sq_pad * D),
                 halves(sq_pad * D), kBk * kBq, kBk * kBq / 2, kPassBlocks * Dv * kBq,
                 kPassBlocks * kBq, kPassBlocks * kBq, kBq * Dv});
  auto* kb = reinterpret_cast<uint16_t*>(kb_f);
  auto* vt = reinterpret_cast<uint16_t*>(vt_f);
  auto* qb = reinterpret_cast<uint16_t*>(qb_f);
  auto* qt = reinterpret_cast<uint32_t*>(qt_f);
  auto* pt = reinterpret_cast<uint32_t*>(pt_f);
  load_head_bf16(a.k, s, h, true, s.skv, sk_pad, kb);
  load_head_bf16(a.v, s, h, true, s.skv, sk_pad, reinterpret_cast<uint16_t*>(x));
  transpose_blocks_bf16(reinterpret_cast<uint16_t*>(x), sk_pad, Dv, vt);
  load_head_bf16(a.q, s, n, false, s.sq, sq_pad, qb);
  word_transpose_blocks(qb, sq_pad, D, qt);
  const Visibility vis(a, s, n);
  const float scale = static_cast<float>(a.scale);
  const HeadRows outr(out, s.b, n, s.q0);
  const amx::AmxTileScope tiles;
  // Query blocks in passes of kPassBlocks over the key tiles, as in forward_head.
  for (int64_t ip = 0; ip < s.sq; ip += kPassBlocks * kBq) {
    const int64_t blocks = std::min(kPassBlocks, (s.sq - ip + kBq - 1) / kBq);
    std::fill(ots, ots + blocks * Dv * kBq, 0.0f);
    std::fill(ms, ms + blocks * kBq, kNegInf);
    std::fill(ls, ls + blocks * kBq, 0.0f);
    for (int64_t j0 = 0; j0 < s.skv; j0 += kBk) {
      const int64_t cols = std::min(kBk, s.skv - j0);
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t i0 = ip + b * kBq, rows = std::min(kBq, s.sq - i0);
        const int cls = vis.classify(i0, i0 + rows, j0, j0 + cols);
        if (cls == 0) continue;
        float* ot = ots + b * Dv * kBq;
        // S^T = K Q^T;  O^T += V^T P^T
        amx::tile_product_bf16(kBk, kBq, D, kb + j0 * D, D, qt + i0 * D / 2, kBq, tile, kBq,
                               false);
        if (cls == 2 || cols < kBk) mask_tile(tile, vis, i0, j0, s.sq, s.skv);
        softmax_tile(tile, scale, ms + b * kBq, ls + b * kBq, ot, Dv);
        tile_to_pairs(tile, pt);
        amx::tile_product_bf16(Dv, kBq, kBk, vt + j0 * Dv, kBk, pt, kBq, ot, kBq, true);
      }
    }
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t i0 = ip + b * kBq, rows = std::min(kBq, s.sq - i0);
      write_block(ots + b * Dv * kBq, ms + b * kBq, ls + b * kBq, s, n, i0, rows, Dv, orow, outr,
                  smax, ssum);
    }
  }
}

NPU_AMX_TARGET void backward_head_amx(const FlashAttentionArgs& a, const Dims& dm, const Seq& s,
                                      int64_t h, const TensorDesc& out,
                                      const TensorDesc& grad_out, const TensorDesc& smax,
                                      const TensorDesc& ssum, const TensorDesc& grad_q,
                                      const TensorDesc& grad_k, const TensorDesc& grad_v) {
  const int64_t D = dm.d, Dv = dm.dv;
  // Query blocks go in pairs (kQPair queries) through dV += P^T dO and dK += dS^T Q: k = 128
  // queries a product, so the float accumulators dV and dK (which live in L2, not L1, at these
  // sizes) are loaded and stored half as often; the padding rows are zeros.
  constexpr int64_t kQPair = 2 * kBq;
  constexpr int64_t kKeyChunk = 4 * kBk;
  const int64_t sq_pad = round_up(s.sq, kQPair), sk_pad = round_up(s.skv, kBk);
  const int64_t wk = panel_width(D), wv = panel_width(Dv);  // dK / Q and dV / dO panels
  const int64_t x_floats = std::max(sq_pad, sk_pad) * std::max(D, Dv);
  // Float rows (to convert; dQ, dK, dV at the end), O rows, dO rows; K rows, V rows, K^T blocks;
  // Q rows, Q^T words, Q pairs (panels); dO rows, dO^T words, dO pairs (panels); lse, D_i, dQ^T
  // blocks, dK and dV (panels); the tiles S^T and dP^T, P^T and dS^T rows of a query pair, dS^T
  // pairs.
  const auto [x, orows, dor, kb_f, vb_f, kt_f, qb_f, qt_f, qp_f, db_f, dt_f, dp_f, lse, di, dqt,
              dk, dv, tile, dpt, prow_f, dsrow_f, dspair_f] =
      carve<22>({x_floats, sq_pad * Dv, sq_pad * Dv, halves(sk_pad * D), halves(sk_pad * Dv),
                 halves(sk_pad * D), halves(sq_pad * D), halves(sq_pad * D), halves(sq_pad * D),
                 halves(sq_pad * Dv), halves(sq_pad * Dv), halves(sq_pad * Dv), sq_pad, sq_pad,
                 sq_pad * D, sk_pad * D, sk_pad * Dv, kBk * kBq, kBk * kBq, kBk * kQPair / 2,
                 kBk * kQPair / 2, kBk * kBq / 2});
  auto* kb = reinterpret_cast<uint16_t*>(kb_f);
  auto* vb = reinterpret_cast<uint16_t*>(vb_f);
  auto* kt = reinterpret_cast<uint16_t*>(kt_f);
  auto* qb = reinterpret_cast<uint16_t*>(qb_f);
  auto* qt = reinterpret_cast<uint32_t*>(qt_f);
  auto* qp = reinterpret_cast<uint32_t*>(qp_f);
  auto* db = reinterpret_cast<uint16_t*>(db_f);
  auto* dt = reinterpret_cast<uint32_t*>(dt_f);
  auto* dp = reinterpret_cast<uint32_t*>(dp_f);
  auto* prow = reinterpret_cast<uint16_t*>(prow_f);
  auto* dsrow = reinterpret_cast<uint16_t*>(dsrow_f);
  auto* dspair = reinterpret_cast<uint32_t*>(dspair_f);
  load_head_bf16(a.k, s, h, true, s.skv, sk_pad, kb);
  transpose_blocks_bf16(kb, sk_pad, D, kt);
  load_head_bf16(a.v, s, h, true, s.skv, sk_pad, vb);
  std::fill(dk, dk + sk_pad * D, 0.0f);
  std::fill(dv, dv + sk_pad * Dv, 0.0f);
  const float scale = static_cast<float>(a.scale);
  const amx::AmxTileScope tiles;
  for (int64_t g = 0; g < dm.group; ++g) {
    const int64_t n = h * dm.group + g;
    load_head_bf16(a.q, s, n, false, s.sq, sq_pad, qb);
    word_transpose_blocks(qb, sq_pad, D, qt);
    pair_rows(qb, sq_pad, D, qp);
    load_head(grad_out, s, n, false, s.sq, sq_pad, dor);
    rows_to_bf16(dor, sq_pad * Dv, db);
    word_transpose_blocks(db, sq_pad, Dv, dt);
    pair_rows(db, sq_pad, Dv, dp);
    load_head(out, s, n, false, s.sq, sq_pad, orows);
    // D_i = rowsum(dO * O) and lse as in backward_head.
    const StatRows sm(smax, s.b, n, s.q0), ss(ssum, s.b, n, s.q0);
    for (int64_t r = 0; r < sq_pad; ++r) {
      double acc = 0;
      for (int64_t c = 0; c < Dv; ++c) acc += double(orows[r * Dv + c]) * dor[r * Dv + c];
      di[r] = static_cast<float>(acc);
      const float lv = r < s.sq ? ss.get(r) : 0.0f;
      lse[r] = lv > 0 ? sm.get(r) + std::log(lv) : std::numeric_limits<float>::infinity();
    }
    std::fill(dqt, dqt + sq_pad * D, 0.0f);
    const Visibility vis(a, s, n);
    // Keys in chunks of kKeyChunk, each walking every query pair: the chunk's key-side buffers
    // and one pair's query-side buffers stay in L2 (walking all queries for every key block
    // streamed the query side, megabytes a head at S = 4096, from memory each time).
    for (int64_t jc = 0; jc < s.skv; jc += kKeyChunk) {
      for (int64_t ip = 0; ip < s.sq; ip += kQPair) {
        for (int64_t j0 = jc; j0 < std::min(s.skv, jc + kKeyChunk); j0 += kBk) {
          const int64_t cols = std::min(kBk, s.skv - j0);
          bool any = false;
          for (int64_t half = 0; half < 2; ++half) {
            const int64_t i0 = ip + half * kBq;
            const int64_t rows = std::min(kBq, s.sq - i0);
            if (rows <= 0 || vis.classify(i0, i0 + rows, j0, j0 + cols) == 0) {
              for (int64_t r = 0; r < kBk; ++r) {
                std::fill_n(prow + r * kQPair + half * kBq, kBq, uint16_t{0});
                std::fill_n(dsrow + r * kQPair + half * kBq, kBq, uint16_t{0});
              }
              continue;
            }
            const int cls = vis.classify(i0, i0 + rows, j0, j0 + cols);
            any = true;
            // S^T = K Q^T;  dP^T = V dO^T
            amx::tile_product_bf16(kBk, kBq, D, kb + j0 * D, D, qt + i0 * D / 2, kBq, tile, kBq,
                                   false);
            amx::tile_product_bf16(kBk, kBq, Dv, vb + j0 * Dv, Dv, dt + i0 * Dv / 2, kBq, dpt,
                                   kBq, false);
            if (cls == 2 || cols < kBk) mask_tile(tile, vis, i0, j0, s.sq, s.skv);
            backward_tile(tile, dpt, lse + i0, di + i0, scale);
            tile_to_rows(tile, prow + half * kBq, kQPair);
            tile_to_rows(dpt, dsrow + half * kBq, kQPair);
            tile_to_pairs(dpt, dspair);
            // dQ^T += K^T dS^T (the scale is applied once at the end)
            amx::tile_product_bf16(D, kBq, kBk, kt + j0 * D, kBk, dspair, kBq, dqt + i0 * D, kBq,
                                   true);
          }
          if (!any) continue;
          // dV += P^T dO;  dK += dS^T Q over the pair's 128 queries, panel by panel
          for (int64_t c = 0; c < Dv; c += wv) {
            const uint32_t* b = dp + c * sq_pad / 2 + ip / 2 * wv;
            amx::tile_product_bf16(kBk, wv, kQPair, prow, kQPair, b, wv, dv + c * sk_pad + j0 * wv,
                                   wv, true);
          }
          for (int64_t c = 0; c < D; c += wk) {
            const uint32_t* b = qp + c * sq_pad / 2 + ip / 2 * wk;
            amx::tile_product_bf16(kBk, wk, kQPair, dsrow, kQPair, b, wk, dk + c * sk_pad + j0 * wk,
                                   wk, true);
          }
        }
      }
    }
    for (int64_t i0 = 0; i0 < s.sq; i0 += kBq) {
      const float* blk = dqt + i0 * D;
      for (int64_t r = 0; r < std::min(kBq, s.sq - i0); ++r) {
        for (int64_t c = 0; c < D; ++c) x[(i0 + r) * D + c] = blk[c * kBq + r] * scale;
      }
    }
    HeadRows(grad_q, s.b, n, s.q0).store(0, s.sq, x);
  }
  unpanel(dk, s.skv, sk_pad, D, scale, x);
  HeadRows(grad_k, s.b, h, s.k0).store(0, s.skv, x);
  unpanel(dv, s.skv, sk_pad, Dv, 1.0f, x);
  HeadRows(grad_v, s.b, h, s.k0).store(0, s.skv, x);
}

bool fast_forward(const FlashAttentionArgs& a, const TensorDesc& out, const TensorDesc& smax,
                  const TensorDesc& ssum) {
  if (a.k.dtype == DType::Int8) return false;
  const Dims dm = dims_of(a);
  const std::vector<Seq> seqs = sequences(a);
  const int64_t items = static_cast<int64_t>(seqs.size()) * dm.nq;
  if (!fast_path_applies(a, dm, items, nullptr)) return false;
  const bool amx = amx_products(a.q.dtype);
  parallel_for(0, items, 1, [&](int64_t b, int64_t e) {
    for (int64_t it = b; it < e; ++it) {
      if (amx) {
        forward_head_amx(a, dm, seqs[it / dm.nq], it % dm.nq, out, smax, ssum);
      } else {
        forward_head(a, dm, seqs[it / dm.nq], it % dm.nq, out, smax, ssum);
      }
    }
  });
  return true;
}

bool fast_backward(const FlashAttentionArgs& a, const TensorDesc& out, const TensorDesc& grad_out,
                   const TensorDesc& smax, const TensorDesc& ssum, const TensorDesc& grad_q,
                   const TensorDesc& grad_k, const TensorDesc& grad_v,
                   const TensorDesc* grad_pse) {
  if (a.k.dtype == DType::Int8) return false;
  const Dims dm = dims_of(a);
  const std::vector<Seq> seqs = sequences(a);
  const int64_t items = static_cast<int64_t>(seqs.size()) * dm.nkv;
  if (!fast_path_applies(a, dm, items, grad_pse)) return false;
  const bool amx = amx_products(a.q.dtype);
  parallel_for(0, items, 1, [&](int64_t b, int64_t e) {
    for (int64_t it = b; it < e; ++it) {
      if (amx) {
        backward_head_amx(a, dm, seqs[it / dm.nkv], it % dm.nkv, out, grad_out, smax, ssum,
                          grad_q, grad_k, grad_v);
      } else {
        backward_head(a, dm, seqs[it / dm.nkv], it % dm.nkv, out, grad_out, smax, ssum, grad_q,
                      grad_k, grad_v);
      }
    }
  });
  return true;
}

// ---- short heads on AVX-512: a row of scores in at most four zmm --------------------------
//
// The short path's items (above) with every row of scores held in registers: chunk c of a row
// is its keys [16c, 16c + 16). The keys (and, for the backward, the values) are laid out
// d-major and padded to whole chunks (Kt[d * ldk + j], zeros past Skv), so a row's scores are
// D broadcast FMAs per chunk; the keys a row sees are a 64-bit set (the band is one run of
// bits, the prefix another, the explicit mask clears bits); the softmax runs on the chunks
// under that set, and O = P V and dQ = scale * dS K are FMAs of V's and K's rows (at most four
// zmm wide) broadcast by the visible P_ij and dS_ij only. Same statistics and conventions as
// short_forward_head / short_backward_head, which a CPU without AVX-512 runs.
std::atomic<bool> g_short_avx512{true};

bool short_avx512() { return g_short_avx512.load(std::memory_order_relaxed) && fast_path_cpu(); }

// Bits [lo, hi] of a 64-bit set, clipped to [0, 63].
uint64_t bit_run(int64_t lo, int64_t hi) {
  lo = std::max<int64_t>(lo, 0);
  hi = std::min<int64_t>(hi, 63);
  if (lo > hi) return 0;
  const uint64_t upto = hi == 63 ? ~0ull : (1ull << (hi + 1)) - 1;
  return upto & ~((1ull << lo) - 1);
}

// The keys j < skv (<= 64) that query row i sees, as Visibility::visible decides.
uint64_t visible_keys(const Visibility& vis, int64_t i, int64_t skv) {
  uint64_t bits = (bit_run(i + vis.lo, i + vis.hi) | bit_run(0, vis.prefix - 1)) &
                  bit_run(0, skv - 1);
  if (vis.mask) {
    for (uint64_t b = bits; b; b &= b - 1) {
      const int64_t j = __builtin_ctzll(b);
      if (vis.mask[i * vis.mask_si + j * vis.mask_sj]) bits &= ~(1ull << j);
    }
  }
  return bits;
}

NPU_FA512 NPU_FA_INLINE __mmask16 chunk_mask(uint64_t bits, int c) {
  return static_cast<__mmask16>(bits >> (16 * c));
}

NPU_FA512 NPU_FA_INLINE __mmask16 tail_mask(int64_t n, int c) {  // lanes [16c, n) of chunk c
  const int64_t left = n - 16 * c;
  return left >= 16 ? kAll16 : static_cast<__mmask16>((1u << left) - 1);
}


// Horizontal sum and max of 16 floats: the 256-bit halves swapped (vshuff32x4) and combined,
// then the 8-lane forms (the _mm512_reduce_* intrinsics trip GCC 12's false
// -Wmaybe-uninitialized on their _mm256_undefined_pd operand).
NPU_FA512 NPU_FA_INLINE __m512 swap_halves(__m512 x) {
  return _mm512_maskz_shuffle_f32x4(kAll16, x, x, 0x4E);
}
NPU_FA512 NPU_FA_INLINE float hsum512(__m512 x) {
  return hsum256(_mm512_maskz_extractf32x8_ps(0xff, _mm512_add_ps(x, swap_halves(x)), 0));
}
NPU_FA512 NPU_FA_INLINE float hmax512(__m512 x) {
  const __m512 m = _mm512_maskz_max_ps(kAll16, x, swap_halves(x));
  return hmax256(_mm512_maskz_extractf32x8_ps(0xff, m, 0));
}

// The scores of query row q (D floats) over the NK chunks of Kt: scale * q . k_j.
template <int NK>
NPU_FA512 NPU_FA_INLINE void chunk_scores(const float* q, const float* Kt, int64_t D, int64_t ldk,
                                          float scale, __m512* sc) {
  __m512 odd[NK];  // two chains of FMAs (even and odd d): half the latency
  for (int c = 0; c < NK; ++c) sc[c] = odd[c] = _mm512_setzero_ps();
  int64_t d = 0;
  for (; d + 2 <= D; d += 2) {
    const __m512 w0 = _mm512_set1_ps(scale * q[d]), w1 = _mm512_set1_ps(scale * q[d + 1]);
    for (int c = 0; c < NK; ++c) {
      sc[c] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(Kt + d * ldk + 16 * c), sc[c]);
      odd[c] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(Kt + (d + 1) * ldk + 16 * c), odd[c]);
    }
  }
  if (d < D) {
    const __m512 w = _mm512_set1_ps(scale * q[d]);
    for (int c = 0; c < NK; ++c) {
      sc[c] = _mm512_fmadd_ps(w, _mm512_loadu_ps(Kt + d * ldk + 16 * c), sc[c]);
    }
  }
  for (int c = 0; c < NK; ++c) sc[c] = _mm512_add_ps(sc[c], odd[c]);
}

// p = exp(sc - m) * mul on the visible keys, 0 elsewhere; returns the sum of exp(sc - m).
template <int NK>
NPU_FA512 NPU_FA_INLINE float chunk_softmax(const __m512* sc, uint64_t bits, float m, float mul,
                                            float* p) {
  __m512 sum = _mm512_setzero_ps();
  for (int c = 0; c < NK; ++c) {
    const __m512 e =
        _mm512_maskz_mov_ps(chunk_mask(bits, c), exp512(_mm512_sub_ps(sc[c], _mm512_set1_ps(m))));
    sum = _mm512_add_ps(sum, e);
    _mm512_storeu_ps(p + 16 * c, _mm512_mul_ps(e, _mm512_set1_ps(mul)));
  }
  return hsum512(sum);
}

template <int NK>
NPU_FA512 NPU_FA_INLINE float chunk_max(const __m512* sc, uint64_t bits) {
  __m512 mx = _mm512_set1_ps(kNegInf);
  for (int c = 0; c < NK; ++c) mx = _mm512_mask_max_ps(mx, chunk_mask(bits, c), mx, sc[c]);
  return hmax512(mx);
}

// acc[0, NW) += w * x[0, n) for the set bits j of `bits`, w = p[j], x = rows + j * n (n <= 16 NW).
template <int NW>
NPU_FA512 NPU_FA_INLINE void weighted_rows(uint64_t bits, const float* p, const float* rows,
                                           int64_t n, __m512* acc) {
  __m512 odd[NW];  // every other visible key into a second chain: half the latency
  for (int c = 0; c < NW; ++c) odd[c] = _mm512_setzero_ps();
  uint64_t b = bits;
  while (b) {
    const int64_t j = __builtin_ctzll(b);
    b &= b - 1;
    const __m512 w = _mm512_set1_ps(p[j]);
    const float* x = rows + j * n;
    for (int c = 0; c < NW; ++c) {
      acc[c] = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(tail_mask(n, c), x + 16 * c), acc[c]);
    }
    if (!b) break;
    const int64_t j1 = __builtin_ctzll(b);
    b &= b - 1;
    const __m512 w1 = _mm512_set1_ps(p[j1]);
    const float* x1 = rows + j1 * n;
    for (int c = 0; c < NW; ++c) {
      odd[c] = _mm512_fmadd_ps(w1, _mm512_maskz_loadu_ps(tail_mask(n, c), x1 + 16 * c), odd[c]);
    }
  }
  for (int c = 0; c < NW; ++c) acc[c] = _mm512_add_ps(acc[c], odd[c]);
}

template <int NK, int NV>
NPU_FA512 void short_forward_head512(const FlashAttentionArgs& a, const Dims& dm, const Seq& s,
                                     int64_t n, const TensorDesc& out, const TensorDesc& smax,
                                     const TensorDesc& ssum) {
  const int64_t sq = s.sq, skv = s.skv, D = dm.d, Dv = dm.dv, h = n / dm.group, ldk = 16 * NK;
  float* Q = block_scratch(static_cast<size_t>(sq * D + skv * D + D * ldk + skv * Dv + sq * Dv +
                                               2 * sq + ldk));
  float* K = Q + sq * D;
  float* Kt = K + skv * D;
  float* V = Kt + D * ldk;
  float* O = V + skv * Dv;
  float* m = O + sq * Dv;
  float* l = m + sq;
  float* p = l + sq;
  HeadRows(a.q, s.b, n, s.q0).load(0, sq, Q);
  HeadRows(a.k, s.b, h, s.k0).load(0, skv, K);
  HeadRows(a.v, s.b, h, s.k0).load(0, skv, V);
  transpose_padded(K, skv, D, ldk, Kt);
  const Visibility vis(a, s, n);
  const float scale = static_cast<float>(a.scale);
  for (int64_t i = 0; i < sq; ++i) {
    float* o = O + i * Dv;
    const uint64_t bits = visible_keys(vis, i, skv);
    m[i] = kNegInf;
    l[i] = 0.0f;
    if (bits == 0) {  // nothing visible: the row's output is 0
      std::fill_n(o, Dv, 0.0f);
      continue;
    }
    __m512 sc[NK];
    chunk_scores<NK>(Q + i * D, Kt, D, ldk, scale, sc);
    m[i] = chunk_max<NK>(sc, bits);
    l[i] = chunk_softmax<NK>(sc, bits, m[i], 1.0f, p);
    __m512 acc[NV];
    for (int c = 0; c < NV; ++c) acc[c] = _mm512_setzero_ps();
    weighted_rows<NV>(bits, p, V, Dv, acc);
    for (int c = 0; c < NV; ++c) _mm512_mask_storeu_ps(o + 16 * c, tail_mask(Dv, c), acc[c]);
  }
  finish_rows(s, n, 0, sq, Dv, O, m, l, out, smax, ssum);
}

template <int NK, int ND>
NPU_FA512 void short_backward_head512(const FlashAttentionArgs& a, const Dims& dm, const Seq& s,
                                      int64_t h, const TensorDesc& out,
                                      const TensorDesc& grad_out, const TensorDesc& smax,
                                      const TensorDesc& ssum, const TensorDesc& grad_q,
                                      const TensorDesc& grad_k, const TensorDesc& grad_v) {
  const int64_t sq = s.sq, skv = s.skv, D = dm.d, Dv = dm.dv, ldk = 16 * NK;
  const int64_t kv = skv * std::max(D, Dv);
  float* K = block_scratch(static_cast<size_t>(skv * D + kv + 2 * (D + Dv) * ldk +
                                               sq * (2 * D + 2 * Dv) + 2 * ldk));
  float* rows = K + skv * D;  // V's rows, then dK's and dV's for the store
  float* Kt = rows + kv;
  float* Vt = Kt + D * ldk;
  float* dKt = Vt + Dv * ldk;
  float* dVt = dKt + D * ldk;
  float* Q = dVt + Dv * ldk;
  float* dQ = Q + sq * D;
  float* dO = dQ + sq * D;
  float* O = dO + sq * Dv;
  float* p = O + sq * Dv;
  float* ds = p + ldk;
  HeadRows(a.k, s.b, h, s.k0).load(0, skv, K);
  transpose_padded(K, skv, D, ldk, Kt);
  load_transposed(a.v, s, h, rows, Vt, ldk);
  std::fill_n(dKt, D * ldk, 0.0f);
  std::fill_n(dVt, Dv * ldk, 0.0f);
  const float scale = static_cast<float>(a.scale);
  for (int64_t g = 0; g < dm.group; ++g) {
    const int64_t n = h * dm.group + g;
    HeadRows(a.q, s.b, n, s.q0).load(0, sq, Q);
    HeadRows(grad_out, s.b, n, s.q0).load(0, sq, dO);
    HeadRows(out, s.b, n, s.q0).load(0, sq, O);
    const StatRows sm(smax, s.b, n, s.q0), ss(ssum, s.b, n, s.q0);
    const Visibility vis(a, s, n);
    for (int64_t i = 0; i < sq; ++i) {
      const float li = ss.get(i);
      const float* q = Q + i * D;
      const float* go = dO + i * Dv;
      float* dq = dQ + i * D;
      const uint64_t bits = li > 0 ? visible_keys(vis, i, skv) : 0;
      if (bits == 0) {
        std::fill_n(dq, D, 0.0f);
        continue;
      }
      __m512 sc[NK];
      chunk_scores<NK>(q, Kt, D, ldk, scale, sc);
      chunk_softmax<NK>(sc, bits, sm.get(i), 1.0f / li, p);  // P_ij
      __m512 dot = _mm512_setzero_ps();  // D_i = dO_i . O_i
      for (int64_t c = 0; c < Dv; c += 16) {
        const __mmask16 t = tail_mask(Dv - c, 0);
        dot = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(t, go + c),
                              _mm512_maskz_loadu_ps(t, O + i * Dv + c), dot);
      }
      const __m512 di = _mm512_set1_ps(hsum512(dot));
      __m512 dp[NK];
      for (int c = 0; c < NK; ++c) dp[c] = _mm512_setzero_ps();
      for (int64_t c = 0; c < Dv; ++c) {
        const __m512 w = _mm512_set1_ps(go[c]);
        for (int k = 0; k < NK; ++k) {
          dp[k] = _mm512_fmadd_ps(w, _mm512_loadu_ps(Vt + c * ldk + 16 * k), dp[k]);
        }
      }
      __m512 dsv[NK], pv[NK];
      for (int k = 0; k < NK; ++k) {
        pv[k] = _mm512_loadu_ps(p + 16 * k);
        dsv[k] = _mm512_mul_ps(pv[k], _mm512_sub_ps(dp[k], di));
        _mm512_storeu_ps(ds + 16 * k, dsv[k]);
      }
      __m512 acc[ND];
      for (int c = 0; c < ND; ++c) acc[c] = _mm512_setzero_ps();
      weighted_rows<ND>(bits, ds, K, D, acc);
      for (int c = 0; c < ND; ++c) {
        _mm512_mask_storeu_ps(dq + 16 * c, tail_mask(D, c),
                              _mm512_mul_ps(acc[c], _mm512_set1_ps(scale)));
      }
      for (int64_t d = 0; d < D; ++d) {  // dK^T += scale * q dS
        const __m512 w = _mm512_set1_ps(scale * q[d]);
        float* x = dKt + d * ldk;
        for (int k = 0; k < NK; ++k) {
          _mm512_storeu_ps(x + 16 * k, _mm512_fmadd_ps(w, dsv[k], _mm512_loadu_ps(x + 16 * k)));
        }
      }
      for (int64_t c = 0; c < Dv; ++c) {  // dV^T += dO P
        const __m512 w = _mm512_set1_ps(go[c]);
        float* x = dVt + c * ldk;
        for (int k = 0; k < NK; ++k) {
          _mm512_storeu_ps(x + 16 * k, _mm512_fmadd_ps(w, pv[k], _mm512_loadu_ps(x + 16 * k)));
        }
      }
    }
    HeadRows(grad_q, s.b, n, s.q0).store(0, sq, dQ);
  }
  store_transposed(dKt, ldk, s, h, rows, grad_k);
  store_transposed(dVt, ldk, s, h, rows, grad_v);
}

template <int NK, int NW>
struct ShortForwardKernel {
  static constexpr auto fn = short_forward_head512<NK, NW>;
};
template <int NK, int NW>
struct ShortBackwardKernel {
  static constexpr auto fn = short_backward_head512<NK, NW>;
};

template <template <int, int> class K, size_t... I>
constexpr auto short_table(std::index_sequence<I...>) {
  return std::array{K<static_cast<int>(I / 4) + 1, static_cast<int>(I % 4) + 1>::fn...};
}

// The instance of kernel K for a head with skv keys (<= 64) and a head dim of `lanes` (<= 64)
// for its rows of P V (forward: Dv) or dS K (backward: D): by their 16-float chunks.
template <template <int, int> class K>
auto short_kernel(int64_t skv, int64_t lanes) {
  static constexpr auto kTable = short_table<K>(std::make_index_sequence<16>());
  return kTable[((skv + 15) / 16 - 1) * 4 + (lanes + 15) / 16 - 1];
}

}  // namespace
}  // namespace detail

namespace testing {
void set_attention_amx(bool allowed) {
  detail::g_attention_amx.store(allowed, std::memory_order_relaxed);
}
void set_short_attention_avx512(bool allowed) {
  detail::g_short_avx512.store(allowed, std::memory_order_relaxed);
}
bool short_attention_avx512() { return detail::short_avx512(); }
void set_decode_attention_grouped(bool allowed) {
  detail::g_decode_grouped.store(allowed, std::memory_order_relaxed);
}
int64_t decode_attention_grouped_items() {
  return detail::g_decode_grouped_items.load(std::memory_order_relaxed);
}
const char* attention_bf16_products() {
  return detail::amx_products(DType::BFloat16) ? "amx_bf16" : "fma_f32";
}
}  // namespace testing

bool attention_dropout_keep(uint64_t seed, uint64_t offset, int64_t seq, int64_t head,
                            int64_t i, int64_t j, double keep_prob) {
  FlashAttentionArgs a;
  a.seed = seed;
  a.offset = offset;
  a.keep_prob = keep_prob;
  detail::Dropout d(a);
  return d.keep(d.head_key(seq, head), i, j);
}

void flash_attention_forward(const FlashAttentionArgs& a, const TensorDesc& out,
                             const TensorDesc& softmax_max, const TensorDesc& softmax_sum) {
  using namespace detail;
  NPU_KERNEL_ASSERT((a.k.dtype == DType::Int8) == (a.v.dtype == DType::Int8) &&
                        (a.k.dtype != DType::Int8 ||
                         (a.antiquant.k_scale && a.antiquant.v_scale)),
                    "an int8 key / value needs both int8 and their antiquant scales");
  const Dims dm = dims_of(a);
  std::vector<Seq> seqs = sequences(a);
  if (a.keep_prob >= 1.0 && a.k.dtype != DType::Int8 &&
      std::all_of(seqs.begin(), seqs.end(), [](const Seq& s) { return s.sq <= kDecodeRows; })) {
    if (decode_grouped_applies(a, dm) && decode_grouped_fills_pool(seqs.size(), dm)) {
      g_decode_grouped_items.fetch_add(static_cast<int64_t>(seqs.size()) * dm.nkv,
                                       std::memory_order_relaxed);
      parallel_for(0, static_cast<int64_t>(seqs.size()) * dm.nkv, 1, [&](int64_t b, int64_t e) {
        for (int64_t it = b; it < e; ++it) {
          decode_group(a, dm, seqs[it / dm.nkv], it % dm.nkv, out, softmax_max, softmax_sum);
        }
      });
      return;
    }
    // decoding: one item per (sequence, head), keys and values read once
    const Items items(std::move(seqs), dm.nq, kDecodeRows, false);
    parallel_for(0, items.total(), 1, [&](int64_t b, int64_t e) {
      for (int64_t it = b; it < e; ++it) {
        const Seq* s;
        int64_t n, i0;
        items.locate(it, &s, &n, &i0);
        decode_block(a, dm, *s, n, out, softmax_max, softmax_sum);
      }
    });
    return;
  }
  if (a.k.dtype != DType::Int8 && short_path_applies(a, dm, seqs, nullptr)) {
    const bool vec = short_avx512();
    for_each_head(static_cast<int64_t>(seqs.size()) * dm.nq, [&](int64_t it) {
      const Seq& s = seqs[it / dm.nq];
      if (vec && s.skv > 0) {
        short_kernel<ShortForwardKernel>(s.skv, dm.dv)(a, dm, s, it % dm.nq, out, softmax_max,
                                                       softmax_sum);
      } else {
        short_forward_head(a, dm, s, it % dm.nq, out, softmax_max, softmax_sum);
      }
    });
    return;
  }
  if (detail::fast_forward(a, out, softmax_max, softmax_sum)) return;
  const Dropout drop(a);
  const Items items(std::move(seqs), dm.nq, kBr, false);
  // Last query blocks first: under a causal band they are the heavy ones, and the pool hands
  // out chunks in order, so the light ones fill the tail instead of one thread finishing late.
  parallel_for(0, items.total(), 1, [&](int64_t b, int64_t e) {
    for (int64_t it = b; it < e; ++it) {
      const Seq* s;
      int64_t n, i0;
      items.locate(items.total() - 1 - it, &s, &n, &i0);
      forward_block(a, dm, drop, *s, n, i0, out, softmax_max, softmax_sum);
    }
  });
}

// ---- backward ---------------------------------------------------------------------------

namespace detail {
namespace {

// Everything a backward block needs about one query block: rows loaded once per block.
struct QueryBlock {
  int64_t rows;
  float *Q, *dO, *m, *l, *Di;
};

// P (probabilities, dropout applied or not) and dS for one (query block, key block) pair:
// on return S holds dS and Pd holds the dropped probabilities (what multiplied V).
void scores_backward(const FlashAttentionArgs& a, const Dims& dm, const Dropout& drop,
                     uint64_t hk, const Visibility& vis, const PseRows& pse, int cls,
                     const QueryBlock& qb, int64_t i0, const float* K, const float* V, int64_t j0,
                     int64_t cols, float* S, float* dP, float* Pd) {
  const int64_t rows = qb.rows, D = dm.d, Dv = dm.dv;
  gemm(mat(S, rows, cols, cols, 1), mat(qb.Q, rows, D, D, 1), mat(K, D, cols, 1, D), a.scale, 0.0);
  if (pse) pse.add(S, rows, cols, cols, i0, j0, static_cast<float>(a.scale));
  if (cls == 2) apply_visibility(S, rows, cols, cols, vis, i0, j0);
  gemm(mat(dP, rows, cols, cols, 1), mat(qb.dO, rows, Dv, Dv, 1), mat(V, Dv, cols, 1, Dv), 1.0,
       0.0);
  for (int64_t r = 0; r < rows; ++r) {
    float* p = S + r * cols;
    float* dp = dP + r * cols;
    float* pd = Pd ? Pd + r * cols : nullptr;
    if (qb.l[r] > 0) {
      exp_row(p, cols, qb.m[r], 1.0f / qb.l[r]);
    } else {
      std::fill(p, p + cols, 0.0f);
    }
    const float di = qb.Di[r];
    if (drop.on) {
      for (int64_t c = 0; c < cols; ++c) {
        const float z = drop.keep(hk, i0 + r, j0 + c) ? drop.inv_keep : 0.0f;
        if (pd) pd[c] = p[c] * z;
        p[c] = p[c] * (dp[c] * z - di);
      }
    } else {
      for (int64_t c = 0; c < cols; ++c) {
        if (pd) pd[c] = p[c];
        p[c] = p[c] * (dp[c] - di);
      }
    }
  }
}

void load_query_block(const FlashAttentionArgs& a, const Dims& dm, const TensorDesc& grad_out,
                      const TensorDesc& smax, const TensorDesc& ssum, const float* Di_all,
                      const Seq& s, int64_t n, int64_t i0, QueryBlock* qb) {
  HeadRows(a.q, s.b, n, s.q0).load(i0, qb->rows, qb->Q);
  HeadRows(grad_out, s.b, n, s.q0).load(i0, qb->rows, qb->dO);
  const StatRows sm(smax, s.b, n, s.q0 + i0), ss(ssum, s.b, n, s.q0 + i0);
  for (int64_t r = 0; r < qb->rows; ++r) {
    qb->m[r] = sm.get(r);
    qb->l[r] = ss.get(r);
  }
  (void)dm;
  qb->Di = const_cast<float*>(Di_all);
}

// The scratch of one key block's backward, per worker: the block's K and V and their gradients,
// one query block (Q, dO), the score tiles S, dP and Pd, and the query rows' max and sum.
struct KeyBlockScratch {
  std::array<float*, 11> blocks;  // K, V, dK, dV, Qb, dOb, S, dP, Pd, m, l

  KeyBlockScratch(int64_t D, int64_t Dv) {
    const int64_t sizes[11] = {kBc * D,   kBc * Dv,  kBc * D,   kBc * Dv, kBr * D, kBr * Dv,
                               kBr * kBc, kBr * kBc, kBr * kBc, kBr,      kBr};
    int64_t total = 0;
    for (int64_t size : sizes) total += size;
    float* next = block_scratch(static_cast<size_t>(total));
    for (size_t i = 0; i < blocks.size(); ++i) {
      blocks[i] = next;
      next += sizes[i];
    }
  }
};

}  // namespace
}  // namespace detail

void flash_attention_backward(const FlashAttentionArgs& a, const TensorDesc& out,
                              const TensorDesc& grad_out, const TensorDesc& softmax_max,
                              const TensorDesc& softmax_sum, const TensorDesc& grad_q,
                              const TensorDesc& grad_k, const TensorDesc& grad_v,
                              const TensorDesc* grad_pse) {
  using namespace detail;
  NPU_KERNEL_ASSERT(a.k.dtype != DType::Int8 && a.v.dtype != DType::Int8,
                    "the attention backward takes no int8 (antiquant) key / value");
  const Dims dm = dims_of(a);
  if (const std::vector<Seq> seqs = sequences(a); short_path_applies(a, dm, seqs, grad_pse)) {
    const bool vec = short_avx512();
    for_each_head(static_cast<int64_t>(seqs.size()) * dm.nkv, [&](int64_t it) {
      const Seq& s = seqs[it / dm.nkv];
      if (vec && s.skv > 0) {
        short_kernel<ShortBackwardKernel>(s.skv, dm.d)(a, dm, s, it % dm.nkv, out, grad_out,
                                                       softmax_max, softmax_sum, grad_q, grad_k,
                                                       grad_v);
      } else {
        short_backward_head(a, dm, s, it % dm.nkv, out, grad_out, softmax_max, softmax_sum,
                            grad_q, grad_k, grad_v);
      }
    });
    return;
  }
  if (detail::fast_backward(a, out, grad_out, softmax_max, softmax_sum, grad_q, grad_k, grad_v,
                            grad_pse)) {
    return;
  }
  const Dropout drop(a);
  const int64_t D = dm.d, Dv = dm.dv;
  const Items qitems(sequences(a), dm.nq, kBr, false);
  // D_i = rowsum(dO * O) for every query row, indexed by query item * kBr + row.
  std::vector<float> Di(static_cast<size_t>(qitems.total() * kBr));
  parallel_for(0, qitems.total(), 1, [&](int64_t b, int64_t e) {
    std::vector<float> o(kBr * Dv), g(kBr * Dv);
    for (int64_t it = b; it < e; ++it) {
      const Seq* s;
      int64_t n, i0;
      qitems.locate(it, &s, &n, &i0);
      const int64_t rows = std::min(kBr, s->sq - i0);
      HeadRows(out, s->b, n, s->q0).load(i0, rows, o.data());
      HeadRows(grad_out, s->b, n, s->q0).load(i0, rows, g.data());
      for (int64_t r = 0; r < rows; ++r) {
        double acc = 0;
        for (int64_t c = 0; c < Dv; ++c) acc += double(o[r * Dv + c]) * g[r * Dv + c];
        Di[it * kBr + r] = static_cast<float>(acc);
      }
    }
  });
  // The item of query row block (sequence k, head n, block) is start[k*nq + n] + block.
  auto query_item = [&](int64_t seq_pos, int64_t n, int64_t i0) {
    return qitems.start[seq_pos * dm.nq + n] + i0 / kBr;
  };

  // One pass per (sequence, kv head) when there are enough of them to keep the pool busy:
  // dQ accumulates in a float buffer of the item (O(S x D)), so S and dP are computed once.
  const std::vector<Seq> seqs = sequences(a);
  const int64_t heads_items = static_cast<int64_t>(seqs.size()) * dm.nkv;
  if (heads_items >= 4 * num_threads() || heads_items % num_threads() == 0) {
    parallel_for(0, heads_items, 1, [&](int64_t b, int64_t e) {
      KeyBlockScratch w(D, Dv);
      auto [K, V, dK, dV, Qb, dOb, S, dP, Pd, m, l] = w.blocks;
      for (int64_t it = b; it < e; ++it) {
        const Seq& s = seqs[it / dm.nkv];
        const int64_t h = it % dm.nkv, seq_pos = it / dm.nkv;
        std::vector<float> dQ(static_cast<size_t>(dm.group * s.sq * D), 0.0f);
        const HeadRows kr(a.k, s.b, h, s.k0), vr(a.v, s.b, h, s.k0);
        for (int64_t j0 = 0; j0 < s.skv; j0 += kBc) {
          const int64_t cols = std::min(kBc, s.skv - j0);
          kr.load(j0, cols, K);
          vr.load(j0, cols, V);
          std::fill(dK, dK + cols * D, 0.0f);
          std::fill(dV, dV + cols * Dv, 0.0f);
          for (int64_t g = 0; g < dm.group; ++g) {
            const int64_t n = h * dm.group + g;
            const Visibility vis(a, s, n);
            const PseRows pse(a, s, n);
            const GradPseRows dpse(grad_pse, s, n);
            const uint64_t hk = drop.on ? drop.head_key(s.index, n) : 0;
            for (int64_t i0 = 0; i0 < s.sq; i0 += kBr) {
              const int64_t rows = std::min(kBr, s.sq - i0);
              const int cls = vis.classify(i0, i0 + rows, j0, j0 + cols);
              if (cls == 0) continue;
              QueryBlock qb{rows, Qb, dOb, m, l, nullptr};
              load_query_block(a, dm, grad_out, softmax_max, softmax_sum,
                               Di.data() + query_item(seq_pos, n, i0) * kBr, s, n, i0, &qb);
              scores_backward(a, dm, drop, hk, vis, pse, cls, qb, i0, K, V, j0, cols, S, dP,
                              Pd);
              if (dpse) dpse.put(S, rows, cols, i0, j0, static_cast<float>(a.scale));
              gemm(mat(dV, cols, Dv, Dv, 1), mat(Pd, cols, rows, 1, cols),
                   mat(dOb, rows, Dv, Dv, 1), 1.0, 1.0);
              gemm(mat(dK, cols, D, D, 1), mat(S, cols, rows, 1, cols), mat(Qb, rows, D, D, 1),
                   a.scale, 1.0);
              gemm(mat(dQ.data() + (g * s.sq + i0) * D, rows, D, D, 1),
                   mat(S, rows, cols, cols, 1), mat(K, cols, D, D, 1), a.scale, 1.0);
            }
          }
          HeadRows(grad_k, s.b, h, s.k0).store(j0, cols, dK);
          HeadRows(grad_v, s.b, h, s.k0).store(j0, cols, dV);
        }
        for (int64_t g = 0; g < dm.group; ++g) {
          HeadRows(grad_q, s.b, h * dm.group + g, s.q0).store(0, s.sq, dQ.data() + g * s.sq * D);
        }
      }
    });
    return;
  }

  // dK, dV: items over (sequence, kv head, key block).
  const Items kitems(sequences(a), dm.nkv, kBc, true);
  parallel_for(0, kitems.total(), 1, [&](int64_t b, int64_t e) {
    KeyBlockScratch w(D, Dv);
    auto [K, V, dK, dV, Qb, dOb, S, dP, Pd, m, l] = w.blocks;
    for (int64_t it = b; it < e; ++it) {
      const Seq* s;
      int64_t h, j0;
      kitems.locate(it, &s, &h, &j0);
      const int64_t seq_pos = s - kitems.seqs.data();
      const int64_t cols = std::min(kBc, s->skv - j0);
      HeadRows(a.k, s->b, h, s->k0).load(j0, cols, K);
      HeadRows(a.v, s->b, h, s->k0).load(j0, cols, V);
      std::fill(dK, dK + cols * D, 0.0f);
      std::fill(dV, dV + cols * Dv, 0.0f);
      for (int64_t n = h * dm.group; n < (h + 1) * dm.group; ++n) {
        const Visibility vis(a, *s, n);
        const PseRows pse(a, *s, n);
        const GradPseRows dpse(grad_pse, *s, n);
        const uint64_t hk = drop.on ? drop.head_key(s->index, n) : 0;
        for (int64_t i0 = 0; i0 < s->sq; i0 += kBr) {
          const int64_t rows = std::min(kBr, s->sq - i0);
          const int cls = vis.classify(i0, i0 + rows, j0, j0 + cols);
          if (cls == 0) continue;
          QueryBlock qb{rows, Qb, dOb, m, l, nullptr};
          load_query_block(a, dm, grad_out, softmax_max, softmax_sum,
                           Di.data() + query_item(seq_pos, n, i0) * kBr, *s, n, i0, &qb);
          scores_backward(a, dm, drop, hk, vis, pse, cls, qb, i0, K, V, j0, cols, S, dP, Pd);
          if (dpse) dpse.put(S, rows, cols, i0, j0, static_cast<float>(a.scale));
          // dV += Pd^T dO;  dK += scale * dS^T Q
          gemm(mat(dV, cols, Dv, Dv, 1), mat(Pd, cols, rows, 1, cols), mat(dOb, rows, Dv, Dv, 1),
               1.0, 1.0);
          gemm(mat(dK, cols, D, D, 1), mat(S, cols, rows, 1, cols), mat(Qb, rows, D, D, 1),
               a.scale, 1.0);
        }
      }
      HeadRows(grad_k, s->b, h, s->k0).store(j0, cols, dK);
      HeadRows(grad_v, s->b, h, s->k0).store(j0, cols, dV);
    }
  });

  // dQ: items over (sequence, query head, query block).
  parallel_for(0, qitems.total(), 1, [&](int64_t b, int64_t e) {
    float* K = block_scratch(static_cast<size_t>(kBc * D + kBc * Dv + kBr * D + kBr * Dv +
                                                  kBr * D + 2 * kBr * kBc + 2 * kBr));
    float* V = K + kBc * D;
    float* Qb = V + kBc * Dv;
    float* dOb = Qb + kBr * D;
    float* dQ = dOb + kBr * Dv;
    float* S = dQ + kBr * D;
    float* dP = S + kBr * kBc;
    float* m = dP + kBr * kBc;
    float* l = m + kBr;
    for (int64_t rev = b; rev < e; ++rev) {
      const int64_t it = qitems.total() - 1 - rev;  // heavy (late) query blocks first
      const Seq* s;
      int64_t n, i0;
      qitems.locate(it, &s, &n, &i0);
      const int64_t rows = std::min(kBr, s->sq - i0), h = n / dm.group;
      const Visibility vis(a, *s, n);
      const PseRows pse(a, *s, n);
      const uint64_t hk = drop.on ? drop.head_key(s->index, n) : 0;
      QueryBlock qb{rows, Qb, dOb, m, l, nullptr};
      load_query_block(a, dm, grad_out, softmax_max, softmax_sum, Di.data() + it * kBr, *s, n,
                       i0, &qb);
      std::fill(dQ, dQ + rows * D, 0.0f);
      const HeadRows kr(a.k, s->b, h, s->k0), vr(a.v, s->b, h, s->k0);
      for (int64_t j0 = 0; j0 < s->skv; j0 += kBc) {
        const int64_t cols = std::min(kBc, s->skv - j0);
        const int cls = vis.classify(i0, i0 + rows, j0, j0 + cols);
        if (cls == 0) continue;
        kr.load(j0, cols, K);
        vr.load(j0, cols, V);
        scores_backward(a, dm, drop, hk, vis, pse, cls, qb, i0, K, V, j0, cols, S, dP, nullptr);
        gemm(mat(dQ, rows, D, D, 1), mat(S, rows, cols, cols, 1), mat(K, cols, D, D, 1), a.scale,
             1.0);
      }
      HeadRows(grad_q, s->b, n, s->q0).store(i0, rows, dQ);
    }
  });
}

}  // namespace npu::kernels
