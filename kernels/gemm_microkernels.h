// Register-blocked GEMM micro-kernels: C[MR x NR] (+)= A_panel[MR x K] * B_panel[K x NR] on
// packed panels (A: MR values per k, B: NR values per k, both contiguous).
//
// The accumulators are MR x NV vector registers: 14 x 2 zmm (14 x 32 floats, 28 of the 32
// AVX-512 registers) or 6 x 2 ymm for AVX2 (12 of 16). Each k step loads NV vectors of B,
// broadcasts MR scalars of A and issues MR*NV FMAs, enough independent chains to cover FMA
// latency on both FMA ports. The AVX-512 kernels are compiled with a target attribute and are
// only called after has_avx512() (vec_math.h; see gemm.cpp).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "vec_math.h"  // NPU_AVX512 and has_avx512(): one instruction set for every kernel

namespace npu::kernels::detail::gemm {

#define NPU_ALWAYS_INLINE inline __attribute__((always_inline))

// Vector traits: one width and type per instruction set and element type.
struct Avx512F {
  using T = float;
  using V = __m512;
  static constexpr int kWidth = 16;
  NPU_AVX512 NPU_ALWAYS_INLINE static V zero() { return _mm512_setzero_ps(); }
  NPU_AVX512 NPU_ALWAYS_INLINE static V load(const T* p) { return _mm512_loadu_ps(p); }
  NPU_AVX512 NPU_ALWAYS_INLINE static void store(T* p, V v) { _mm512_storeu_ps(p, v); }
  NPU_AVX512 NPU_ALWAYS_INLINE static V set1(T x) { return _mm512_set1_ps(x); }
  NPU_AVX512 NPU_ALWAYS_INLINE static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  NPU_AVX512 NPU_ALWAYS_INLINE static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
};
struct Avx512D {
  using T = double;
  using V = __m512d;
  static constexpr int kWidth = 8;
  NPU_AVX512 NPU_ALWAYS_INLINE static V zero() { return _mm512_setzero_pd(); }
  NPU_AVX512 NPU_ALWAYS_INLINE static V load(const T* p) { return _mm512_loadu_pd(p); }
  NPU_AVX512 NPU_ALWAYS_INLINE static void store(T* p, V v) { _mm512_storeu_pd(p, v); }
  NPU_AVX512 NPU_ALWAYS_INLINE static V set1(T x) { return _mm512_set1_pd(x); }
  NPU_AVX512 NPU_ALWAYS_INLINE static V fma(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
  NPU_AVX512 NPU_ALWAYS_INLINE static V mul(V a, V b) { return _mm512_mul_pd(a, b); }
};
struct Avx2F {
  using T = float;
  using V = __m256;
  static constexpr int kWidth = 8;
  NPU_ALWAYS_INLINE static V zero() { return _mm256_setzero_ps(); }
  NPU_ALWAYS_INLINE static V load(const T* p) { return _mm256_loadu_ps(p); }
  NPU_ALWAYS_INLINE static void store(T* p, V v) { _mm256_storeu_ps(p, v); }
  NPU_ALWAYS_INLINE static V set1(T x) { return _mm256_set1_ps(x); }
  NPU_ALWAYS_INLINE static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  NPU_ALWAYS_INLINE static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
};
struct Avx2D {
  using T = double;
  using V = __m256d;
  static constexpr int kWidth = 4;
  NPU_ALWAYS_INLINE static V zero() { return _mm256_setzero_pd(); }
  NPU_ALWAYS_INLINE static V load(const T* p) { return _mm256_loadu_pd(p); }
  NPU_ALWAYS_INLINE static void store(T* p, V v) { _mm256_storeu_pd(p, v); }
  NPU_ALWAYS_INLINE static V set1(T x) { return _mm256_set1_pd(x); }
  NPU_ALWAYS_INLINE static V fma(V a, V b, V c) { return _mm256_fmadd_pd(a, b, c); }
  NPU_ALWAYS_INLINE static V mul(V a, V b) { return _mm256_mul_pd(a, b); }
};

// The identity output stage of the micro-kernels (gemm_body.inc's post).
struct NoPost {
  static constexpr bool kIdentity = true;
};

#define NPU_GEMM_NAME body_avx2
#define NPU_GEMM_PREFETCH_C prefetch_c_avx2
#define NPU_GEMM_STORE store_tile_avx2
#define NPU_GEMM_ATTR
#include "gemm_body.inc"
#undef NPU_GEMM_NAME
#undef NPU_GEMM_PREFETCH_C
#undef NPU_GEMM_STORE
#undef NPU_GEMM_ATTR
#define NPU_GEMM_NAME body_avx512
#define NPU_GEMM_PREFETCH_C prefetch_c_avx512
#define NPU_GEMM_STORE store_tile_avx512
#define NPU_GEMM_ATTR NPU_AVX512
#include "gemm_body.inc"
#undef NPU_GEMM_NAME
#undef NPU_GEMM_PREFETCH_C
#undef NPU_GEMM_STORE
#undef NPU_GEMM_ATTR

using KernelF = void (*)(int64_t k, const float* a, const float* b, float* c, int64_t ldc,
                         float alpha, float beta);
using KernelD = void (*)(int64_t k, const double* a, const double* b, double* c, int64_t ldc,
                         double alpha, double beta);

NPU_AVX512 inline void kernel_avx512_f32_14x32(int64_t k, const float* a, const float* b,
                                               float* c, int64_t ldc, float alpha, float beta) {
  body_avx512<Avx512F, 14, 2>(k, a, b, c, ldc, alpha, beta);
}
// For an M that 14 rows would pad more than 8 do (8, 16, 32: conv layers with few channels).
NPU_AVX512 inline void kernel_avx512_f32_8x32(int64_t k, const float* a, const float* b,
                                              float* c, int64_t ldc, float alpha, float beta) {
  body_avx512<Avx512F, 8, 2>(k, a, b, c, ldc, alpha, beta);
}
// 16-column panels, for an N of at most 16.
NPU_AVX512 inline void kernel_avx512_f32_14x16(int64_t k, const float* a, const float* b,
                                               float* c, int64_t ldc, float alpha, float beta) {
  body_avx512<Avx512F, 14, 1>(k, a, b, c, ldc, alpha, beta);
}
NPU_AVX512 inline void kernel_avx512_f32_8x16(int64_t k, const float* a, const float* b,
                                              float* c, int64_t ldc, float alpha, float beta) {
  body_avx512<Avx512F, 8, 1>(k, a, b, c, ldc, alpha, beta);
}
// The float32 kernels with an output stage fused into their stores (GemmOutputStage, for one
// tile: row_bias at the tile's first row, col_bias at its first column): the same float
// operations in the same order as a pass over C after the GEMM.
struct OutputStageF {
  static constexpr bool kIdentity = false;
  const float* row_bias;
  const float* col_bias;
  float col_scale;
  bool relu;
  NPU_AVX512 NPU_ALWAYS_INLINE __m512 operator()(int i, int j, __m512 v) const {
    // The _round_ forms (current rounding mode) are builtins the compiler never contracts
    // with a neighbouring multiply into an FMA (GCC's _mm512_add_ps / _mm512_mul_ps are plain
    // vector arithmetic, which it does contract): each operation rounds as written.
    constexpr int kCur = _MM_FROUND_CUR_DIRECTION;
    if (row_bias) v = _mm512_add_round_ps(v, _mm512_set1_ps(row_bias[i]), kCur);
    if (col_bias) {
      const __m512 scaled = _mm512_mul_round_ps(_mm512_set1_ps(col_scale),
                                                _mm512_loadu_ps(col_bias + j * 16), kCur);
      v = _mm512_add_round_ps(v, scaled, kCur);
    }
    if (relu) {
      const __mmask16 keep = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ) |
                             _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
      v = _mm512_maskz_mov_ps(keep, v);
    }
    return v;
  }
};
using StageKernelF = void (*)(int64_t k, const float* a, const float* b, float* c, int64_t ldc,
                              float alpha, float beta, const OutputStageF& stage);
template <int MR, int NV>
NPU_AVX512 void kernel_avx512_f32_stage(int64_t k, const float* a, const float* b, float* c,
                                        int64_t ldc, float alpha, float beta,
                                        const OutputStageF& stage) {
  body_avx512<Avx512F, MR, NV>(k, a, b, c, ldc, alpha, beta, stage);
}

// The float32 AVX-512 kernel with its operands read in place instead of from packed panels.
// A: MR rows, each contiguous along k at a + i * lda (kColA = false, a row-major A), or MR
// values contiguous per k at a + p * lda (kColA = true, a column-major A: the x^T of a
// Linear's weight gradient). B: NV * 16 contiguous values per k, ldb apart (a packed panel:
// ldb = NV * 16; a row-major B: its row stride). Broadcast values are scalar loads, so an A
// panel buys nothing but its packing when it meets a few B panels (a batch of attention
// products, [64 x 64] @ [64 x 32]: packing A was a third of the time), and a B block that stays
// in L2 is read from there either way. The same FMAs in the same order as the packed kernel,
// so the result is the same bit for bit.
template <int MR, int NV, bool kColA>
NPU_AVX512 void kernel_avx512_f32_direct(int64_t k, const float* a, int64_t lda, const float* b,
                                         int64_t ldb, float* c, int64_t ldc, float alpha,
                                         float beta) {
  __m512 acc[MR][NV];
  prefetch_c_avx512<Avx512F, MR, NV>(c, ldc);
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_setzero_ps();
  const float* rows[MR];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) rows[i] = a + i * lda;
  // A row-major A: the next MR rows (the next panel, which the caller computes after this
  // one's B panels) are fetched into L2 while this panel computes, a line of each row every
  // 16 k. Without it, a tall A streamed from L3 (a Linear over 4096 tokens: [4096 x 128],
  // 2 MB) stalled the first kernel call of every panel on 14 rows of misses: 192-199 GFLOP/s
  // where an A that stays in L2 gives 220 (one thread). Into L2, not L1: at K = 352 the next
  // panel (20 KB) beside this one and a B panel (45 KB) outgrows L1, and fetching it there
  // measured 1-2% slower. A prefetch never faults, so the last panel's run past A's end is
  // harmless; the address is formed as an integer for that reason.
  const uintptr_t next_rows = reinterpret_cast<uintptr_t>(a) + MR * lda * sizeof(float);
  // A column-major A: both operands are k-strided streams (x^T's rows and the output gradient's
  // rows for a Linear's weight gradient, K = the tokens), each k a new line of A (two when its
  // MR values straddle one) and NV new lines of B. Those are fetched into L1 kPrefetchK values
  // of k ahead: with operands that the step's earlier kernels left in L3 or memory, the
  // [128 x 4096] @ [4096 x 128] weight gradient took 1709 us without (one thread, ICL Xeon;
  // MKL 1286), 1466 with; with two threads 1325 -> 1159 (MKL 1036). Only the first line of
  // each row or vector is named, so a row of B one line long costs a prefetch per k, no more.
  constexpr int64_t kPrefetchK = 16;
  const uintptr_t a_ahead = reinterpret_cast<uintptr_t>(a) + kPrefetchK * lda * sizeof(float);
  const uintptr_t b_ahead = reinterpret_cast<uintptr_t>(b) + kPrefetchK * ldb * sizeof(float);
#pragma GCC unroll 2
  for (int64_t p = 0; p < k; ++p) {
    if constexpr (kColA) {
      const uintptr_t ap = a_ahead + p * lda * sizeof(float);
      _mm_prefetch(reinterpret_cast<const char*>(ap), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(ap + (MR - 1) * sizeof(float)), _MM_HINT_T0);
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) {
        _mm_prefetch(reinterpret_cast<const char*>(b_ahead + (p * ldb + j * 16) * sizeof(float)),
                     _MM_HINT_T0);
      }
    }
    if constexpr (!kColA) {
      if ((p & 15) == 0) {
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) {
          _mm_prefetch(reinterpret_cast<const char*>(next_rows + (i * lda + p) * sizeof(float)),
                       _MM_HINT_T1);
        }
      }
    }
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) bv[j] = _mm512_loadu_ps(b + j * 16);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_set1_ps(kColA ? a[i] : rows[i][p]);
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_fmadd_ps(av, bv[j], acc[i][j]);
    }
    b += ldb;
    if constexpr (kColA) a += lda;
  }
  store_tile_avx512<Avx512F, MR, NV>(acc, c, ldc, alpha, beta);
}
using DirectKernelF = void (*)(int64_t k, const float* a, int64_t lda, const float* b,
                               int64_t ldb, float* c, int64_t ldc, float alpha, float beta);

