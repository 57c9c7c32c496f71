// The AMX tile set-up shared by the library's tile kernels (gemm_amx.cpp, flash_attention.cpp's
// AMX path): one tile configuration, and a bfloat16 tile product on operands already laid out
// in the forms the tiles read. Private to kernels/.
//
// One TDPBF16PS multiplies a 16 x 32 bfloat16 tile of A (16 rows of 32 values, row-major) by a
// 32 x 16 tile of B (16 rows of k pairs: row p holds (B[2p][j], B[2p + 1][j]) as one 32-bit
// word per column j, the "VNNI" layout) into a 16 x 16 float32 tile of C, accumulating in
// float32. The tile state must be requested from Linux first (amx_bf16_usable() in gemm.cpp,
// once per process) and each thread loads the configuration before its first tile instruction
// (AmxTileScope).
#pragma once

#include <immintrin.h>

#include <cstdint>

#define NPU_AMX_TARGET \
  __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq")))

namespace npu::kernels::detail::amx {

// true when the CPU has AMX-TILE and AMX-BF16 and Linux granted this process the tile state
// (gemm.cpp's amx_bf16_usable, which asks once; here for kernels that cannot include
// gemm_bf16.h, whose namespace gemm hides the function gemm in npu::kernels::detail).
bool amx_bf16_usable();

// The 64-byte tile configuration of palette 1: eight tiles of 16 rows x 64 bytes, the only
// shape the library's kernels use (C 16 x 16 floats, A 16 x 32 bfloat16, B 16 pair rows x 16).
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

inline TileConfig make_tile_config() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  return cfg;
}

// Loads the configuration on the calling thread for its lifetime and releases the tile state
// at the end (so that a thread that leaves the kernel does not carry 8 KB of live state into
// every context switch).
struct AmxTileScope {
  NPU_AMX_TARGET AmxTileScope() {
    static const TileConfig cfg = make_tile_config();
    _tile_loadconfig(&cfg);
  }
  NPU_AMX_TARGET ~AmxTileScope() { _tile_release(); }
  AmxTileScope(const AmxTileScope&) = delete;
  AmxTileScope& operator=(const AmxTileScope&) = delete;
};

// C[M x N] (+)= A[M x K] B[K x N] with M, N and K multiples of 32, in 32 x 32 blocks of C
// (tmm0-3), two A tiles (tmm4-5) and two B tiles (tmm6-7) per 32 values of k. A: bfloat16
// rows, lda values apart; B: K / 2 rows of k-pair words, ldb words apart; C: float rows, ldc
// floats apart (read only when accumulate). Strides are elements, not bytes.
NPU_AMX_TARGET inline void tile_product_bf16(int64_t M, int64_t N, int64_t K, const uint16_t* a,
                                             int64_t lda, const uint32_t* b, int64_t ldb,
                                             float* c, int64_t ldc, bool accumulate) {
  const int64_t sa = lda * 2, sb = ldb * 4, sc = ldc * 4;
  for (int64_t j = 0; j < N; j += 32) {
    for (int64_t i = 0; i < M; i += 32) {
      float* c0 = c + i * ldc + j;
      float* c1 = c0 + 16 * ldc;
      if (accumulate) {
        _tile_loadd(0, c0, sc);
        _tile_loadd(1, c0 + 16, sc);
        _tile_loadd(2, c1, sc);
        _tile_loadd(3, c1 + 16, sc);
      } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      }
      const uint16_t* a0 = a + i * lda;
      const uint16_t* a1 = a0 + 16 * lda;
      for (int64_t k = 0; k < K; k += 32) {
        const uint32_t* bk = b + (k / 2) * ldb + j;
        _tile_loadd(4, a0 + k, sa);
        _tile_loadd(6, bk, sb);
        _tile_dpbf16ps(0, 4, 6);
        _tile_loadd(7, bk + 16, sb);
        _tile_dpbf16ps(1, 4, 7);
        _tile_loadd(5, a1 + k, sa);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      _tile_stored(0, c0, sc);
      _tile_stored(1, c0 + 16, sc);
      _tile_stored(2, c1, sc);
      _tile_stored(3, c1 + 16, sc);
    }
  }
}

}  // namespace npu::kernels::detail::amx
