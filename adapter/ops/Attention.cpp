// npu_fusion_attention (+ _grad), npu_fused_infer_attention_score and the fused SDPA backend
// (F.scaled_dot_product_attention on npu) on the library's flash attention kernel.
//
// Every layout is a view: BSH / SBH / BSND / BNSD / TND are permuted to [B, N, S, D] without a
// copy, and the kernel takes the strides. torch_npu's sparse_mode becomes a band:
// Without atten_mask nothing is masked, whatever the mode (torch_npu's rule); with it:
//   0: atten_mask and pre/next tokens from the top-left;
//   1: atten_mask only;  2: causal from the top-left;  3: causal from the bottom-right;
//   4: band of pre/next tokens around the bottom-right diagonal;
//   5 / 6: prefix: causal from the bottom-right, plus the first prefix[b] keys for every query
//     (5 with an optional full atten_mask applied on top, 6 with the compressed 3072 x 2048 one);
//   7 / 8 (TND only, a long sequence cut across cards): every sequence causal from the
//     bottom-right (7) / top-left (8), except the last (7) / first (8), which gets the band of
//     pre/next tokens around its bottom-right diagonal.
// Modes 2-4, 7, 8 take torch_npu's compressed 2048 x 2048 mask, which only says "causal" and is
// not read: any S works.
// pse is torch_npu's additive position bias: scores = scale * (Q K^T + pse).
#include <ATen/Context.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/log.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <array>
#include <cmath>
#include <string>

#include "DeviceCheck.h"
#include "KernelBridge.h"
#include "NPUGenerator.h"
#include "NPUStream.h"

namespace torch_npu::native {
namespace {

constexpr int64_t kStatCopies = 8;  // torch_npu keeps softmax_max / softmax_sum 8 times per row

bool isLayout(const std::string& l) {
  return l == "BSH" || l == "SBH" || l == "BSND" || l == "BNSD" || l == "TND";
}

// [B, N, S, D] view of a tensor in `layout`; `heads` splits H for BSH / SBH.
at::Tensor toBNSD(const at::Tensor& t, const std::string& layout, int64_t heads,
                  const char* name) {
  const int64_t want = layout == "BSH" || layout == "SBH" || layout == "TND" ? 3 : 4;
  TORCH_CHECK(t.dim() == want, name, " must be ", want, "-D for input_layout '", layout,
              "', got shape ", t.sizes());
  if (layout == "BNSD") return t;
  if (layout == "BSND") return t.permute({0, 2, 1, 3});
  if (layout == "TND") return t.unsqueeze(0).permute({0, 2, 1, 3});
  TORCH_CHECK(heads > 0 && t.size(2) % heads == 0, name, ": the hidden size ", t.size(2),
              " is not a multiple of the head count ", heads);
  const int64_t d = t.size(2) / heads;
  // reshape: a view for the usual dense H; a non-contiguous input is copied (kept alive by the
  // caller's Problem until the kernel is queued; the stream orders its reuse after the kernel).
  if (layout == "BSH") return t.reshape({t.size(0), t.size(1), heads, d}).permute({0, 2, 1, 3});
  return t.reshape({t.size(0), t.size(1), heads, d}).permute({1, 2, 0, 3});  // SBH
}

// An output in `layout` for [B, N, S, D] and its [B, N, S, D] view.
at::Tensor emptyInLayout(const std::string& layout, int64_t B, int64_t N, int64_t S, int64_t D,
                         const at::TensorOptions& o) {
  if (layout == "BSH") return at::empty({B, S, N * D}, o);
  if (layout == "SBH") return at::empty({S, B, N * D}, o);
  if (layout == "BSND") return at::empty({B, S, N, D}, o);
  if (layout == "TND") return at::empty({S, N, D}, o);
  return at::empty({B, N, S, D}, o);
}

// Cumulative lengths as torch_npu takes them (ending offsets, e.g. [2, 4, 6]) -> [0, 2, 4, 6].
std::vector<int64_t> cumulative(at::OptionalIntArrayRef lens, int64_t total, const char* name) {
  TORCH_CHECK(lens.has_value() && !lens->empty(), "input_layout 'TND' needs ", name,
              " (the cumulative sequence lengths, e.g. [2, 4, 6] for three sequences of 2)");
  std::vector<int64_t> cu{0};
  for (int64_t v : *lens) {
    TORCH_CHECK(v >= cu.back(), name, " must be non-decreasing cumulative lengths, got ", *lens);
    cu.push_back(v);
  }
  TORCH_CHECK(cu.back() <= total, name, " ends at ", cu.back(), " but the tensor has only ",
              total, " tokens");
  return cu;
}

// Everything the kernel needs, with the tensors kept alive until the task has run.
struct Problem {
  at::Tensor q, k, v;  // [B, N, S, D] views
  std::optional<at::Tensor> mask, pse;
  nk::AttentionBand band;
  std::vector<nk::AttentionBand> seq_bands;  // per sequence (sparse_mode 7 / 8)
  std::vector<int64_t> prefix;               // per sequence (sparse_mode 5 / 6)
  // int8 key / value: k_scale, k_offset, v_scale, v_offset as [B, Nkv, Skv, D] views.
  std::array<std::optional<at::Tensor>, 4> antiquant;
  std::vector<int64_t> cu_q, cu_kv;
  double scale = 1.0, keep_prob = 1.0;
  uint64_t seed = 0, offset = 0;
  std::string layout;
  int64_t B = 0, Nq = 0, Nkv = 0, Sq = 0, Skv = 0, D = 0, Dv = 0;

