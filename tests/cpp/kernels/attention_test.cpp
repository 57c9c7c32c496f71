// Flash attention forward / backward against a naive reference that materialises
// softmax(scale * Q K^T) (in double) and its gradient: every dtype, odd sizes, S not a
// multiple of the tiles, GQA / MQA, masks, bands (both origins), varlen, dropout (keep_prob 0
// too), S > 2048, a position bias (pse, with its gradient), prefix columns, per-sequence bands.
// A case is one Case struct: add a line to a list below to add a test.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "kernel_test_util.h"

namespace ktest {
namespace {

namespace nk = npu::kernels;

struct Case {
  DType dtype = DType::Float32;
  int64_t B = 1, Nq = 2, Nkv = 2, Sq = 37, Skv = 53, D = 24, Dv = 24;
  bool bsnd = false;  // memory layout [B, S, N, D] instead of [B, N, S, D]
  nk::AttentionBand band;
  bool random_mask = false;
  double keep_prob = 1.0;
  std::vector<int64_t> cu_q, cu_kv;  // varlen: cumulative offsets starting at 0
  // pse [1 or B, Nq, 1 or Sq, Skv] when pse_rows > 0 (1: one row for every query; else Sq).
  int64_t pse_rows = 0;
  bool pse_one_batch = false;
  std::vector<int64_t> prefix;              // per sequence
  std::vector<nk::AttentionBand> seq_bands;  // per sequence
  double tol = 0;  // relative tolerance of out (gradients: 2x); 0: the dtype's default
};

// A logical [B, N, S, D] tensor stored as [B, N, S, D] or [B, S, N, D].
HostTensor make4(DType t, int64_t B, int64_t N, int64_t S, int64_t D, bool bsnd) {
  if (!bsnd) return HostTensor(t, {B, N, S, D});
  HostTensor h(t, {B, S, N, D});
  std::swap(h.sizes[1], h.sizes[2]);
  std::swap(h.strides[1], h.strides[2]);
  return h;
}

int64_t idx4(const HostTensor& t, int64_t b, int64_t n, int64_t s, int64_t d) {
  return ((b * t.sizes[1] + n) * t.sizes[2] + s) * t.sizes[3] + d;
}

struct Result {
  HostTensor out, smax, ssum, dq, dk, dv, dpse;
};

struct Seqs {
  std::vector<std::array<int64_t, 5>> list;  // index, q0, sq, k0, skv
};
Seqs seqs_of(const Case& c) {
  Seqs s;
  if (!c.cu_q.empty()) {
    for (size_t i = 0; i + 1 < c.cu_q.size(); ++i) {
      s.list.push_back({int64_t(i), c.cu_q[i], c.cu_q[i + 1] - c.cu_q[i], c.cu_kv[i],
                        c.cu_kv[i + 1] - c.cu_kv[i]});
    }
  } else {
    for (int64_t b = 0; b < c.B; ++b) s.list.push_back({b, 0, c.Sq, 0, c.Skv});
  }
  return s;
}

// The reference: per (sequence, head, query row), the full score row in double.
void reference(const Case& c, const HostTensor& q, const HostTensor& k, const HostTensor& v,
               const HostTensor* mask, const HostTensor* pse, const HostTensor& dout,
               double scale, Result* r) {
  const int64_t group = c.Nq / c.Nkv;
  const bool varlen = !c.cu_q.empty();
  for (auto [si, q0, sq, k0, skv] : seqs_of(c).list) {
    const int64_t b = varlen ? 0 : si;
    const nk::AttentionBand& band = c.seq_bands.empty() ? c.band : c.seq_bands[si];
    const int64_t origin = band.bottom_right ? skv - sq : 0;
    const int64_t prefix = c.prefix.empty() ? 0 : c.prefix[si];
    for (int64_t n = 0; n < c.Nq; ++n) {
      const int64_t h = n / group;
      for (int64_t i = 0; i < sq; ++i) {
        std::vector<double> s(skv), p(skv), z(skv, 1.0), dp(skv);
        double mx = -INFINITY;
        for (int64_t j = 0; j < skv; ++j) {
          const int64_t dlt = j - i;
          bool vis = (dlt >= origin - band.pre && dlt <= origin + band.next) || j < prefix;
          const int64_t mb = mask && mask->sizes[0] > 1 ? si : 0;
          if (mask && mask->get(idx4(*mask, mb, 0, i, j)) != 0) vis = false;
          double acc = 0;
          for (int64_t d = 0; d < c.D; ++d) {
            acc += q.get(idx4(q, b, n, q0 + i, d)) * k.get(idx4(k, b, h, k0 + j, d));
          }
          if (pse) {
            const int64_t pb = pse->sizes[0] == 1 ? 0 : si, pi = pse->sizes[2] == 1 ? 0 : i;
            acc += pse->get(idx4(*pse, pb, n, pi, j));
          }
          s[j] = vis ? acc * scale : -INFINITY;
          mx = std::max(mx, s[j]);
          if (c.keep_prob < 1.0) {
            const bool keep = nk::attention_dropout_keep(7, 11, si, n, i, j, c.keep_prob);
            z[j] = keep ? 1.0 / c.keep_prob : 0.0;
          }
        }
        double sum = 0;
        for (int64_t j = 0; j < skv; ++j) sum += (p[j] = mx == -INFINITY ? 0 : std::exp(s[j] - mx));
        for (int64_t j = 0; j < skv; ++j) p[j] = sum > 0 ? p[j] / sum : 0;
        const int64_t row = q0 + i;
        r->smax.set(idx4(r->smax, b, n, row, 0), mx);
        r->ssum.set(idx4(r->ssum, b, n, row, 0), sum);
        double Di = 0;
        for (int64_t e = 0; e < c.Dv; ++e) {
          double o = 0;
          for (int64_t j = 0; j < skv; ++j) o += p[j] * z[j] * v.get(idx4(v, b, h, k0 + j, e));
          r->out.set(idx4(r->out, b, n, row, e), o);
          Di += o * dout.get(idx4(dout, b, n, row, e));
        }
        for (int64_t j = 0; j < skv; ++j) {
          double g = 0;
          for (int64_t e = 0; e < c.Dv; ++e) {
            g += dout.get(idx4(dout, b, n, row, e)) * v.get(idx4(v, b, h, k0 + j, e));
          }
          dp[j] = g;
        }
        for (int64_t j = 0; j < skv; ++j) {
          const double ds = p[j] * (z[j] * dp[j] - Di);
          if (p[j] == 0) continue;
          if (pse) {
            const int64_t gi = idx4(r->dpse, si, n, r->dpse.sizes[2] == 1 ? 0 : i, j);
            r->dpse.set(gi, r->dpse.get(gi) + scale * ds);
          }
          for (int64_t d = 0; d < c.D; ++d) {
            const int64_t iq = idx4(r->dq, b, n, row, d), ik = idx4(r->dk, b, h, k0 + j, d);
            r->dq.set(iq, r->dq.get(iq) + scale * ds * k.get(idx4(k, b, h, k0 + j, d)));
            r->dk.set(ik, r->dk.get(ik) + scale * ds * q.get(idx4(q, b, n, row, d)));
          }
          for (int64_t e = 0; e < c.Dv; ++e) {
            const int64_t iv = idx4(r->dv, b, h, k0 + j, e);
            r->dv.set(iv, r->dv.get(iv) + p[j] * z[j] * dout.get(idx4(dout, b, n, row, e)));
          }
        }
      }
    }
  }
}

// Largest |a - e| relative to the largest |e| (flash attention reorders the sums). Where e is
// all zero (a gradient that vanishes), an error relative to it is undefined: the largest
// |a - e| itself is returned (the old floor of 1e-30 turned any rounding residue into 1e22).
double max_rel_err(const HostTensor& a, const HostTensor& e) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < e.numel(); ++i) {
    double x = a.get(i), y = e.get(i);
    if (std::isinf(y) && x == y) continue;
    num = std::max(num, std::fabs(x - y));
    den = std::max(den, std::fabs(y));
  }
  return den > 0 ? num / den : num;
}

