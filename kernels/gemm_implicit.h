// A float32 GEMM whose B operand is never stored: the driver asks a callback to pack each
// K x NC block of B straight into its NR-column panels (convolution packs input patches there,
// with no im2col matrix in memory), over a batch of B / C pairs that share one A (packed once
// for the whole batch), and hands each finished block of C to an epilogue while it is still in
// cache. Internal to the kernel library (conv.cpp); gemm.cpp implements it with its driver.
#pragma once

#include <cstdint>
#include <functional>

#include "npu/kernels/matmul.h"
#include "npu/kernels/tensor_desc.h"

namespace npu::kernels::detail {

struct ImplicitGemm {
  int64_t M = 0, N = 0, K = 0, batch = 1;
  TensorDesc a;  // [M, K], Float32, any strides
  float* c = nullptr;  // C_n = c + n * c_batch_stride, row-major with leading dimension ldc
  int64_t ldc = 0, c_batch_stride = 0;
  // Writes rows [k0, k0 + kc) x columns [c0, c0 + nc) of B_n as panels of nr columns:
  // dst[q * kc * nr + k * nr + j] = B_n(k0 + k, c0 + q * nr + j), 0 for columns past nc.
  std::function<void(int64_t n, int64_t k0, int64_t kc, int64_t c0, int64_t nc, int nr,
                     float* dst)>
      pack_b;
  // Optional: called once per block of C_n (rows [r0, r1) x columns [c0, c1)) when it is final,
  // on the thread that computed it.
  std::function<void(int64_t n, int64_t r0, int64_t r1, int64_t c0, int64_t c1)> epilogue;
  // Optional output stage (npu/kernels/matmul.h), fused into the micro-kernels' stores of the
  // last K block: no pass over C, and no epilogue call needed for it. The same stage for every
  // C_n (a convolution's bias is row_bias).
  GemmOutputStage stage;
  CubeMath math = CubeMath::KeepDtype;  // HF32: A and the packed B are rounded to HF32
  // HF32 only: pack_b's values are HF32 values already (the caller rounded its source once, as
  // conv does while padding the input), so the packed panels need no rounding pass.
  bool b_is_hf32 = false;
};

// C_n = A @ B_n for every n in [0, batch).
void gemm_implicit(const ImplicitGemm& g);

}  // namespace npu::kernels::detail
