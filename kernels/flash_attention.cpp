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
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

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
  void load(int64_t r0, int64_t rows, float* dst) const {
    ConvertFn fn = convert_fn(dtype, DType::Float32);
    for (int64_t r = 0; r < rows; ++r) {
      fn(base + (r0 + r) * row_stride * esize, col_stride, dst + r * cols, 1, cols);
    }
  }
  // Rows [r0, r0 + rows) as a [rows, cols] matrix (transposed: [cols, rows]) in place, for a
  // GEMM operand: the GEMM packs (and converts) it itself, so no copy is needed.
  TensorDesc matrix(int64_t r0, int64_t rows, bool transposed) const {
    const void* p = base + r0 * row_stride * esize;
    return transposed ? TensorDesc::make(p, dtype, {cols, rows}, {col_stride, row_stride})
                      : TensorDesc::make(p, dtype, {rows, cols}, {row_stride, col_stride});
  }
  void store(int64_t r0, int64_t rows, const float* src) const {
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
  const Dropout drop(a);
  const Items items(sequences(a), dm.nq, kBr, false);
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