  // Descriptors captured by value into a task, with the varlen arrays owned by it.
  struct Launch {
    nk::FlashAttentionArgs args;
    std::optional<nk::TensorDesc> mask, pse;
    std::array<std::optional<nk::TensorDesc>, 4> antiquant;
    std::vector<int64_t> cu_q, cu_kv, prefix;
    std::vector<nk::AttentionBand> seq_bands;
    nk::FlashAttentionArgs get() const {
      nk::FlashAttentionArgs a = args;
      a.mask = mask ? &*mask : nullptr;
      a.pse = pse ? &*pse : nullptr;
      a.prefix = prefix.empty() ? nullptr : prefix.data();
      a.seq_bands = seq_bands.empty() ? nullptr : seq_bands.data();
      auto ptr = [](const std::optional<nk::TensorDesc>& d) { return d ? &*d : nullptr; };
      a.antiquant = {ptr(antiquant[0]), ptr(antiquant[1]), ptr(antiquant[2]), ptr(antiquant[3])};
      if (!cu_q.empty()) {
        a.cu_seqlens_q = cu_q.data();
        a.cu_seqlens_kv = cu_kv.data();
        a.num_seqs = static_cast<int64_t>(cu_q.size()) - 1;
      }
      return a;
    }
  };
  Launch launch() const {
    Launch l;
    l.args.q = describe(q);
    l.args.k = describe(k);
    l.args.v = describe(v);
    l.args.band = band;
    l.args.scale = scale;
    l.args.keep_prob = keep_prob;
    l.args.seed = seed;
    l.args.offset = offset;
    if (mask) l.mask = describe(*mask);
    if (pse) l.pse = describe(*pse);
    for (size_t i = 0; i < antiquant.size(); ++i) {
      if (antiquant[i]) l.antiquant[i] = describe(*antiquant[i]);
    }
    l.prefix = prefix;
    l.seq_bands = seq_bands;
    l.cu_q = cu_q;
    l.cu_kv = cu_kv;
    return l;
  }
  // The number of attention scores (torch_npu's numels: the dropout mask's element count).
  int64_t numels() const {
    if (cu_q.empty()) return B * Nq * Sq * Skv;
    int64_t n = 0;
    for (size_t i = 0; i + 1 < cu_q.size(); ++i) {
      n += (cu_q[i + 1] - cu_q[i]) * (cu_kv[i + 1] - cu_kv[i]);
    }
    return n * Nq;
  }
};

void checkFloat(const at::Tensor& t, const char* name, const at::Tensor& q) {
  TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, name,
              " must be an npu tensor, got one on ", t.device());
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kHalf ||
                  t.scalar_type() == at::kBFloat16,
              name, " must be float32, float16 or bfloat16, got ", t.scalar_type());
  TORCH_CHECK(t.scalar_type() == q.scalar_type(), name, " has dtype ", t.scalar_type(),
              " but query has ", q.scalar_type(), ": pass them in one dtype");
}