void run_case(const Case& c) {
  const bool varlen = !c.cu_q.empty();
  const int64_t B = varlen ? 1 : c.B;
  const int64_t Sq = varlen ? c.cu_q.back() : c.Sq, Skv = varlen ? c.cu_kv.back() : c.Skv;
  HostTensor q = make4(c.dtype, B, c.Nq, Sq, c.D, c.bsnd);
  HostTensor k = make4(c.dtype, B, c.Nkv, Skv, c.D, c.bsnd);
  HostTensor v = make4(c.dtype, B, c.Nkv, Skv, c.Dv, c.bsnd);
  HostTensor out = make4(c.dtype, B, c.Nq, Sq, c.Dv, c.bsnd);
  HostTensor dout = make4(c.dtype, B, c.Nq, Sq, c.Dv, c.bsnd);
  HostTensor dq = make4(c.dtype, B, c.Nq, Sq, c.D, c.bsnd);
  HostTensor dk = make4(c.dtype, B, c.Nkv, Skv, c.D, c.bsnd);
  HostTensor dv = make4(c.dtype, B, c.Nkv, Skv, c.Dv, c.bsnd);
  HostTensor smax(DType::Float32, {B, c.Nq, Sq, 8}), ssum(DType::Float32, {B, c.Nq, Sq, 8});
  fill_uniform(q, -2, 2);
  fill_uniform(k, -2, 2);
  fill_uniform(v, -1, 1);
  fill_uniform(dout, -1, 1);
  HostTensor mask, mask_expanded;
  nk::TensorDesc mask_desc;
  if (c.random_mask) {
    mask = HostTensor(DType::Bool, {1, 1, c.Sq, c.Skv});
    for (int64_t i = 0; i < mask.numel(); ++i) mask.set_int(i, rng()() % 4 == 0);
    // Fully mask one row and check it comes out zero (torch_npu's convention).
    for (int64_t j = 0; j < c.Skv; ++j) mask.set_int(3 * c.Skv + j, 1);
    // Broadcast over batch and heads: stride-0 dims, as a [1, 1, Sq, Skv] mask arrives.
    mask_expanded = mask.expanded(0, B).expanded(1, c.Nq);
    mask_desc = mask_expanded.desc();
  }
  HostTensor pse, dpse;
  nk::TensorDesc pse_desc, dpse_desc;
  if (c.pse_rows > 0) {
    pse = HostTensor(c.dtype, {c.pse_one_batch ? 1 : B, c.Nq, c.pse_rows, Skv});
    fill_uniform(pse, -3, 3);
    pse_desc = pse.desc();
    dpse = HostTensor(DType::Float32, {B, c.Nq, c.pse_rows, Skv});  // zero-filled
    dpse_desc = dpse.desc();
  }
  nk::FlashAttentionArgs a;
  a.pse = c.pse_rows > 0 ? &pse_desc : nullptr;
  a.prefix = c.prefix.empty() ? nullptr : c.prefix.data();
  a.seq_bands = c.seq_bands.empty() ? nullptr : c.seq_bands.data();
  a.q = q.desc();
  a.k = k.desc();
  a.v = v.desc();
  a.mask = c.random_mask ? &mask_desc : nullptr;
  a.band = c.band;
  a.scale = 1.0 / std::sqrt(double(c.D));
  a.keep_prob = c.keep_prob;
  a.seed = 7;
  a.offset = 11;
  if (varlen) {
    a.cu_seqlens_q = c.cu_q.data();
    a.cu_seqlens_kv = c.cu_kv.data();
    a.num_seqs = static_cast<int64_t>(c.cu_q.size()) - 1;
  }
  nk::flash_attention_forward(a, out.desc(), smax.desc(), ssum.desc());
  nk::flash_attention_backward(a, out.desc(), dout.desc(), smax.desc(), ssum.desc(), dq.desc(),
                               dk.desc(), dv.desc(), c.pse_rows > 0 ? &dpse_desc : nullptr);

  Result r{HostTensor(DType::Float64, {B, c.Nq, Sq, c.Dv}),
           HostTensor(DType::Float64, {B, c.Nq, Sq, 1}),
           HostTensor(DType::Float64, {B, c.Nq, Sq, 1}),
           HostTensor(DType::Float64, {B, c.Nq, Sq, c.D}),
           HostTensor(DType::Float64, {B, c.Nkv, Skv, c.D}),
           HostTensor(DType::Float64, {B, c.Nkv, Skv, c.Dv}),
           HostTensor(DType::Float64, {B, c.Nq, std::max<int64_t>(c.pse_rows, 1), Skv})};
  reference(c, q, k, v, c.random_mask ? &mask : nullptr, c.pse_rows > 0 ? &pse : nullptr, dout,
            a.scale, &r);
  const double tol = c.tol > 0                  ? c.tol
                    : c.dtype == DType::Float32 ? 2e-5
                    : c.dtype == DType::Float16 ? 4e-3
                                                : 3e-2;
  const double grad_tol = c.tol > 0 ? 2 * c.tol : 4 * tol;
  EXPECT_LE(max_rel_err(out, r.out), tol) << "out";
  EXPECT_LE(max_rel_err(dq, r.dq), grad_tol) << "dq";
  EXPECT_LE(max_rel_err(dk, r.dk), grad_tol) << "dk";
  EXPECT_LE(max_rel_err(dv, r.dv), grad_tol) << "dv";
  if (c.pse_rows > 0) {
    EXPECT_LE(max_rel_err(dpse, r.dpse), grad_tol) << "dpse";
  }
  // Statistics: every one of the 8 copies.
  for (int64_t row = 0; row < B * c.Nq * Sq; ++row) {
    for (int64_t t = 0; t < 8; ++t) {
      const double em = r.smax.get(row), es = r.ssum.get(row);
      const double gm = smax.get(row * 8 + t), gs = ssum.get(row * 8 + t);
      if (std::isinf(em)) {
        ASSERT_EQ(gm, em) << "row " << row;
        ASSERT_EQ(gs, 0.0);
      } else {
        ASSERT_NEAR(gm, em, 1e-4 * (1 + std::fabs(em))) << "row " << row;
        ASSERT_NEAR(gs, es, 1e-4 * es) << "row " << row;
      }
    }
  }
  if (c.random_mask) {  // the fully masked row
    for (int64_t e = 0; e < c.Dv; ++e) ASSERT_EQ(out.get(idx4(out, 0, 0, 3, e)), 0.0);
  }
}

