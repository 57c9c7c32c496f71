// The bfloat16 GEMM micro-kernel on AVX512-BF16 (vdpbf16ps): C[14 x 32] (+)= A_panel B_panel
// with float32 accumulators.
//
// This file alone is compiled with -mavx512bf16 (kernels/CMakeLists.txt); gemm.cpp calls it only
// after __builtin_cpu_supports("avx512bf16"), so the library still runs on CPUs without it.
//
// Packed layout (gemm.cpp packs it): k is taken in pairs. An A panel holds, per pair p, MR
// 32-bit words (a[i][2p], a[i][2p+1]); a B panel holds, per pair p, NR words (b[2p][j],
// b[2p+1][j]). One vdpbf16ps then adds a[i][2p] b[2p][j] + a[i][2p+1] b[2p+1][j] to 16 lanes
// of float accumulators: twice the multiply-adds of a float FMA, on half the bytes. The
// products of two bfloat16 are exact in float32, so the only rounding is the float32 sum, as in
// the float path (the instruction treats bfloat16 subnormals, below 1.2e-38, as zero, as
// oneDNN's bfloat16 GEMM does on the same instruction).
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "gemm_bf16.h"

namespace npu::kernels::detail::gemm {
namespace {

// 16 floats rounded to bfloat16 bits: round to nearest even by adding 0x7fff plus the lowest
// kept bit, NaN to 0x7fc0 (float_to_bf16's rule; vcvtneps2bf16 would flush subnormals). The
// maskz forms with a full mask are the plain instructions; the unmasked intrinsics trip GCC 12's
// false -Wuninitialized on their _mm512_undefined_* operand.
constexpr __mmask16 kAll = 0xffff;

inline __attribute__((always_inline)) __m256i to_bf16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_maskz_srli_epi32(kAll, u, 16), _mm512_set1_epi32(1));
  const __m512i sum = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  __m512i r = _mm512_maskz_srli_epi32(kAll, sum, 16);
  r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_epi32(0x7fc0));
  return _mm512_maskz_cvtepi32_epi16(kAll, r);
}

inline __attribute__((always_inline)) __m512 from_bf16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, _mm512_maskz_cvtepu16_epi32(kAll, h), 16));
}

// C is float, or bfloat16 bits (CT = uint16_t: converted on load and rounded on store).
template <int MR, int NV, class CT>
inline __attribute__((always_inline)) void body(int64_t pairs, const uint16_t* __restrict a,
                                                const uint16_t* __restrict b, CT* c,
                                                int64_t ldc, float alpha, float beta) {
  constexpr int W = 16;  // floats (and k pairs) per zmm
  __m512 acc[MR][NV];
  // As in the float kernel: fetch the C tile's lines while the k loop runs.
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + NV * W - 1), _MM_HINT_T0);
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int64_t p = 0; p < pairs; ++p) {
    __m512bh bv[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) bv[j] = (__m512bh)_mm512_loadu_si512(b + j * 2 * W);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      int32_t word;
      std::memcpy(&word, a + 2 * i, sizeof word);
      const __m512bh av = (__m512bh)_mm512_set1_epi32(word);
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], av, bv[j]);
    }
    a += 2 * MR;
    b += 2 * NV * W;
  }
  const __m512 va = _mm512_set1_ps(alpha);
  if constexpr (std::is_same_v<CT, uint16_t>) {
    const __m512 vb = _mm512_set1_ps(beta);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) {
        uint16_t* cp = c + i * ldc + j * W;
        __m512 v = alpha == 1 ? acc[i][j] : _mm512_mul_ps(va, acc[i][j]);
        if (beta != 0) v = _mm512_fmadd_ps(vb, from_bf16(cp), v);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(cp), to_bf16(v));
      }
  } else if (beta == 0) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) _mm512_storeu_ps(c + i * ldc + j * W, _mm512_mul_ps(va, acc[i][j]));
  } else {
    const __m512 vb = _mm512_set1_ps(beta);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) {
        float* cp = c + i * ldc + j * W;
        _mm512_storeu_ps(cp, _mm512_fmadd_ps(va, acc[i][j], _mm512_mul_ps(vb, _mm512_loadu_ps(cp))));
      }
  }
}

}  // namespace

void kernel_avx512bf16_14x32(int64_t pairs, const uint16_t* a, const uint16_t* b, float* c,
                             int64_t ldc, float alpha, float beta) {
  body<14, 2>(pairs, a, b, c, ldc, alpha, beta);
}

void kernel_avx512bf16_14x32_bf16c(int64_t pairs, const uint16_t* a, const uint16_t* b,
                                   uint16_t* c, int64_t ldc, float alpha, float beta) {
  body<14, 2>(pairs, a, b, c, ldc, alpha, beta);
}

}  // namespace npu::kernels::detail::gemm