// The shared argument handling of npu_fusion_attention and its grad.
Problem fusionProblem(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                      int64_t head_num, c10::string_view input_layout,
                      const std::optional<at::Tensor>& pse,
                      const std::optional<at::Tensor>& padding_mask,
                      const std::optional<at::Tensor>& atten_mask, double scale,
                      double keep_prob, int64_t pre_tockens, int64_t next_tockens,
                      at::OptionalIntArrayRef prefix, at::OptionalIntArrayRef actual_seq_qlen,
                      at::OptionalIntArrayRef actual_seq_kvlen, int64_t sparse_mode) {
  Problem p;
  p.layout = std::string(input_layout);
  TORCH_CHECK(isLayout(p.layout), "input_layout must be one of BSH, SBH, BSND, BNSD, TND, got '",
              p.layout, "'");
  checkFloat(query, "query", query);
  checkFloat(key, "key", query);
  checkFloat(value, "value", query);
  TORCH_CHECK(head_num > 0, "head_num must be positive, got ", head_num);
  TORCH_CHECK(!padding_mask.has_value() || !padding_mask->defined(),
              "npu_fusion_attention: padding_mask is not supported (as in torch_npu); use "
              "atten_mask or actual_seq_qlen / actual_seq_kvlen with input_layout 'TND'");
  // keep_prob 0 drops everything (output and gradients 0), as torch_npu's [0, 1] allows.
  TORCH_CHECK(keep_prob >= 0.0 && keep_prob <= 1.0,
              "The keep_prob value must be in range of [0, 1], but got ", keep_prob);
  // torch_npu's ranges: 5 (prefix, full mask) has no varlen form, 7 / 8 exist only in varlen.
  if (p.layout == "TND") {
    TORCH_CHECK(sparse_mode >= 0 && sparse_mode <= 8 && sparse_mode != 5,
                "The sparse_mode value must be in range of [0,5) or (5,8] for input_layout "
                "'TND', but got ", sparse_mode);
  } else {
    TORCH_CHECK(sparse_mode >= 0 && sparse_mode <= 6, "The sparse_mode value must be in range "
                "of [0,6], but got ", sparse_mode, " (7 and 8 are for input_layout 'TND')");
  }
  // BSH / SBH: the kv head count follows from the kv hidden size and D = H / head_num.
  int64_t kv_heads = head_num;
  if (p.layout == "BSH" || p.layout == "SBH") {
    TORCH_CHECK(query.dim() == 3 && query.size(2) % head_num == 0, "query hidden size ",
                query.dim() == 3 ? query.size(2) : -1, " is not a multiple of head_num ",
                head_num);
    const int64_t d = query.size(2) / head_num;
    TORCH_CHECK(key.dim() == 3 && key.size(2) % d == 0, "key hidden size must be a multiple of ",
                "the head dim ", d);
    kv_heads = key.size(2) / d;
  }
  p.q = toBNSD(query, p.layout, head_num, "query");
  p.k = toBNSD(key, p.layout, kv_heads, "key");
  p.v = toBNSD(value, p.layout, kv_heads, "value");
  p.B = p.q.size(0), p.Nq = p.q.size(1), p.Sq = p.q.size(2), p.D = p.q.size(3);
  p.Nkv = p.k.size(1), p.Skv = p.k.size(2), p.Dv = p.v.size(3);
  TORCH_CHECK(p.Nq == head_num, "query has ", p.Nq, " heads but head_num is ", head_num);
  TORCH_CHECK(p.k.size(0) == p.B && p.v.size(0) == p.B, "query, key and value must have the "
              "same batch size");
  TORCH_CHECK(p.Nkv > 0 && p.Nq % p.Nkv == 0, "the query head count ", p.Nq,
              " must be a multiple of the key/value head count ", p.Nkv, " (GQA / MQA)");
  TORCH_CHECK(p.v.size(1) == p.Nkv && p.v.size(2) == p.Skv, "key and value must have the same "
              "heads and sequence length");
  TORCH_CHECK(p.k.size(3) == p.D, "query and key must have the same head dim, got ", p.D,
              " and ", p.k.size(3));
  if (p.layout == "TND") {
    p.cu_q = cumulative(actual_seq_qlen, p.Sq, "actual_seq_qlen");
    p.cu_kv = cumulative(actual_seq_kvlen, p.Skv, "actual_seq_kvlen");
    TORCH_CHECK(p.cu_q.size() == p.cu_kv.size(), "actual_seq_qlen and actual_seq_kvlen must "
                "list the same number of sequences");
  }
  p.scale = scale;
  p.keep_prob = keep_prob;
  if (pse.has_value() && pse->defined()) {
    const at::Tensor& t = *pse;
    TORCH_CHECK_NOT_IMPLEMENTED(p.layout != "TND", "npu_fusion_attention: pse with input_layout "
                                "'TND' is not supported by SimNPU (torch_npu takes only the "
                                "alibi-compressed bias there); pass a 4-D layout");
    checkFloat(t, "pse", query);
    TORCH_CHECK(t.dim() == 4, "pse must be 4-D: [B, N, Sq, Skv], [1, N, Sq, Skv] or "
                "[B|1, N, 1, Skv], got shape ", t.sizes());
    TORCH_CHECK_NOT_IMPLEMENTED(!(p.Sq > 1024 && t.size(2) == 1024),
                                "npu_fusion_attention: the alibi-compressed pse (the last 1024 "
                                "rows, for Sq > 1024) is not supported by SimNPU; pass the whole "
                                "[B|1, N, Sq, Skv] bias");
    TORCH_CHECK((t.size(0) == 1 || t.size(0) == p.B) && t.size(1) == p.Nq &&
                    (t.size(2) == 1 || t.size(2) == p.Sq) && t.size(3) == p.Skv,
                "pse of shape ", t.sizes(), " does not fit [B, N, Sq, Skv] = [", p.B, ", ", p.Nq,
                ", ", p.Sq, ", ", p.Skv, "] (B and Sq may be 1)");
    p.pse = t;
  }
  const int64_t num_seqs = p.layout == "TND" ? static_cast<int64_t>(p.cu_q.size()) - 1 : p.B;
  auto seq_len = [&](int64_t s, bool kv) {
    if (p.layout != "TND") return kv ? p.Skv : p.Sq;
    const std::vector<int64_t>& cu = kv ? p.cu_kv : p.cu_q;
    return cu[s + 1] - cu[s];
  };
  const bool has_mask = atten_mask.has_value() && atten_mask->defined();
  // torch_npu: "when atten_mask is None, sparse_mode, pre_tockens and next_tockens take no
  // effect: everything is computed" -- so every mode's structure needs the mask passed.
  switch (has_mask ? sparse_mode : -1) {
    case -1:
      break;
    case 0:
    case 1:
    case 5: {
      const at::Tensor& m = *atten_mask;
      TORCH_CHECK(sparse_mode != 5 || m.dim() == 4, "sparse_mode 5 takes atten_mask as "
                  "[B, N, Sq, Skv] or [B, 1, Sq, Skv], got shape ", m.sizes());
      TORCH_CHECK(m.scalar_type() == at::kBool || m.scalar_type() == at::kByte,
                  "atten_mask must be bool or uint8 (True / 1 = masked), got ", m.scalar_type());
      TORCH_CHECK(p.layout != "TND" || m.dim() == 2,
                  "with input_layout 'TND', atten_mask must be 2-D [Sq, Skv]");
      at::Tensor m4 = m.dim() == 2 ? m.view({1, 1, m.size(0), m.size(1)})
                                   : m.dim() == 3 ? m.unsqueeze(1) : m;
      TORCH_CHECK(m4.dim() == 4, "atten_mask must be [Sq, Skv], [B, Sq, Skv] or [B|1, N|1, Sq, "
                  "Skv], got ", m.sizes());
      const int64_t mq = p.layout == "TND" ? m4.size(2) : p.Sq;
      const int64_t mk = p.layout == "TND" ? m4.size(3) : p.Skv;
      TORCH_CHECK(m4.size(2) == mq && m4.size(3) == mk &&
                      (m4.size(0) == 1 || m4.size(0) == p.B) &&
                      (m4.size(1) == 1 || m4.size(1) == p.Nq),
                  "atten_mask of shape ", m.sizes(), " does not broadcast to [B, N, Sq, Skv] = [",
                  p.B, ", ", p.Nq, ", ", p.Sq, ", ", p.Skv, "]");
      p.mask = m4;
      if (sparse_mode == 0) {
        p.band.pre = pre_tockens;
        p.band.next = next_tockens;
      }
      if (sparse_mode != 5) break;
    }
      [[fallthrough]];
    case 6: {
      p.band.pre = INT64_MAX / 4;
      p.band.next = 0;
      p.band.bottom_right = true;
      TORCH_CHECK(prefix.has_value() && static_cast<int64_t>(prefix->size()) == num_seqs,
                  "sparse_mode ", sparse_mode, " (prefix) needs prefix: the number of leading "
                  "keys every query sees, one per batch (", num_seqs, " values), got ",
                  prefix.has_value() ? std::to_string(prefix->size()) + " values"
                                     : std::string("None"));
      for (int64_t s = 0; s < num_seqs; ++s) {
        const int64_t n = (*prefix)[s];
        TORCH_CHECK(n >= 0 && n <= seq_len(s, true), "prefix[", s, "] = ", n,
                    " must be in [0, Skv] = [0, ", seq_len(s, true), "]");
        p.prefix.push_back(n);
      }
      break;
    }
    case 2:
    case 3:
      p.band.pre = INT64_MAX / 4;
      p.band.next = 0;
      p.band.bottom_right = sparse_mode == 3;
      break;
    case 4:
      p.band.pre = pre_tockens;
      p.band.next = next_tockens;
      p.band.bottom_right = true;
      break;
    default: {  // 7 / 8
      TORCH_CHECK(!p.pse, "npu_fusion_attention: sparse_mode ", sparse_mode, " does not take pse "
                  "(as in torch_npu)");
      nk::AttentionBand causal, cut;
      causal.next = 0;
      causal.bottom_right = sparse_mode == 7;
      cut.pre = pre_tockens;
      cut.next = next_tockens;
      cut.bottom_right = true;
      p.seq_bands.assign(static_cast<size_t>(num_seqs), causal);
      if (num_seqs > 0) p.seq_bands[sparse_mode == 7 ? num_seqs - 1 : 0] = cut;
      break;
    }
  }
  if (has_mask && sparse_mode >= 2 && sparse_mode != 5) {
    const int64_t rows = sparse_mode == 6 ? 3072 : 2048;
    TORCH_CHECK(atten_mask->dim() == 2 && atten_mask->size(0) == rows &&
                    atten_mask->size(1) == 2048,
                "sparse_mode ", sparse_mode, " takes the compressed ", rows, " x 2048 atten_mask ",
                sparse_mode == 6 ? "(a 2048 x 2048 upper triangle over a 1024 x 2048 block whose "
                                   "left half is 0 and right half 1)"
                                 : "(torch.triu(torch.ones(2048, 2048), diagonal=1).bool())",
                ", got shape ", atten_mask->sizes());
  }
  return p;
}

