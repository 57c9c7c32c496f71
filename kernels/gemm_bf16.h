// The AVX512-BF16 GEMM micro-kernel (gemm_bf16_avx512.cpp, its own translation unit compiled
// for that instruction set). Call only when __builtin_cpu_supports("avx512bf16").
#pragma once

#include <cstdint>
#include <functional>

namespace npu::kernels::detail::gemm {

// MR x NR of the bfloat16 micro-kernel (the same tile as the AVX-512 float kernel).
inline constexpr int kBf16MR = 14;
inline constexpr int kBf16NR = 32;

// C[14 x 32] = alpha * A_panel B_panel + beta * C over `pairs` pairs of k (packed as described
// in gemm_bf16_avx512.cpp); beta == 0 never reads C.
void kernel_avx512bf16_14x32(int64_t pairs, const uint16_t* a, const uint16_t* b, float* c,
                             int64_t ldc, float alpha, float beta);

// The same with a bfloat16 C (raw bits, row-major, leading dimension ldc): the float32 result
// alpha * A B + beta * C is rounded once to bfloat16 (nearest even; NaN -> 0x7fc0, as
// float_to_bf16 in dtype_traits.h), so a GEMM whose K fits one block needs no float workspace.
void kernel_avx512bf16_14x32_bf16c(int64_t pairs, const uint16_t* a, const uint16_t* b,
                                   uint16_t* c, int64_t ldc, float alpha, float beta);

// AMX: true when the CPU has AMX-TILE and AMX-BF16 and Linux granted this process the tile
// state (asked for once, at the first call).
bool amx_bf16_usable();

// Told the block of C (rows [r0, r1) x columns [c0, c1)) each time one is final.
using AmxBlockDone = std::function<void(int64_t r0, int64_t r1, int64_t c0, int64_t c1)>;

// C[M x N] (float, row-major, leading dimension ldc) = alpha * A B + beta * C on the tile unit
// (gemm_amx.cpp), over packed bfloat16 operands: A [round_up(M, 32) x Kp] row-major, zero-padded,
// Kp a multiple of 32; B as round_up(N, 32) / 32 panels of Kp / 2 rows of 32 words (pairs of
// k), zero-padded. beta == 0 never reads C. Call only when amx_bf16_usable().
void gemm_amx_bf16_packed(int64_t M, int64_t N, int64_t Kp, float alpha, const uint16_t* A,
                          const uint32_t* B, float beta, float* c, int64_t ldc,
                          const AmxBlockDone* done);

}  // namespace npu::kernels::detail::gemm