// The in-place kernel for an MR x NR tile (MR 8 or 14, NR 16 or 32; else nullptr), reading a
// column-major A (or a packed panel) when col_a, a row-major A otherwise.
inline DirectKernelF direct_kernel_f32(int mr, int nr, bool col_a) {
  const bool nv2 = nr == 32;
  if (mr == 14 && col_a) {
    return nv2 ? &kernel_avx512_f32_direct<14, 2, true> : &kernel_avx512_f32_direct<14, 1, true>;
  }
  if (mr == 14) {
    return nv2 ? &kernel_avx512_f32_direct<14, 2, false> : &kernel_avx512_f32_direct<14, 1, false>;
  }
  if (mr == 8 && col_a) {
    return nv2 ? &kernel_avx512_f32_direct<8, 2, true> : &kernel_avx512_f32_direct<8, 1, true>;
  }
  if (mr == 8) {
    return nv2 ? &kernel_avx512_f32_direct<8, 2, false> : &kernel_avx512_f32_direct<8, 1, false>;
  }
  return nullptr;
}

NPU_AVX512 inline void kernel_avx512_f64_14x16(int64_t k, const double* a, const double* b,
                                               double* c, int64_t ldc, double alpha,
                                               double beta) {
  body_avx512<Avx512D, 14, 2>(k, a, b, c, ldc, alpha, beta);
}
inline void kernel_avx2_f32_6x16(int64_t k, const float* a, const float* b, float* c,
                                 int64_t ldc, float alpha, float beta) {
  body_avx2<Avx2F, 6, 2>(k, a, b, c, ldc, alpha, beta);
}
inline void kernel_avx2_f64_6x8(int64_t k, const double* a, const double* b, double* c,
                                int64_t ldc, double alpha, double beta) {
  body_avx2<Avx2D, 6, 2>(k, a, b, c, ldc, alpha, beta);
}

}  // namespace npu::kernels::detail::gemm