// softmax_max / softmax_sum as [B, N, S, 8] views of torch_npu's shapes ([T, N, 8] for TND).
at::Tensor statsView(const at::Tensor& t, const Problem& p) {
  return p.layout == "TND" ? t.unsqueeze(0).permute({0, 2, 1, 3}) : t;
}
at::Tensor emptyStats(const Problem& p, const at::TensorOptions& o) {
  if (p.layout == "TND") return at::empty({p.Sq, p.Nq, kStatCopies}, o.dtype(at::kFloat));
  return at::empty({p.B, p.Nq, p.Sq, kStatCopies}, o.dtype(at::kFloat));
}

void launchForward(const Problem& p, const at::Tensor& out4, const at::Tensor& smax4,
                   const at::Tensor& ssum4, const char* name) {
  if (out4.numel() == 0) return;
  launchTask(streamOf(p.q), name,
             [l = p.launch(), o = describe(out4), m = describe(smax4), s = describe(ssum4)] {
               nk::flash_attention_forward(l.get(), o, m, s);
             });
}

void launchBackward(const Problem& p, const at::Tensor& out4, const at::Tensor& dout4,
                    const at::Tensor& smax4, const at::Tensor& ssum4, const at::Tensor& dq4,
                    const at::Tensor& dk4, const at::Tensor& dv4, const char* name,
                    const at::Tensor* dpse4 = nullptr) {
  std::optional<nk::TensorDesc> dpse;
  if (dpse4) dpse = describe(*dpse4);
  launchTask(streamOf(p.q), name,
             [l = p.launch(), o = describe(out4), g = describe(dout4), m = describe(smax4),
              s = describe(ssum4), dq = describe(dq4), dk = describe(dk4), dv = describe(dv4),
              dpse] {
               nk::flash_attention_backward(l.get(), o, g, m, s, dq, dk, dv,
                                            dpse ? &*dpse : nullptr);
             });
}