nk::AttentionBand causal(bool bottom_right) {
  nk::AttentionBand b;
  b.next = 0;
  b.bottom_right = bottom_right;
  return b;
}

TEST(FlashAttention, EveryDtypeOddSizes) {
  for (DType t : {DType::Float32, DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(dtype_str(t));
    Case c;
    c.dtype = t;
    run_case(c);
  }
}

TEST(FlashAttention, SequencesNotMultipleOfTheTilesAndOtherLayout) {
  Case c;
  c.B = 2;
  c.Sq = 200;
  c.Skv = 300;
  c.D = 40;
  c.Dv = 16;
  c.bsnd = true;
  run_case(c);
}

TEST(FlashAttention, GroupedAndMultiQueryHeads) {
  for (int64_t nkv : {2, 1}) {
    SCOPED_TRACE(nkv);
    Case c;
    c.Nq = 4;
    c.Nkv = nkv;
    c.Sq = 150;
    c.Skv = 140;
    run_case(c);
  }
}

// The decode path (at most 8 query rows): float32 keys and values read in place, contiguous rows
// (BNSD) or strided ones (BSND), and 16-bit ones converted into scratch; grouped heads, two key
// blocks, a mask, and the causal band of a cache.
TEST(FlashAttention, DecodeRowsReadKeysAndValuesInPlace) {
  for (DType t : {DType::Float32, DType::BFloat16}) {
    for (bool bsnd : {false, true}) {
      for (int64_t sq : {1, 3, 8}) {
        for (int mode = 0; mode < 3; ++mode) {  // no mask, a boolean mask, causal bottom-right
          SCOPED_TRACE(::testing::Message() << dtype_str(t) << " bsnd " << bsnd << " sq " << sq
                                            << " mode " << mode);
          Case c;
          c.dtype = t;
          c.B = 2;
          c.Nq = 4;
          c.Nkv = 2;
          c.Sq = sq;
          c.Skv = 300;  // two key blocks of 256
          c.D = 64;
          c.Dv = 32;
          c.bsnd = bsnd;
          c.random_mask = mode == 1 && sq > 3;  // (the check fully masks query row 3)
          if (mode == 2) c.band = causal(true);
          run_case(c);
        }
      }
    }
  }
}

// Decoding a grouped-query group per item (AVX-512, float32 keys and values in place) and one
// query head per item, against the reference: multi-query (8 heads on one), 3 heads on 3, 8 on
// 2; a value width of 80 (a 64-column block and a 16-column one); 1, 3 (rows padded to
// fours) and 8 query rows; no mask, a boolean mask, the causal band of a static cache.
TEST(FlashAttention, DecodeGroupedHeadsAndOneHeadPerItem) {
  nk::testing::set_short_attention_avx512(true);  // (read below as "this CPU has AVX-512")
  const std::pair<int64_t, int64_t> heads[] = {{8, 1}, {3, 3}, {8, 2}};
  for (bool grouped : {true, false}) {
    nk::testing::set_decode_attention_grouped(grouped);
    for (auto [nq, nkv] : heads) {
      for (int64_t sq : {1, 3, 8}) {
        for (int mode = 0; mode < 3; ++mode) {
          SCOPED_TRACE(::testing::Message() << "grouped " << grouped << " heads " << nq << "/"
                                            << nkv << " sq " << sq << " mode " << mode);
          Case c;
          c.B = 2;
          c.Nq = nq;
          c.Nkv = nkv;
          c.Sq = sq;
          c.Skv = 143;
          c.D = 128;
          c.Dv = 80;
          c.random_mask = mode == 1 && sq > 3;  // (the check fully masks query row 3)
          if (mode == 2) c.band = causal(true);
          const int64_t before = nk::testing::decode_attention_grouped_items();
          run_case(c);
          // The grouped path runs where it applies (AVX-512) and fills the pool: a test that
          // silently ran the per-head path twice could not fail.
          const bool fills = c.B * nkv >= nk::num_threads() || nq == nkv;
          EXPECT_EQ(nk::testing::decode_attention_grouped_items() > before,
                    grouped && fills && nk::testing::short_attention_avx512());
        }
      }
    }
  }
  nk::testing::set_decode_attention_grouped(true);
}

TEST(FlashAttention, CausalTopLeftAndBottomRight) {
  for (bool br : {false, true}) {
    for (auto [sq, skv] : {std::pair<int64_t, int64_t>{200, 200}, {130, 260}, {260, 130}}) {
      SCOPED_TRACE(::testing::Message() << "bottom_right " << br << " " << sq << "x" << skv);
      Case c;
      c.Sq = sq;
      c.Skv = skv;
      c.band = causal(br);
      run_case(c);
    }
  }
}

TEST(FlashAttention, BandWithPreAndNextTokens) {
  for (auto [pre, next] : {std::pair<int64_t, int64_t>{10, 5}, {100, -20}, {-30, 70}}) {
    SCOPED_TRACE(::testing::Message() << pre << " " << next);
    Case c;
    c.Sq = 190;
    c.Skv = 230;
    c.band.pre = pre;
    c.band.next = next;
    c.band.bottom_right = true;
    run_case(c);
  }
}

// Longer than several tiles both ways: whole blocks outside the band are skipped, blocks inside
// it need no per-element test, and the diagonal ones do.
TEST(FlashAttention, BandSpanningManyTiles) {
  for (bool br : {false, true}) {
    SCOPED_TRACE(br);
    Case c;
    c.Nq = 1;
    c.Nkv = 1;
    c.D = 16;
    c.Dv = 8;
    c.Sq = 700;
    c.Skv = 900;
    c.band.pre = 150;
    c.band.next = 40;
    c.band.bottom_right = br;
    run_case(c);
  }
}

TEST(FlashAttention, ExplicitBooleanMaskBroadcast) {
  Case c;
  c.B = 2;
  c.Sq = 70;
  c.Skv = 140;
  c.random_mask = true;
  run_case(c);
}

TEST(FlashAttention, VarlenPackedSequences) {
  Case c;
  c.Nq = 4;
  c.Nkv = 2;
  c.cu_q = {0, 5, 75, 76, 206, 506};
  c.cu_kv = {0, 9, 79, 80, 210, 610};
  c.band = causal(true);
  run_case(c);
  c.band = nk::AttentionBand();
  run_case(c);
}

TEST(FlashAttention, DropoutReplaysFromSeedAndOffset) {
  Case c;
  c.Sq = 100;
  c.Skv = 150;
  c.keep_prob = 0.8;
  run_case(c);
  // The keep fraction is close to keep_prob and the decision depends on seed and offset.
  int kept = 0, same = 0;
  for (int i = 0; i < 100; ++i) {
    for (int j = 0; j < 100; ++j) {
      bool a = nk::attention_dropout_keep(1, 2, 0, 0, i, j, 0.8);
      kept += a;
      same += a == nk::attention_dropout_keep(1, 3, 0, 0, i, j, 0.8);
    }
  }
  EXPECT_NEAR(kept / 10000.0, 0.8, 0.02);
  EXPECT_LT(same, 9000);
}

TEST(FlashAttention, LongCausalBeyond2048) {
  Case c;
  c.Nq = 1;
  c.Nkv = 1;
  c.Sq = 2100;
  c.Skv = 2100;
  c.D = 16;
  c.Dv = 16;
  c.band = causal(true);
  run_case(c);
}

// Head dims that are multiples of 32 take the AVX-512 tile path (its own key-major tiles,
// bfloat16 pairs on AVX512-BF16): every dtype, ragged tails both ways, both causal origins, a
// band, a broadcast boolean mask (with its fully masked row), GQA / MQA, varlen, the BSND
// layout and a head dim of 64 / value dim of 32.
TEST(FlashAttention, HeadDimsOfTheTilePath) {
  for (DType t : {DType::Float32, DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(dtype_str(t));
    Case base;
    base.dtype = t;
    base.D = base.Dv = 32;
    base.Sq = 150;
    base.Skv = 170;
    for (bool br : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "causal, bottom_right " << br);
      Case c = base;
      c.band = causal(br);
      run_case(c);
    }
    {
      // The forward takes 4 query blocks per pass over the key tiles and the backward 4 key
      // tiles per pass over the query blocks: 6 query blocks and 5 key tiles make a full pass
      // and a partial one.
      SCOPED_TRACE("two passes, causal both origins");
      Case c = base;
      c.Sq = 330;
      c.Skv = 300;
      for (bool br : {false, true}) {
        c.band = causal(br);
        run_case(c);
      }
    }
    {
      SCOPED_TRACE("band, BSND, D 64 / Dv 32");
      Case c = base;
      c.D = 64;
      c.bsnd = true;
      c.band.pre = 40;
      c.band.next = 7;
      c.band.bottom_right = true;
      run_case(c);
    }
    {
      SCOPED_TRACE("mask");
      Case c = base;
      c.B = 2;
      c.Sq = 70;
      c.Skv = 140;
      c.random_mask = true;
      run_case(c);
    }
    for (int64_t nkv : {2, 1}) {
      SCOPED_TRACE(::testing::Message() << "GQA, kv heads " << nkv);
      Case c = base;
      c.Nq = 4;
      c.Nkv = nkv;
      c.band = causal(false);
      run_case(c);
    }
    {
      SCOPED_TRACE("varlen");
      Case c = base;
      c.Nq = 4;
      c.Nkv = 2;
      c.cu_q = {0, 5, 75, 76, 206};
      c.cu_kv = {0, 9, 79, 80, 210};
      c.band = causal(true);
      run_case(c);
    }
  }
}

// bfloat16 on the tile path with its products on AMX (TDPBF16PS) and without (the float32 FMA
// tile products, as on a CPU without AMX): head dims 64 and 128, odd lengths that are not
// multiples of the 64 x 64 tiles (Sq != Skv too), causal (both origins) and not, GQA / MQA, a
// mask and varlen.
// Tolerances: the inputs are bfloat16 and the float64 reference reads the same values, so the
// error is what the kernel rounds: its bfloat16 outputs (2^-9 relative each) and, on AMX, P and
// dS rounded to bfloat16 for the products (2^-9 relative per element: O = sum_j P_ij V_j / l
// moves by at most 2^-9 max|V|, a gradient sum by 2^-9 of the sum of its terms' magnitudes,
// a few times its largest value here). 2^-7 on out and 2^-6 on the gradients leave room for
// that and nothing more: the float32-product default of 3e-2 / 1.2e-1 would hide a wrong tile.
class FlashAttentionBf16Products : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    nk::testing::set_attention_amx(GetParam());
    if (GetParam() && std::string(nk::testing::attention_bf16_products()) != "amx_bf16") {
      GTEST_SKIP() << "this CPU (or Linux) gives no AMX tile state";
    }
    if (!GetParam()) {
      ASSERT_STREQ(nk::testing::attention_bf16_products(), "fma_f32");
    }
  }
  void TearDown() override { nk::testing::set_attention_amx(true); }
};

