// Matrix multiplication: C = alpha * A @ B + beta * C, plain and batched.
#pragma once

#include "npu/kernels/tensor_desc.h"

namespace npu::kernels {

// Supported: all of A, B, C in {Float32, Float16, BFloat16} (math in float32, one rounding
// of C at the end), or all Float64. Two BFloat16 operands use AVX512-BF16 dot products where
// the CPU has them (bfloat16 subnormals then count as zero, as in oneDNN). Integer matmul is not provided (fall back).
bool gemm_supports(DType a, DType b, DType c);

// A: [M, K], B: [K, N], C: [M, N] as 2-D descriptors with any strides: a transposed operand
// is just a descriptor with swapped strides (no copy needed). beta == 0 means C is not read
// (NaN in C does not propagate), as in BLAS and PyTorch's addmm. K == 0 gives C = beta * C.
void gemm(const TensorDesc& c, const TensorDesc& a, const TensorDesc& b, double alpha = 1.0,
          double beta = 0.0);

// bmm / baddbmm: 3-D descriptors [batch, rows, cols]; a batch stride of 0 broadcasts that
// operand over the batch (e.g. matmul of a batch by one matrix).
void gemm_batched(const TensorDesc& c, const TensorDesc& a, const TensorDesc& b,
                  double alpha = 1.0, double beta = 0.0);

}  // namespace npu::kernels

namespace npu::kernels::testing {
// For tests and benchmarks only: "avx2" restricts GEMM to the AVX2 micro-kernels and
// "avx512" to the AVX-512 float ones (no AVX512-BF16), to test every path on one machine;
// "auto" (the default) picks the best the CPU supports.
void set_gemm_isa(const char* isa);
// The instruction set gemm() uses now for operands of these dtypes: "avx512_bf16", "avx512"
// or "avx2" (benchmark labels, and tests that a path was really taken).
const char* gemm_isa(DType a, DType b);
// For tests only: true makes every task pack its own copy of each A panel, the path a task
// takes when another thread is packing the shared panel it needs (otherwise a timing accident).
void set_gemm_private_a_panels(bool on);
}  // namespace npu::kernels::testing