// The dropout seed of one call: a fresh draw from the device's generator (as torch_npu takes
// one from its Philox generator); offset 0. The grad replays the mask from the pair.
void drawSeed(Problem* p, c10::DeviceIndex device) {
  // keep_prob 0 drops everything: nothing random to draw (torch_npu draws only for 0 < p < 1).
  if (p->keep_prob >= 1.0 || p->keep_prob <= 0.0) return;
  p->seed = nextLaunchSeed(std::nullopt, device, "attention with dropout") &
            0x7fffffffffffffffULL;
  p->offset = 0;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, int64_t, int64_t, int64_t>
npu_fusion_attention(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                     int64_t head_num, c10::string_view input_layout,
                     const std::optional<at::Tensor>& pse,
                     const std::optional<at::Tensor>& padding_mask,
                     const std::optional<at::Tensor>& atten_mask, double scale, double keep_prob,
                     int64_t pre_tockens, int64_t next_tockens, int64_t /*inner_precise*/,
                     at::OptionalIntArrayRef prefix, at::OptionalIntArrayRef actual_seq_qlen,
                     at::OptionalIntArrayRef actual_seq_kvlen, int64_t sparse_mode,
                     bool /*gen_mask_parallel*/, bool /*sync*/) {
  Problem p = fusionProblem(query, key, value, head_num, input_layout, pse, padding_mask,
                            atten_mask, scale, keep_prob, pre_tockens, next_tockens, prefix,
                            actual_seq_qlen, actual_seq_kvlen, sparse_mode);
  const c10::DeviceGuard guard(query.device());
  drawSeed(&p, query.device().index());
  at::Tensor out = emptyInLayout(p.layout, p.B, p.Nq, p.Sq, p.Dv, query.options());
  at::Tensor smax = emptyStats(p, query.options()), ssum = emptyStats(p, query.options());
  launchForward(p, toBNSD(out, p.layout, p.Nq, "out"), statsView(smax, p), statsView(ssum, p),
                "npu_fusion_attention");
  at::Tensor softmax_out = at::empty({0}, query.options());  // reserved, as in torch_npu
  return {out, smax, ssum, softmax_out, static_cast<int64_t>(p.seed),
          static_cast<int64_t>(p.offset), p.keep_prob < 1.0 ? p.numels() : 0};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> npu_fusion_attention_grad(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& dy, int64_t head_num, c10::string_view input_layout,
    const std::optional<at::Tensor>& pse, const std::optional<at::Tensor>& padding_mask,
    const std::optional<at::Tensor>& atten_mask, const std::optional<at::Tensor>& softmax_max,
    const std::optional<at::Tensor>& softmax_sum,
    const std::optional<at::Tensor>& /*softmax_in*/,
    const std::optional<at::Tensor>& attention_in, double scale_value, double keep_prob,
    int64_t pre_tockens, int64_t next_tockens, int64_t /*inner_precise*/, int64_t seed,
    int64_t offset, int64_t /*numels*/, at::OptionalIntArrayRef prefix,
    at::OptionalIntArrayRef actual_seq_qlen, at::OptionalIntArrayRef actual_seq_kvlen,
    int64_t sparse_mode, bool /*gen_mask_parallel*/, bool /*sync*/) {
  Problem p = fusionProblem(query, key, value, head_num, input_layout, pse, padding_mask,
                            atten_mask, scale_value, keep_prob, pre_tockens, next_tockens, prefix,
                            actual_seq_qlen, actual_seq_kvlen, sparse_mode);
  TORCH_CHECK(softmax_max && softmax_max->defined() && softmax_sum && softmax_sum->defined() &&
                  attention_in && attention_in->defined(),
              "npu_fusion_attention_grad needs softmax_max, softmax_sum and attention_in "
              "(outputs 1, 2 and 0 of npu_fusion_attention)");
  checkFloat(dy, "dy", query);
  const at::Tensor stats_shape = emptyStats(p, query.options().device(at::kMeta));
  TORCH_CHECK(softmax_max->sizes() == stats_shape.sizes() &&
                  softmax_sum->sizes() == stats_shape.sizes() &&
                  softmax_max->scalar_type() == at::kFloat &&
                  softmax_sum->scalar_type() == at::kFloat,
              "softmax_max and softmax_sum must be float32 of shape ", stats_shape.sizes(),
              " (as npu_fusion_attention returns them)");
  const c10::DeviceGuard guard(query.device());
  p.seed = static_cast<uint64_t>(seed);
  p.offset = static_cast<uint64_t>(offset);
  at::Tensor dq = at::empty_like(query, at::MemoryFormat::Contiguous);
  at::Tensor dk = at::empty_like(key, at::MemoryFormat::Contiguous);
  at::Tensor dv = at::empty_like(value, at::MemoryFormat::Contiguous);
  const int64_t kv_heads = p.Nkv;
  // dpse: float32 with the batch dim whole (the kernel writes each batch's own), summed over a
  // broadcast batch afterwards and rounded once to pse's dtype and shape.
  std::optional<at::Tensor> dpse;
  if (p.pse) {
    dpse = at::zeros({p.B, p.Nq, p.pse->size(2), p.Skv}, query.options().dtype(at::kFloat));
  }
  if (query.numel() > 0 || key.numel() > 0) {
    launchBackward(p, toBNSD(*attention_in, p.layout, p.Nq, "attention_in"),
                   toBNSD(dy, p.layout, p.Nq, "dy"), statsView(*softmax_max, p),
                   statsView(*softmax_sum, p), toBNSD(dq, p.layout, p.Nq, "dq"),
                   toBNSD(dk, p.layout, kv_heads, "dk"), toBNSD(dv, p.layout, kv_heads, "dv"),
                   "npu_fusion_attention_grad", dpse ? &*dpse : nullptr);
  }
  if (!dpse) return {dq, dk, dv, at::empty({0}, query.options())};
  at::Tensor g = p.pse->size(0) == 1 && p.B > 1 ? dpse->sum(0, /*keepdim=*/true) : *dpse;
  return {dq, dk, dv, g.to(p.pse->scalar_type())};
}

// ---- npu_fused_infer_attention_score ----------------------------------------------------

std::tuple<at::Tensor, at::Tensor> npu_fused_infer_attention_score(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const std::optional<at::Tensor>& pse_shift, const std::optional<at::Tensor>& atten_mask,
    at::OptionalSymIntArrayRef actual_seq_lengths,
    at::OptionalSymIntArrayRef actual_seq_lengths_kv,
    const std::optional<at::Tensor>& dequant_scale1, const std::optional<at::Tensor>& quant_scale1,
    const std::optional<at::Tensor>& dequant_scale2, const std::optional<at::Tensor>& quant_scale2,
    const std::optional<at::Tensor>& quant_offset2,
    const std::optional<at::Tensor>& antiquant_scale,
    const std::optional<at::Tensor>& antiquant_offset,
    const std::optional<at::Tensor>& block_table,
    const std::optional<at::Tensor>& query_padding_size,
    const std::optional<at::Tensor>& kv_padding_size,
    const std::optional<at::Tensor>& key_antiquant_scale,
    const std::optional<at::Tensor>& key_antiquant_offset,
    const std::optional<at::Tensor>& value_antiquant_scale,
    const std::optional<at::Tensor>& value_antiquant_offset,
    const std::optional<at::Tensor>& key_shared_prefix,
    const std::optional<at::Tensor>& value_shared_prefix,
    const std::optional<at::Tensor>& actual_shared_prefix_len,
    const std::optional<at::Tensor>& query_rope, const std::optional<at::Tensor>& key_rope,
    const std::optional<at::Tensor>& key_rope_antiquant_scale, int64_t num_heads, double scale,
    int64_t pre_tokens, int64_t next_tokens, c10::string_view input_layout,
    int64_t num_key_value_heads, int64_t sparse_mode, int64_t /*inner_precise*/,
    int64_t block_size, int64_t antiquant_mode, bool softmax_lse_flag,
    int64_t key_antiquant_mode, int64_t value_antiquant_mode) {
  auto given = [](const std::optional<at::Tensor>& t) { return t.has_value() && t->defined(); };
  using Named = std::pair<const std::optional<at::Tensor>*, const char*>;
  for (const auto& [t, name] : std::initializer_list<Named>{
                         {&pse_shift, "pse_shift"}, {&dequant_scale1, "dequant_scale1"},
                         {&quant_scale1, "quant_scale1"}, {&dequant_scale2, "dequant_scale2"},
                         {&quant_scale2, "quant_scale2"}, {&quant_offset2, "quant_offset2"},
                         {&query_padding_size, "query_padding_size"},
                         {&kv_padding_size, "kv_padding_size"},
                         {&key_antiquant_scale, "key_antiquant_scale"},
                         {&key_antiquant_offset, "key_antiquant_offset"},
                         {&value_antiquant_scale, "value_antiquant_scale"},
                         {&value_antiquant_offset, "value_antiquant_offset"},
                         {&key_shared_prefix, "key_shared_prefix"},
                         {&value_shared_prefix, "value_shared_prefix"},
                         {&actual_shared_prefix_len, "actual_shared_prefix_len"},
                         {&query_rope, "query_rope"}, {&key_rope, "key_rope"},
                         {&key_rope_antiquant_scale, "key_rope_antiquant_scale"}}) {
    TORCH_CHECK_NOT_IMPLEMENTED(!given(*t), "npu_fused_infer_attention_score: ", name,
                                " (quantization / shared prefix / rope split) is not supported "
                                "by SimNPU (of the quantisation arguments, antiquant_scale / "
                                "antiquant_offset with an int8 key / value are)");
  }
  (void)key_antiquant_mode, (void)value_antiquant_mode;
  const std::string layout(input_layout);
  TORCH_CHECK(layout == "BSH" || layout == "BSND" || layout == "BNSD",
              "npu_fused_infer_attention_score: input_layout must be BSH, BSND or BNSD in "
              "SimNPU, got '", layout, "'");
  TORCH_CHECK(num_heads > 0, "num_heads must be positive, got ", num_heads);
  const int64_t kv_heads = num_key_value_heads > 0 ? num_key_value_heads : num_heads;
  checkFloat(query, "query", query);
  // An int8 key / value cache is dequantised in the kernel with antiquant_scale / _offset.
  const bool int8_kv = key.scalar_type() == at::kChar || value.scalar_type() == at::kChar;
  if (int8_kv) {
    TORCH_CHECK(key.scalar_type() == at::kChar && value.scalar_type() == at::kChar,
                "npu_fused_infer_attention_score: key and value must both be int8 (antiquant), "
                "got ", key.scalar_type(), " and ", value.scalar_type());
    TORCH_CHECK(given(antiquant_scale), "npu_fused_infer_attention_score: an int8 key / value "
                "needs antiquant_scale (and antiquant_offset for asymmetric quantisation)");
    TORCH_CHECK(key.device() == query.device() && value.device() == query.device(),
                "key and value must be on query's device");
  } else {
    TORCH_CHECK(!given(antiquant_scale) && !given(antiquant_offset),
                "npu_fused_infer_attention_score: antiquant_scale / antiquant_offset dequantise "
                "an int8 key / value, but key is ", key.scalar_type());
    checkFloat(key, "key", query);
    checkFloat(value, "value", query);
  }
  const c10::DeviceGuard guard(query.device());
  at::Tensor q4 = toBNSD(query, layout, num_heads, "query");
  at::Tensor k4, v4;
  const int64_t B = q4.size(0);
  if (given(block_table)) {
    // Paged KV cache: key / value are [num_blocks, block_size, H_kv] (or [.., N, D]); the block
    // table lists, per batch, the cache blocks of its sequence in order. Gathered on the device.
    TORCH_CHECK(block_size > 0, "block_table needs block_size > 0");
    TORCH_CHECK(block_table->dim() == 2 && block_table->size(0) == B,
                "block_table must be [B, max_blocks], got ", block_table->sizes());
    TORCH_CHECK(key.size(1) == block_size, "with block_table, key must be [num_blocks, "
                "block_size, H] with block_size ", block_size, ", got ", key.sizes());
    const at::Tensor idx = block_table->to(at::kLong).reshape({-1});
    const int64_t blocks = block_table->size(1);
    auto gather = [&](const at::Tensor& cache) {
      at::Tensor flat = cache.reshape({cache.size(0), block_size, -1});
      at::Tensor g = at::index_select(flat, 0, idx);  // [B * blocks, block_size, H]
      return g.view({B, blocks * block_size, flat.size(2)});
    };
    const int64_t d = key.dim() == 3 ? key.size(2) / kv_heads : key.size(3);
    k4 = gather(key).view({B, blocks * block_size, kv_heads, d}).permute({0, 2, 1, 3});
    v4 = gather(value).view({B, blocks * block_size, kv_heads, -1}).permute({0, 2, 1, 3});
  } else {
    k4 = toBNSD(key, layout, kv_heads, "key");
    v4 = toBNSD(value, layout, kv_heads, "value");
  }
  const int64_t Sq = q4.size(2), Skv = k4.size(2), N = q4.size(1), Dv = v4.size(3);
  TORCH_CHECK(k4.size(1) == kv_heads && N % kv_heads == 0, "key has ", k4.size(1),
              " heads; expected num_key_value_heads = ", kv_heads, " dividing num_heads ", N);
  // antiquant_scale / _offset: index 0 for the key, 1 for the value; per-tensor (2,),
  // per-channel (2, N, 1, D) BNSD / (2, N, D) BSND / (2, H) BSH (antiquant_mode 0), or
  // per-token (2, B, Skv) float32 (antiquant_mode 1). Each half as a [B, Nkv, Skv, D] view.
  std::array<std::optional<at::Tensor>, 4> deq;  // k_scale, k_offset, v_scale, v_offset
  if (int8_kv) {
    TORCH_CHECK(k4.size(3) == Dv, "antiquant needs key and value of one head dim");
    const int64_t D = Dv;
    auto as4 = [&](const at::Tensor& t, const char* name) {
      checkFloat(t, name, t);
      at::Tensor h4;
      if (antiquant_mode == 1) {
        TORCH_CHECK(t.dim() == 3 && t.size(0) == 2 && t.size(1) == B && t.size(2) >= Skv,
                    name, " must be (2, B, Skv) = (2, ", B, ", ", Skv, ") for antiquant_mode 1 "
                    "(per-token), got ", t.sizes());
        h4 = t.narrow(2, 0, Skv).unsqueeze(-1).unsqueeze(2);  // [2, B, 1, Skv, 1]
      } else {
        TORCH_CHECK(antiquant_mode == 0, "antiquant_mode must be 0 (per-channel / per-tensor) or "
                    "1 (per-token), got ", antiquant_mode);
        if (t.dim() == 1 && t.size(0) == 2) {
          h4 = t.view({2, 1, 1, 1, 1});
        } else {
          TORCH_CHECK(t.numel() == 2 * kv_heads * D && t.size(0) == 2 &&
                          ((layout == "BNSD" && t.dim() == 4) ||
                           (layout == "BSND" && t.dim() == 3) || (layout == "BSH" && t.dim() == 2)),
                      name, " must be (2,) (per-tensor) or, per-channel, (2, N, 1, D) for BNSD, "
                      "(2, N, D) for BSND, (2, H) for BSH, with N = ", kv_heads, " and D = ", D,
                      "; got ", t.sizes(), " with input_layout '", layout, "'");
          h4 = t.reshape({2, 1, kv_heads, 1, D});
        }
      }
      return std::array<at::Tensor, 2>{h4[0].expand({B, kv_heads, Skv, D}),
                                       h4[1].expand({B, kv_heads, Skv, D})};
    };
    auto scales = as4(*antiquant_scale, "antiquant_scale");
    deq[0] = scales[0];
    deq[2] = scales[1];
    if (given(antiquant_offset)) {
      auto offsets = as4(*antiquant_offset, "antiquant_offset");
      deq[1] = offsets[0];
      deq[3] = offsets[1];
    }
  }
  auto lengths = [&](at::OptionalSymIntArrayRef l, int64_t full, const char* name) {
    std::vector<int64_t> out(static_cast<size_t>(B), full);
    if (l.has_value()) {
      TORCH_CHECK(static_cast<int64_t>(l->size()) == B || l->size() == 1, name, " must have ",
                  B, " entries (one per batch), got ", l->size());
      for (int64_t b = 0; b < B; ++b) {
        out[b] = (*l)[l->size() == 1 ? 0 : b].expect_int();
        TORCH_CHECK(out[b] >= 0 && out[b] <= full, name, "[", b, "] = ", out[b],
                    " is outside [0, ", full, "]");
      }
    }
    return out;
  };
  const std::vector<int64_t> lq = lengths(actual_seq_lengths, Sq, "actual_seq_lengths");
  const std::vector<int64_t> lkv = lengths(actual_seq_lengths_kv, Skv, "actual_seq_lengths_kv");
  at::Tensor out = at::empty_like(query, at::MemoryFormat::Contiguous);
  if (Dv != q4.size(3)) out = emptyInLayout(layout, B, N, Sq, Dv, query.options());
  at::Tensor out4 = toBNSD(out, layout, N, "out");
  at::Tensor stats = at::zeros({2, B, N, Sq, 1}, query.options().dtype(at::kFloat));
  // Rows past a batch's actual length come out 0, as torch_npu leaves them.
  out.zero_();
  std::optional<at::Tensor> mask;
  nk::AttentionBand band;
  if (given(atten_mask) && sparse_mode == 0) {
    at::Tensor m = *atten_mask;
    TORCH_CHECK(m.scalar_type() == at::kBool || m.scalar_type() == at::kByte,
                "atten_mask must be bool or uint8, got ", m.scalar_type());
    if (m.dim() == 2) m = m.view({1, 1, m.size(0), m.size(1)});
    if (m.dim() == 3) m = m.unsqueeze(1);
    TORCH_CHECK(m.dim() == 4 && m.size(-1) >= Skv && m.size(-2) >= Sq,
                "atten_mask must cover [Sq, Skv] = [", Sq, ", ", Skv, "], got ", m.sizes());
    mask = m;
    band.pre = pre_tokens;
    band.next = next_tokens;
  } else if (sparse_mode == 2 || sparse_mode == 3) {
    band.next = 0;
    band.bottom_right = sparse_mode == 3;
  } else if (sparse_mode == 4) {
    band.pre = pre_tokens;
    band.next = next_tokens;
    band.bottom_right = true;
  } else {
    TORCH_CHECK_NOT_IMPLEMENTED(sparse_mode == 0, "npu_fused_infer_attention_score: sparse_mode ",
                                sparse_mode, " is not supported by SimNPU (0, 2, 3, 4 are)");
  }
  for (int64_t b = 0; b < B; ++b) {
    if (lq[b] == 0) continue;
    Problem p;
    p.q = q4.narrow(0, b, 1).narrow(2, 0, lq[b]);
    p.k = k4.narrow(0, b, 1).narrow(2, 0, lkv[b]);
    p.v = v4.narrow(0, b, 1).narrow(2, 0, lkv[b]);
    if (mask) {
      at::Tensor mb = mask->size(0) == 1 ? *mask : mask->narrow(0, b, 1);
      p.mask = mb.narrow(2, 0, lq[b]).narrow(3, 0, lkv[b]).expand({1, N, lq[b], lkv[b]});
    }
    p.band = band;
    p.scale = scale;
    for (size_t i = 0; i < deq.size(); ++i) {
      if (deq[i]) p.antiquant[i] = deq[i]->narrow(0, b, 1).narrow(2, 0, lkv[b]);
    }
    launchForward(p, out4.narrow(0, b, 1).narrow(2, 0, lq[b]),
                  stats[0].narrow(0, b, 1).narrow(2, 0, lq[b]),
                  stats[1].narrow(0, b, 1).narrow(2, 0, lq[b]), "npu_fused_infer_attention_score");
  }
  // softmax_lse = max + log(sum), [B, N, Sq, 1] (torch_npu's shape); a [1] placeholder when
  // softmax_lse_flag is off.
  at::Tensor lse = softmax_lse_flag ? stats[0] + at::log(stats[1])
                                    : at::zeros({1}, query.options().dtype(at::kFloat));
  return {out, lse};
}

// ---- the fused SDPA backend ----------------------------------------------------------------

// sdp::SDPBackend::overrideable (ATen/SDPBackend.h); math is 0.
constexpr int64_t kSdpMath = 0;
constexpr int64_t kSdpOverrideable = 4;

}  // namespace

// Which SDPA backend runs on npu: the fused one (ours) when its arguments allow, else math.
int64_t fusedSdpChoice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double /*dropout_p*/,
                         bool is_causal, std::optional<double> /*scale*/, bool enable_gqa) {
  auto ok = [&](const at::Tensor& t) {
    return (t.scalar_type() == at::kFloat || t.scalar_type() == at::kHalf ||
            t.scalar_type() == at::kBFloat16) &&
           t.dim() == 4 && t.scalar_type() == query.scalar_type() && describable(t);
  };
  // torch.nn.attention.sdpa_kernel([...]) without SDPBackend.OVERRIDEABLE turns us off.
  if (!at::globalContext().userEnabledOverrideableSDP()) return kSdpMath;
  if (!ok(query) || !ok(key) || !ok(value)) return kSdpMath;
  if (key.size(1) != query.size(1) && !(enable_gqa && query.size(1) % key.size(1) == 0)) {
    return kSdpMath;
  }
  // A boolean mask becomes 0 / -inf before it reaches the kernel and is turned back into a
  // boolean one there; an arbitrary float bias would need pse support.
  if (attn_mask && attn_mask->defined()) {
    if (attn_mask->scalar_type() != at::kBool || is_causal) return kSdpMath;
    if (attn_mask->dim() > 4) return kSdpMath;
  }
  return kSdpOverrideable;
}