TEST_P(FlashAttentionBf16Products, AgainstFloat64Reference) {
  for (int64_t d : {64, 128}) {
    Case base;
    base.dtype = DType::BFloat16;
    base.D = base.Dv = d;
    base.tol = 1.0 / 128;
    for (auto [sq, skv] : {std::pair<int64_t, int64_t>{131, 131}, {70, 201}, {193, 64}}) {
      for (int kind = 0; kind < 3; ++kind) {  // full, causal top-left, causal bottom-right
        SCOPED_TRACE(::testing::Message() << "D " << d << " Sq " << sq << " Skv " << skv
                                          << " kind " << kind);
        Case c = base;
        c.Sq = sq;
        c.Skv = skv;
        if (kind > 0) c.band = causal(kind == 2);
        run_case(c);
      }
    }
    {
      SCOPED_TRACE(::testing::Message() << "D " << d << " GQA 4 / 2, causal, BSND");
      Case c = base;
      c.Nq = 4;
      c.Nkv = 2;
      c.Sq = c.Skv = 150;
      c.bsnd = true;
      c.band = causal(false);
      run_case(c);
    }
    {
      SCOPED_TRACE(::testing::Message() << "D " << d << " MQA 4 / 1, batch 2, Dv 64");
      Case c = base;
      c.B = 2;
      c.Nq = 4;
      c.Nkv = 1;
      c.Sq = c.Skv = 97;
      c.Dv = 64;
      c.band = causal(true);
      run_case(c);
    }
    {
      SCOPED_TRACE(::testing::Message() << "D " << d << " mask, varlen");
      Case c = base;
      c.Sq = 70;
      c.Skv = 140;
      c.random_mask = true;
      run_case(c);
      Case v = base;
      v.Nq = 4;
      v.Nkv = 2;
      v.cu_q = {0, 5, 75, 76, 206};
      v.cu_kv = {0, 9, 79, 80, 210};
      v.band = causal(true);
      run_case(v);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Amx, FlashAttentionBf16Products, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "amx" : "fma_f32"; });

// The short path (at most 64 queries and keys a head, head dims <= 64) with each row of scores
// in AVX-512 registers and with its portable loops (as on a CPU without AVX-512): every count
// of 16-key chunks (1..4, a partial last one), head dims filling 1..4 chunks (D != Dv), every
// dtype, causal at both origins, a band, a prefix, an explicit mask with a fully masked row,
// GQA / MQA, the BSND layout, and varlen with an empty and a one-token sequence.
class FlashAttentionShortHeads : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    nk::testing::set_short_attention_avx512(GetParam());
    if (GetParam() && !nk::testing::short_attention_avx512()) {
      GTEST_SKIP() << "this CPU has no AVX-512";
    }
    if (!GetParam()) {
      ASSERT_FALSE(nk::testing::short_attention_avx512());
    }
  }
  void TearDown() override { nk::testing::set_short_attention_avx512(true); }
};

