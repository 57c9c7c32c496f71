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

#include "gemm_bf16.h"

namespace npu::kernels::detail::gemm {
namespace {

template <int MR, int NV>
inline __attribute__((always_inline)) void body(int64_t pairs, const uint16_t* __restrict a,
                                                const uint16_t* __restrict b, float* c,
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
  if (beta == 0) {
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

}  // namespace npu::kernels::detail::gemm
