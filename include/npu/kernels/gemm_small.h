// Products too small for the packed GEMM: a head's scores in attention written out by hand
// (16 x 8 times 8 x 16 per (batch, head), thousands of them in one bmm), where packing panels,
// padding to the micro-kernel's 14 x 32 tile and setting up tasks cost several times the
// arithmetic. gemm() hands them here first.
#pragma once

#include "npu/kernels/matmul.h"

namespace npu::kernels {

// The largest product the small path takes: M and N at most kGemmSmallMaxMN, K at most
// kGemmSmallMaxK, and M * N * K at most kGemmSmallMaxVolume.
constexpr int64_t kGemmSmallMaxMN = 32;
constexpr int64_t kGemmSmallMaxK = 64;
constexpr int64_t kGemmSmallMaxVolume = 32 * 32 * 32;

namespace detail {
// C = alpha * A B + beta * C for 2-D descriptors of gemm()'s float dtypes (float32, bfloat16,
// float16; float64 and integers are not taken), in float32 with one rounding into C, A and B
// read as HF32 with math = HF32 (float32 operands): the packed path's results to the rounding
// of its summation order. False (nothing written) when the product is not small enough or the
// path is switched off.
bool gemm_small(const TensorDesc& c, const TensorDesc& a, const TensorDesc& b, double alpha,
                double beta, CubeMath math);
}  // namespace detail

namespace testing {
// Off: gemm() never takes the small path (to compare it with the packed one).
void set_gemm_small_path(bool on);
}  // namespace testing

}  // namespace npu::kernels
