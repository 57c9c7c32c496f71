// Matrix multiplication: C = alpha * A @ B + beta * C, plain and batched.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>

#include "npu/kernels/tensor_desc.h"

namespace npu::kernels {

// How the cube unit reads float32 operands (aclnn's cubeMathType): as they are, or rounded to
// HF32, the cube's 19-bit float (float32's sign and 8 exponent bits, 10 explicit mantissa bits),
// before products are formed; accumulation stays float32. torch_npu picks HF32 for float32
// matmuls when torch.npu.matmul.allow_hf32 is set (default False) and for convolutions when
// torch.npu.conv.allow_hf32 is (default True). Other dtypes are unaffected (float16 and bfloat16
// values are HF32 values already; double is not a cube dtype).
enum class CubeMath : uint8_t { KeepDtype, HF32 };

// float32 -> HF32 (returned as the float32 of the same value): the 13 low mantissa bits are
// rounded away to nearest, ties to even, the default of the Ascend cube's float32-to-HF32
// conversion (Ascend C Matmul::SetHF32, transMode 0, and SetHF32TransMode). Carries propagate
// into the exponent (the largest float32 values round to infinity); infinities are kept,
// NaNs stay NaN (quiet), subnormals are rounded like normal numbers (not flushed).
inline float round_to_hf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const uint32_t rounded = (u + 0x0FFFu + ((u >> 13) & 1u)) & 0xFFFFE000u;
  const bool nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
  u = nan ? ((u | 0x00400000u) & 0xFFFFE000u) : rounded;
  std::memcpy(&x, &u, sizeof u);
  return x;
}

// Supported: all of A, B, C in {Float32, Float16, BFloat16} (math in float32, one rounding
// of C at the end), or all Float64. Two BFloat16 operands use AMX tiles (M, N, K >= 32) or
// AVX512-BF16 dot products where the CPU has them (bfloat16 subnormals then count as zero, as
// in oneDNN). Integer matmul is not provided (fall back).
bool gemm_supports(DType a, DType b, DType c);

// A: [M, K], B: [K, N], C: [M, N] as 2-D descriptors with any strides: a transposed operand
// is just a descriptor with swapped strides (no copy needed). beta == 0 means C is not read
// (NaN in C does not propagate), as in BLAS and PyTorch's addmm. K == 0 gives C = beta * C.
// math = HF32: A and B are read as round_to_hf32 of their values (float32 math otherwise).
void gemm(const TensorDesc& c, const TensorDesc& a, const TensorDesc& b, double alpha = 1.0,
          double beta = 0.0, CubeMath math = CubeMath::KeepDtype);

// bmm / baddbmm: 3-D descriptors [batch, rows, cols]; a batch stride of 0 broadcasts that
// operand over the batch (e.g. matmul of a batch by one matrix).
void gemm_batched(const TensorDesc& c, const TensorDesc& a, const TensorDesc& b,
                  double alpha = 1.0, double beta = 0.0, CubeMath math = CubeMath::KeepDtype);

// gemm() takes at most this many rows of a float32 A against a float32 B whose columns are
// contiguous in k (x @ W.T at decode time) as dot products, reading B once and never packing it.
inline constexpr int64_t kGemmFewRowsMax = 8;

// A float32 B [K, N] packed once into the GEMM's panels, for every product by the same B (an
// offline model's weights): gemm() packs B at every call, a read and a write of all of it,
// which for a batch of 64 rows costs as much memory traffic as the product's own reads of B.
// The panels follow the micro-kernel the CPU runs now; math = HF32 rounds them once, here.
class PackedB {
 public:
  PackedB(const TensorDesc& b, CubeMath math = CubeMath::KeepDtype);
  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  CubeMath math() const { return math_; }
  // For gemm.cpp: K block pc (of the driver's K blocking), columns from c0 (a multiple of
  // nr()): panel q at panels(pc, c0) + q * kc * nr().
  int nr() const { return nr_; }
  const float* panels(int64_t pc, int64_t c0, int64_t kc) const {
    return data_.get() + pc * n_padded_ + c0 * kc;
  }