namespace {

// SDPA's problem: [B, H, S, D] tensors; bias is the boolean mask turned into 0 / -inf by SDPA.
Problem sdpaProblem(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                    const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal,
                    std::optional<double> scale) {
  Problem p;
  p.layout = "BNSD";
  p.q = query, p.k = key, p.v = value;
  p.B = query.size(0), p.Nq = query.size(1), p.Sq = query.size(2), p.D = query.size(3);
  p.Nkv = key.size(1), p.Skv = key.size(2), p.Dv = value.size(3);
  TORCH_CHECK(p.Nq % p.Nkv == 0, "scaled_dot_product_attention: key heads ", p.Nkv,
              " must divide query heads ", p.Nq);
  p.scale = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(p.D));
  p.keep_prob = 1.0 - dropout_p;
  if (is_causal) {
    p.band.next = 0;  // SDPA's is_causal is top-left aligned
  }
  if (attn_bias && attn_bias->defined()) {
    at::Tensor m = attn_bias->scalar_type() == at::kBool
                       ? attn_bias->logical_not()
                       : attn_bias->eq(-std::numeric_limits<double>::infinity());
    while (m.dim() < 4) m = m.unsqueeze(0);
    p.mask = m.expand({p.B, p.Nq, p.Sq, p.Skv});
  }
  return p;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor,
           at::Tensor, at::Tensor>
sdpa_overrideable(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                  const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal,
                  bool /*return_debug_mask*/, std::optional<double> scale) {
  TORCH_CHECK(query.dim() == 4 && key.dim() == 4 && value.dim() == 4,
              "scaled_dot_product_attention on npu (fused): query, key and value must be 4-D");
  const c10::DeviceGuard guard(query.device());
  Problem p = sdpaProblem(query, key, value, attn_bias, dropout_p, is_causal, scale);
  drawSeed(&p, query.device().index());
  // The output in query's memory order (SDPA callers often pass [B, S, H, D] transposed).
  at::Tensor out = query.stride(1) < query.stride(2)
                       ? at::empty({p.B, p.Sq, p.Nq, p.Dv}, query.options()).transpose(1, 2)
                       : at::empty({p.B, p.Nq, p.Sq, p.Dv}, query.options());
  at::Tensor stats = at::empty({2, p.B, p.Nq, p.Sq, 1}, query.options().dtype(at::kFloat));
  launchForward(p, out, stats[0], stats[1], "scaled_dot_product_attention");
  at::Tensor lse = (stats[0] + at::log(stats[1])).squeeze(-1);
  const at::TensorOptions cpu_long = at::TensorOptions().dtype(at::kLong);
  at::Tensor seed = at::full({}, static_cast<int64_t>(p.seed), cpu_long);
  at::Tensor offset = at::full({}, static_cast<int64_t>(p.offset), cpu_long);
  return {out, lse, at::Tensor(), at::Tensor(), c10::SymInt(p.Sq), c10::SymInt(p.Skv), seed,
          offset, at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sdpa_overrideable_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key,
    const at::Tensor& value, const at::Tensor& attn_bias, std::array<bool, 4> /*grad_input_mask*/,
    const at::Tensor& out, const at::Tensor& logsumexp, const at::Tensor& /*cum_seq_q*/,
    const at::Tensor& /*cum_seq_k*/, c10::SymInt /*max_q*/, c10::SymInt /*max_k*/,
    double dropout_p, bool is_causal, const at::Tensor& philox_seed,
    const at::Tensor& philox_offset, std::optional<double> scale) {
  const c10::DeviceGuard guard(query.device());
  Problem p = sdpaProblem(query, key, value,
                          attn_bias.defined() ? std::optional<at::Tensor>(attn_bias) : std::nullopt,
                          dropout_p, is_causal, scale);
  p.seed = static_cast<uint64_t>(philox_seed.item<int64_t>());
  p.offset = static_cast<uint64_t>(philox_offset.item<int64_t>());
  // From logsumexp: max = lse and sum = 1 reproduce exp(s - max) / sum; a row with no visible
  // key (lse = -inf) gets sum 0, which the kernel reads as "all probabilities 0".
  at::Tensor smax = logsumexp.unsqueeze(-1);
  at::Tensor ssum = at::where(logsumexp.isneginf(), 0.0, 1.0).to(at::kFloat).unsqueeze(-1);
  at::Tensor dq = at::empty_like(query), dk = at::empty_like(key), dv = at::empty_like(value);
  launchBackward(p, out, grad_out, smax, ssum, dq, dk, dv, "scaled_dot_product_attention_backward");
  return {dq, dk, dv, at::Tensor()};
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, PrivateUse1, m) {
  NPU_IMPL(m, "npu_fusion_attention", npu_fusion_attention);
  NPU_IMPL(m, "npu_fusion_attention_grad", npu_fusion_attention_grad);
  NPU_IMPL(m, "npu_fused_infer_attention_score", npu_fused_infer_attention_score);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  NPU_IMPL(m, "_fused_sdp_choice", fusedSdpChoice);
  NPU_IMPL(m, "_scaled_dot_product_fused_attention_overrideable", sdpa_overrideable);
  NPU_IMPL(m, "_scaled_dot_product_fused_attention_overrideable_backward",
           sdpa_overrideable_backward);
}

}  // namespace torch_npu::native

// SDPA asks this stub (not the dispatcher) which backend to use for the device.
namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_npu::native::fusedSdpChoice)
}  // namespace at::native