TEST_P(FlashAttentionShortHeads, AgainstFloat64Reference) {
  for (auto [sq, skv] : {std::pair<int64_t, int64_t>{16, 16}, {3, 5}, {7, 17}, {33, 40},
                         {64, 64}, {20, 49}}) {
    for (auto [d, dv] : {std::pair<int64_t, int64_t>{8, 8}, {24, 40}, {64, 17}, {5, 64}}) {
      for (int kind = 0; kind < 3; ++kind) {  // full, causal top-left, causal bottom-right
        SCOPED_TRACE(::testing::Message() << "Sq " << sq << " Skv " << skv << " D " << d
                                          << " Dv " << dv << " kind " << kind);
        Case c;
        c.B = 2;
        c.Sq = sq;
        c.Skv = skv;
        c.D = d;
        c.Dv = dv;
        if (kind > 0) c.band = causal(kind == 2);
        run_case(c);
      }
    }
  }
  for (DType t : {DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(::testing::Message() << dtype_str(t) << ", GQA 4 / 2, causal, BSND");
    Case c;
    c.dtype = t;
    c.Nq = 4;
    c.Nkv = 2;
    c.Sq = c.Skv = 16;
    c.D = c.Dv = 8;
    c.bsnd = true;
    c.band = causal(false);
    run_case(c);
  }
  {
    SCOPED_TRACE("MQA 4 / 1, band pre 5 next 2, prefix");
    Case c;
    c.B = 2;
    c.Nq = 4;
    c.Nkv = 1;
    c.Sq = 30;
    c.Skv = 50;
    c.D = c.Dv = 16;
    c.band.pre = 5;
    c.band.next = 2;
    c.prefix = {0, 9};
    run_case(c);
  }
  {
    SCOPED_TRACE("explicit mask");
    Case c;
    c.Sq = 12;
    c.Skv = 35;
    c.D = c.Dv = 8;
    c.random_mask = true;
    run_case(c);
  }
  {
    SCOPED_TRACE("varlen: an empty and a one-token sequence");
    Case c;
    c.Nq = 4;
    c.Nkv = 2;
    c.D = c.Dv = 8;
    c.cu_q = {0, 16, 16, 17, 57};
    c.cu_kv = {0, 16, 20, 21, 85};
    c.band = causal(true);
    run_case(c);
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, FlashAttentionShortHeads, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "avx512" : "portable"; });

// torch_npu's pse: scores = scale * (Q K^T + pse), every documented shape ([B, N, S, S],
// [1, N, S, S], [B, N, 1, Skv]); its gradient scale * dS (summed over rows for the one-row form),
// under GQA, a causal band and a multi-tile sequence (both backward strategies: B * Nkv small
// and large).
TEST(FlashAttention, PositionBiasAndItsGradient) {
  for (DType t : {DType::Float32, DType::BFloat16}) {
    for (auto [rows_full, one_batch] : {std::pair<bool, bool>{true, false}, {true, true},
                                        {false, false}}) {
      SCOPED_TRACE(::testing::Message() << dtype_str(t) << " full " << rows_full << " one batch "
                                        << one_batch);
      Case c;
      c.dtype = t;
      c.B = 2;
      c.Nq = 4;
      c.Nkv = 2;
      c.Sq = 150;
      c.Skv = 290;
      c.band = causal(true);
      c.pse_rows = rows_full ? c.Sq : 1;
      c.pse_one_batch = one_batch;
      run_case(c);
    }
  }
  Case many;  // B * Nkv = 16 items: the one-pass backward
  many.B = 8;
  many.Sq = 40;
  many.Skv = 60;
  many.pse_rows = 40;
  run_case(many);
  many.pse_rows = 1;
  run_case(many);
}

// sparse_mode 5 / 6: keys j < prefix[b] are visible besides the bottom-right causal band
// (a prefix past Skv - Sq widens it; one within it changes nothing).
TEST(FlashAttention, PrefixColumnsBesideTheCausalBand) {
  Case c;
  c.B = 3;
  c.Sq = 300;
  c.Skv = 300;
  c.band = causal(true);
  c.prefix = {0, 37, 290};
  run_case(c);
  c.Sq = 100;
  c.Skv = 280;  // Skv - Sq = 180: prefix 37 is inside the band, 290 covers everything
  run_case(c);
}

// sparse_mode 7 / 8 (varlen, a sequence cut at one end): every sequence causal except the
// cut one, which has its own band.
TEST(FlashAttention, PerSequenceBands) {
  Case c;
  c.Nq = 2;
  c.Nkv = 1;
  c.cu_q = {0, 30, 300, 302};
  c.cu_kv = {0, 30, 330, 600};
  nk::AttentionBand cut;
  cut.pre = 270;
  cut.next = -100;
  cut.bottom_right = true;
  c.seq_bands = {causal(true), causal(true), cut};  // mode 7: the last sequence is cut
  run_case(c);
  c.seq_bands = {cut, causal(false), causal(false)};  // mode 8: the first one
  c.seq_bands[0].pre = 40;
  c.seq_bands[0].next = 3;
  run_case(c);
}

// keep_prob 0 drops every score: the output and every gradient are exactly 0, the softmax
// statistics are those of the scores.
TEST(FlashAttention, KeepProbZeroDropsEverything) {
  Case c;
  c.Sq = 90;
  c.Skv = 300;
  c.keep_prob = 0.0;
  run_case(c);
}

// npu_fused_infer_attention_score's antiquant: an int8 key / value dequantised block by block,
// (x + offset) * scale with per-channel scale / offset ([1, Nkv, 1, D] broadcast) and a
// per-token one ([B, 1, Skv, 1]), equals attention on the dequantised float64 key / value.
TEST(FlashAttention, Int8KeyValueDequantisedInTheKernel) {
  for (bool per_token : {false, true}) {
    SCOPED_TRACE(per_token);
    Case c;
    c.B = 3;
    c.Nq = 4;
    c.Nkv = 2;
    c.Sq = 5;
    c.Skv = 300;
    c.D = c.Dv = 16;
    HostTensor q = make4(DType::Float16, c.B, c.Nq, c.Sq, c.D, false);
    HostTensor k8(DType::Int8, {c.B, c.Nkv, c.Skv, c.D}), v8(DType::Int8, {c.B, c.Nkv, c.Skv, c.D});
    fill_uniform(q, -2, 2);
    for (int64_t i = 0; i < k8.numel(); ++i) {
      k8.set_int(i, int64_t(rng()() % 256) - 128);
      v8.set_int(i, int64_t(rng()() % 256) - 128);
    }
    // scale / offset [2 (key, value), ...]: per-channel [1, Nkv, 1, D], per-token [B, 1, Skv, 1].
    const std::vector<int64_t> ps = per_token ? std::vector<int64_t>{c.B, 1, c.Skv, 1}
                                              : std::vector<int64_t>{1, c.Nkv, 1, c.D};
    HostTensor sc[2] = {HostTensor(DType::Float32, ps), HostTensor(DType::Float32, ps)};
    HostTensor of[2] = {HostTensor(DType::Float16, ps), HostTensor(DType::Float16, ps)};
    for (int t = 0; t < 2; ++t) {
      fill_uniform(sc[t], 0.005, 0.02);
      fill_uniform(of[t], -3, 3);
    }
    auto param = [&](const HostTensor& p, int64_t b, int64_t h, int64_t s, int64_t d) {
      return per_token ? p.get(idx4(p, b, 0, s, 0)) : p.get(idx4(p, 0, h, 0, d));
    };
    HostTensor kf(DType::Float64, k8.sizes), vf(DType::Float64, v8.sizes);
    for (int64_t b = 0; b < c.B; ++b) {
      for (int64_t h = 0; h < c.Nkv; ++h) {
        for (int64_t s = 0; s < c.Skv; ++s) {
          for (int64_t d = 0; d < c.D; ++d) {
            const int64_t i = idx4(k8, b, h, s, d);
            kf.set(i, (k8.get(i) + param(of[0], b, h, s, d)) * param(sc[0], b, h, s, d));
            vf.set(i, (v8.get(i) + param(of[1], b, h, s, d)) * param(sc[1], b, h, s, d));
          }
        }
      }
    }
    // Broadcast to [B, Nkv, Skv, D] with stride-0 dims (views that own a copy of the values:
    // kept alive in `views` while the kernel runs).
    std::vector<HostTensor> views;
    for (int t = 0; t < 2; ++t) {
      for (const HostTensor* p : {&sc[t], &of[t]}) {
        views.push_back(p->expanded(per_token ? 1 : 0, per_token ? c.Nkv : c.B)
                            .expanded(per_token ? 3 : 2, per_token ? c.D : c.Skv));
      }
    }
    std::vector<nk::TensorDesc> descs;
    for (const HostTensor& v : views) descs.push_back(v.desc());
    nk::FlashAttentionArgs a;
    a.q = q.desc();
    a.k = k8.desc();
    a.v = v8.desc();
    a.scale = 0.25;
    a.antiquant = {&descs[0], &descs[1], &descs[2], &descs[3]};
    HostTensor out = make4(DType::Float16, c.B, c.Nq, c.Sq, c.D, false);
    HostTensor smax(DType::Float32, {c.B, c.Nq, c.Sq, 8}), ssum(DType::Float32, {c.B, c.Nq, c.Sq, 8});
    nk::flash_attention_forward(a, out.desc(), smax.desc(), ssum.desc());
    HostTensor dout(DType::Float64, {c.B, c.Nq, c.Sq, c.D});
    Result r{HostTensor(DType::Float64, {c.B, c.Nq, c.Sq, c.Dv}),
             HostTensor(DType::Float64, {c.B, c.Nq, c.Sq, 1}),
             HostTensor(DType::Float64, {c.B, c.Nq, c.Sq, 1}),
             HostTensor(DType::Float64, {c.B, c.Nq, c.Sq, c.D}),
             HostTensor(DType::Float64, {c.B, c.Nkv, c.Skv, c.D}),
             HostTensor(DType::Float64, {c.B, c.Nkv, c.Skv, c.Dv}),
             HostTensor(DType::Float64, {c.B, c.Nq, 1, c.Skv})};
    reference(c, q, kf, vf, nullptr, nullptr, dout, a.scale, &r);
    EXPECT_LE(max_rel_err(out, r.out), 4e-3);
  }
}

}  // namespace
}  // namespace ktest