 private:
  struct Free {
    void operator()(float* p) const;
  };
  int64_t k_ = 0, n_ = 0, n_padded_ = 0;
  int nr_ = 0;
  CubeMath math_ = CubeMath::KeepDtype;
  std::unique_ptr<float, Free> data_;
};

// Called with C's rows [r0, r1) x columns [c0, c1) once they are final, on the thread that
// computed them, while they are still in its cache: a bias and an activation cost no extra
// pass over C there.
using GemmEpilogue = std::function<void(int64_t r0, int64_t r1, int64_t c0, int64_t c1)>;

// An output stage fused into the GEMM's stores (float32 C): each value of C, once final, becomes
// v + row_bias[i] (when row_bias is set), then + col_scale * col_bias[j] (when col_bias is set,
// the product rounded first), then ReLU ((v > 0 || v != v) ? v : 0: NaN stays NaN, -0 becomes
// +0) when relu. A Linear layer's bias and activation, or a convolution's, then cost no pass
// over C. Both biases are contiguous, M and N values.
struct GemmOutputStage {
  const float* row_bias = nullptr;
  const float* col_bias = nullptr;
  float col_scale = 1.0f;
  bool relu = false;
  bool active() const { return row_bias != nullptr || col_bias != nullptr || relu; }
};

// gemm(c, a, b, alpha, beta, packed.math()) with B's panels taken from `packed` (made from this
// b), then `stage` applied to C (fused where the driver runs), then `epilogue` over every block
// of C. Calls the panels do not fit (a C that is not
// float32 and row-major, an A that is not float32, the few-row GEMV path, another instruction
// set than at packing) run gemm() on b and the epilogue over all of C afterwards.
void gemm_prepacked(const TensorDesc& c, const TensorDesc& a, const TensorDesc& b,
                    const PackedB& packed, double alpha = 1.0, double beta = 0.0,
                    const GemmEpilogue& epilogue = {}, const GemmOutputStage& stage = {});

}  // namespace npu::kernels

namespace npu::kernels::testing {
// For tests and benchmarks only: "avx2" restricts GEMM to the AVX2 micro-kernels, "avx512" to
// the AVX-512 float ones (no AVX512-BF16) and "avx512_bf16" to those and the AVX512-BF16 one
// (no AMX), to test every path on one machine; "auto" (the default) picks the best the CPU
// supports.
void set_gemm_isa(const char* isa);
// The instruction set gemm() uses now for operands of these dtypes: "amx_bf16" (two bfloat16
// operands, GEMMs with M, N and K of at least 32), "avx512_bf16", "avx512" or "avx2" (benchmark
// labels, and tests that a path was really taken).
const char* gemm_isa(DType a, DType b);
// For tests only: true makes every task pack its own copy of each A panel, the path a task
// takes when another thread is packing the shared panel it needs (otherwise a timing accident).
void set_gemm_private_a_panels(bool on);
// For tests only: false sends gemm_batched's small float32 items through gemm() one by one (the
// driver) instead of its batched in-place path, to compare the two.
void set_gemm_batched_direct(bool on);
// How many gemm_batched calls took that path in this process (tests: the path really ran).
int64_t gemm_batched_direct_calls();
// For tests only: false computes float32 GEMMs whose operands hold subnormals (values below
// 2^-126) as they are, each multiply-add with one taking the CPU's slow assist, instead of
// packing such an operand scaled by 2^24 (gemm.cpp: "subnormal operands").
void set_gemm_subnormal_scaling(bool on);
// How many GEMMs took the scaled path in this process (tests: the path really ran).
int64_t gemm_subnormal_scaled_calls();
}  // namespace npu::kernels::testing
