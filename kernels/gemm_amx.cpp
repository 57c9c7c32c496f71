// bfloat16 GEMM on AMX, the tile unit of Sapphire Rapids and later Xeons (its own translation
// unit, compiled for AMX-TILE / AMX-BF16 and AVX-512; gemm.cpp calls it only when
// amx_bf16_usable()).
//
// One TDPBF16PS multiplies a 16 x 32 bfloat16 tile of A by a 32 x 16 tile of B (stored as 16
// rows of k pairs, 16 columns of 32-bit words: the "VNNI" layout) into a 16 x 16 float32 tile
// of C: 8192 multiply-adds an instruction, float32 accumulation. The kernel keeps a 32 x 32
// block of C in four tiles (tmm0-3) across all of K, loading two A tiles (tmm4-5) and two B
// tiles (tmm6-7) per 32 values of k.
//  - The operands come packed (gemm.cpp, gemm_amx_bf16): A as a zero-padded row-major copy
//    (rows to a multiple of 32, k to 32), B as 32-column panels of k pairs (the AVX512-BF16
//    path's pair panels, k padded with zeros), each panel's two 16-column halves 64 bytes apart
//    in a 128-byte row. Both copies are shared by the threads, which take 128 x 128 chunks of C, each over K blocks of 512 (the chunk's A rows and B columns of a K
//    block stay in L2 while its 16 blocks go over them; running sums wait in a float buffer).
//  - Then C = alpha * AB + beta * C is written for the chunk's valid rows and columns (beta == 0
//    never reads C), and `done` is told.
//  - Like the AVX512-BF16 path, the tile unit treats bfloat16 subnormal inputs as zero.
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "amx_tiles.h"
#include "gemm_bf16.h"
#include "kernel_assert.h"
#include "npu/kernels/thread_pool.h"

namespace npu::kernels::detail::gemm {
namespace {

constexpr int kBlock = 32;  // C block: 2 x 2 tiles of 16 x 16
constexpr int kTileK = 32;  // bfloat16 values of k per A tile row
constexpr int64_t kChunkBlocks = 4;  // a task: 4 x 4 blocks of C (128 x 128)
constexpr int64_t kKC = 512;        // k per K block (a multiple of kTileK)

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

template <class T>
std::unique_ptr<T, FreeDeleter> aligned_zeroed(size_t n) {
  const size_t bytes = std::max<size_t>(64, (n * sizeof(T) + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, bytes);
  NPU_KERNEL_ASSERT(p != nullptr, "out of host memory for AMX GEMM packing buffers");
  std::memset(p, 0, bytes);
  return std::unique_ptr<T, FreeDeleter>(static_cast<T*>(p));
}

}  // namespace

void gemm_amx_bf16_packed(int64_t M, int64_t N, int64_t Kp, float alpha, const uint16_t* A,
                          const uint32_t* B, float beta, float* c, int64_t ldc,
                          const AmxBlockDone* done) {
  const int64_t m_blocks = (M + kBlock - 1) / kBlock, n_blocks = (N + kBlock - 1) / kBlock;

  // Tasks of kChunk x kChunk of C; each runs K in blocks of kKC, so that the task's A rows and
  // B columns of one K block (kChunk x kKC values each, 128 KB) stay in L2 while every 32 x 32
  // block of the task goes over them, keeping its running sums in a float buffer in between.
  const amx::TileConfig cfg = amx::make_tile_config();
  const int64_t mc_blocks = (m_blocks + kChunkBlocks - 1) / kChunkBlocks;
  const int64_t nc_blocks = (n_blocks + kChunkBlocks - 1) / kChunkBlocks;
  parallel_for(0, mc_blocks * nc_blocks, 1, [&](int64_t t0, int64_t t1) {
    _tile_loadconfig(&cfg);
    constexpr int64_t kChunk = kChunkBlocks * kBlock;
    constexpr int64_t acc_stride = kChunk * sizeof(float);
    auto acc_buf = aligned_zeroed<float>(kChunk * kChunk);
    float* const acc = acc_buf.get();
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t ib0 = (t % mc_blocks) * kChunkBlocks, jb0 = (t / mc_blocks) * kChunkBlocks;
      const int64_t ib1 = std::min(m_blocks, ib0 + kChunkBlocks);
      const int64_t jb1 = std::min(n_blocks, jb0 + kChunkBlocks);
      for (int64_t pc = 0; pc < Kp; pc += kKC) {
        const int64_t pe = std::min(Kp, pc + kKC);
        for (int64_t jb = jb0; jb < jb1; ++jb) {
          const uint32_t* panel = B + jb * (Kp / 2) * kBlock;
          for (int64_t ib = ib0; ib < ib1; ++ib) {
            float* sums = acc + (ib - ib0) * kBlock * kChunk + (jb - jb0) * kBlock;
            if (pc == 0) {
              _tile_zero(0);
              _tile_zero(1);
              _tile_zero(2);
              _tile_zero(3);
            } else {
              _tile_loadd(0, sums, acc_stride);
              _tile_loadd(1, sums + 16, acc_stride);
              _tile_loadd(2, sums + 16 * kChunk, acc_stride);
              _tile_loadd(3, sums + 16 * kChunk + 16, acc_stride);
            }
            const uint16_t* a0 = A + ib * kBlock * Kp;
            const uint16_t* a1 = a0 + 16 * Kp;
            for (int64_t k = pc; k < pe; k += kTileK) {
              _tile_loadd(4, a0 + k, Kp * sizeof(uint16_t));
              _tile_loadd(5, a1 + k, Kp * sizeof(uint16_t));
              _tile_loadd(6, panel + (k / 2) * kBlock, kBlock * sizeof(uint32_t));
              _tile_loadd(7, panel + (k / 2) * kBlock + 16, kBlock * sizeof(uint32_t));
              _tile_dpbf16ps(0, 4, 6);
              _tile_dpbf16ps(1, 4, 7);
              _tile_dpbf16ps(2, 5, 6);
              _tile_dpbf16ps(3, 5, 7);
            }
            _tile_stored(0, sums, acc_stride);
            _tile_stored(1, sums + 16, acc_stride);
            _tile_stored(2, sums + 16 * kChunk, acc_stride);
            _tile_stored(3, sums + 16 * kChunk + 16, acc_stride);
          }
        }
      }
      const int64_t i0 = ib0 * kBlock, j0 = jb0 * kBlock;
      const int64_t rows = std::min<int64_t>(M, ib1 * kBlock) - i0;
      const int64_t cols = std::min<int64_t>(N, jb1 * kBlock) - j0;
      for (int64_t i = 0; i < rows; ++i) {
        float* out = c + (i0 + i) * ldc + j0;
        const float* sum = acc + i * kChunk;
        if (beta == 0) {
          for (int64_t j = 0; j < cols; ++j) out[j] = alpha * sum[j];
        } else {
          for (int64_t j = 0; j < cols; ++j) out[j] = alpha * sum[j] + beta * out[j];
        }
      }
      if (done) (*done)(i0, i0 + rows, j0, j0 + cols);
    }
    _tile_release();
  });
}

}  // namespace npu::kernels::detail::gemm

namespace npu::kernels::detail::amx {
bool amx_bf16_usable() { return gemm::amx_bf16_usable(); }
}  // namespace npu::kernels::detail::amx
