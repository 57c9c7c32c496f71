// Flash attention (torch_npu.npu_fusion_attention and its grad, the fused SDPA backend):
//   out = Dropout(softmax(mask(scale * Q K^T))) V
// computed tile by tile with an online softmax, so no S x S matrix ever exists: memory is
// O(S x D) per head. Float32 / Float16 / BFloat16 operands (any mix), float32 accumulation.
#pragma once

#include <cstdint>

#include "npu/kernels/tensor_desc.h"

namespace npu::kernels {

// Which keys a query sees, besides the explicit mask: key j is visible from query i iff
//   origin - pre <= j - i <= origin + next,  origin = 0 (top-left) or Skv - Sq (bottom-right),
// with Sq / Skv the lengths of the query's own sequence. The defaults see everything.
struct AttentionBand {
  int64_t pre = INT64_MAX / 4;
  int64_t next = INT64_MAX / 4;
  bool bottom_right = false;
};

// The operands, as 4-D descriptors with any strides (every torch_npu layout is a stride
// permutation of these; GQA / MQA: Nkv divides Nq and query head n uses kv head n / (Nq/Nkv)):
//   q [B, Nq, Sq, D]   k [B, Nkv, Skv, D]   v [B, Nkv, Skv, Dv]   out [B, Nq, Sq, Dv]
// Varlen (packed TND): B = 1 and cu_seqlens_q / cu_seqlens_kv (num_seqs + 1 ascending offsets
// starting at 0) cut the S dims into sequences attended separately.
// mask: Bool / UInt8, nonzero = masked; [B|1, N|1, Sq, Skv] as a 4-D descriptor (stride 0 on a
//   broadcast dim); in varlen, dim 0 indexes the sequence and dims 2, 3 the positions in it.
// pse: an additive position bias, scores = scale * (Q K^T + pse) (torch_npu's formula: the bias is
//   added before scaling); [B|1, N, Sq|1, Skv] as a 4-D descriptor of any float dtype, a size-1
//   dim broadcasting; dim 0 indexes the sequence in varlen.
// prefix (torch_npu's sparse_mode 5 / 6): per sequence, keys j < prefix[seq] are visible from
//   every query besides what the band shows.
// seq_bands: per sequence, a band replacing `band` (torch_npu's sparse_mode 7 / 8, where the
//   cut sequence at one end of a varlen batch has its own band).
// Dropout (keep_prob < 1): element (seq, head, i, j) is kept iff a counter-based hash of
//   (seed, offset, seq, head, i, j) falls below keep_prob; kept weights are divided by
//   keep_prob. The backward with the same seed / offset replays the same mask.
// Int8 key / value dequantised as their blocks are loaded (npu_fused_infer_attention_score's
// antiquant, Ascend's convention): k = (k_int8 + offset) * scale, v likewise; scale / offset
// are 4-D descriptors broadcast to k's / v's [B, Nkv, Skv, D] (stride 0 on a broadcast dim),
// of any float dtype; a null offset is 0 (symmetric quantisation). Forward only.
struct KvAntiquant {
  const TensorDesc* k_scale = nullptr;
  const TensorDesc* k_offset = nullptr;
  const TensorDesc* v_scale = nullptr;
  const TensorDesc* v_offset = nullptr;
};

struct FlashAttentionArgs {
  TensorDesc q, k, v;
  const TensorDesc* mask = nullptr;
  const TensorDesc* pse = nullptr;
  AttentionBand band;
  const AttentionBand* seq_bands = nullptr;
  const int64_t* prefix = nullptr;
  KvAntiquant antiquant;  // with Int8 k / v
  const int64_t* cu_seqlens_q = nullptr;
  const int64_t* cu_seqlens_kv = nullptr;
  int64_t num_seqs = 0;
  double scale = 1.0;
  double keep_prob = 1.0;
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// softmax_max / softmax_sum: Float32 [B, Nq, Sq, R]: each row's max of the scaled, masked
// scores and sum of exp(score - max), written to all R entries (torch_npu keeps R = 8 copies).
// A row with no visible key gets out = 0, max = -inf, sum = 0.
void flash_attention_forward(const FlashAttentionArgs& args, const TensorDesc& out,
                             const TensorDesc& softmax_max, const TensorDesc& softmax_sum);

// Recomputes the scores block by block from the forward's softmax_max / softmax_sum.
// grad_q has q's shape, grad_k / grad_v k's / v's (summed over each kv head's query group).
// grad_pse (with args.pse): Float32 [B, N, Sq|1, Skv], zero-filled by the caller, dim 0 NOT
// broadcast (the caller sums it over a broadcast batch): scale * dScores, summed over the rows
// when pse has one row. Entries of invisible scores stay 0.
void flash_attention_backward(const FlashAttentionArgs& args, const TensorDesc& out,
                              const TensorDesc& grad_out, const TensorDesc& softmax_max,
                              const TensorDesc& softmax_sum, const TensorDesc& grad_q,
                              const TensorDesc& grad_k, const TensorDesc& grad_v,
                              const TensorDesc* grad_pse = nullptr);

// The dropout keep decision the kernels use (exposed for tests and references).
bool attention_dropout_keep(uint64_t seed, uint64_t offset, int64_t seq, int64_t head,
                            int64_t i, int64_t j, double keep_prob);

namespace testing {
// false keeps bfloat16 attention off the AMX tile products (the float32 FMA tile path runs, as
// on a CPU without AMX); true, the default, uses AMX where the CPU and Linux allow it.
void set_attention_amx(bool allowed);
// The tile products a bfloat16 attention with a tile-path head dim takes now: "amx_bf16" or
// "fma_f32".
const char* attention_bf16_products();
// false keeps the short path (at most 64 queries and keys a head, head dims <= 64) on its
// portable loops, as on a CPU without AVX-512; true, the default, holds each row of scores in
// AVX-512 registers where the CPU has them. short_attention_avx512(): which one runs now.
void set_short_attention_avx512(bool allowed);
bool short_attention_avx512();
// false runs decoding (at most 8 query rows) one query head per item, as on a CPU without
// AVX-512; true, the default, runs a grouped-query group per item where the keys and values
// are float32 rows and the head dims multiples of 16.
void set_decode_attention_grouped(bool allowed);
// How many (sequence, kv head) items the grouped decode path has run in this process.
int64_t decode_attention_grouped_items();
}  // namespace testing

}  // namespace npu::kernels
