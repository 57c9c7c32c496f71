// The small-product path of gemm() (npu/kernels/gemm_small.h): A and B read in place where they
// are float32 (else converted to float32 rows on the stack), each row of C a sum over k of B's
// rows scaled by A's entries, in k order, C's columns in at most four AVX2 vectors kept in
// registers (N <= 32), the tail masked.
#include "npu/kernels/gemm_small.h"

#include <immintrin.h>

#include <atomic>
#include <cstring>

#include "convert.h"

namespace npu::kernels {
namespace detail {
namespace {

std::atomic<bool> g_small_path{true};

bool float_like(DType t) {
  return t == DType::Float32 || t == DType::BFloat16 || t == DType::Float16;
}

// rows x cols of `t` (element (r, c) at strides[0] * r + strides[1] * c) as float32 rows of
// leading dimension *ld: in place for float32 rows that are contiguous (nothing to round),
// else converted (and rounded to HF32) into `buf`.
const float* rows_of(const TensorDesc& t, int64_t rows, int64_t cols, bool hf32, float* buf,
                     int64_t* ld) {
  if (t.dtype == DType::Float32 && (t.strides[1] == 1 || cols == 1) && !hf32) {
    *ld = rows == 1 ? cols : t.strides[0];
    return static_cast<const float*>(t.data);
  }
  const ConvertFn fn = convert_fn(t.dtype, DType::Float32);
  const int64_t esize = static_cast<int64_t>(dtype_size(t.dtype));
  const char* base = static_cast<const char*>(t.data);
  for (int64_t r = 0; r < rows; ++r) {
    fn(base + r * t.strides[0] * esize, t.strides[1], buf + r * cols, 1, cols);
  }
  if (hf32) {
    for (int64_t i = 0; i < rows * cols; ++i) buf[i] = round_to_hf32(buf[i]);
  }
  *ld = cols;
  return buf;
}

// Lanes [0, n) of a vector of 8 (n <= 8) for the masked loads and stores of a row's tail.
__m256i lanes(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// One row of C: row[0, N) = sum_k a[k * as] * B[k][0, N), in k order (one FMA per k and column
// as the packed micro-kernels do), NV = ceil(N / 8) vectors kept in registers.
template <int NV>
void row_product(const float* a, int64_t as, const float* B, int64_t ldb, int64_t K, int64_t N,
                 float* row) {
  const __m256i tail = lanes(N - 8 * (NV - 1));
  __m256 acc[NV];
  for (int v = 0; v < NV; ++v) acc[v] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const __m256 w = _mm256_set1_ps(a[k * as]);
    const float* bk = B + k * ldb;
    for (int v = 0; v < NV - 1; ++v) acc[v] = _mm256_fmadd_ps(w, _mm256_loadu_ps(bk + 8 * v), acc[v]);
    acc[NV - 1] = _mm256_fmadd_ps(w, _mm256_maskload_ps(bk + 8 * (NV - 1), tail), acc[NV - 1]);
  }
  for (int v = 0; v < NV - 1; ++v) _mm256_storeu_ps(row + 8 * v, acc[v]);
  _mm256_maskstore_ps(row + 8 * (NV - 1), tail, acc[NV - 1]);
}

using RowProduct = void (*)(const float*, int64_t, const float*, int64_t, int64_t, int64_t, float*);
constexpr RowProduct kRowProducts[4] = {row_product<1>, row_product<2>, row_product<3>,
                                        row_product<4>};

}  // namespace

bool gemm_small(const TensorDesc& c, const TensorDesc& a, const TensorDesc& b, double alpha,
                double beta, CubeMath math) {
  const int64_t M = c.sizes[0], N = c.sizes[1], K = a.sizes[1];
  if (M > kGemmSmallMaxMN || N > kGemmSmallMaxMN || K > kGemmSmallMaxK ||
      M * N * K > kGemmSmallMaxVolume || !g_small_path.load(std::memory_order_relaxed)) {
    return false;
  }
  if (!float_like(c.dtype) || !float_like(a.dtype) || !float_like(b.dtype)) return false;
  const bool hf32 = math == CubeMath::HF32 && a.dtype == DType::Float32 &&
                    b.dtype == DType::Float32;
  float a_buf[kGemmSmallMaxMN * kGemmSmallMaxK];
  float b_buf[kGemmSmallMaxK * kGemmSmallMaxMN];
  float row[kGemmSmallMaxMN];
  float old[kGemmSmallMaxMN];
  // A is read by element, so any float32 layout is read in place: (m, k) at m * rs + k * cs.
  int64_t a_rs, a_cs = 1, ldb;
  const float* A;
  if (a.dtype == DType::Float32 && !hf32) {
    A = static_cast<const float*>(a.data);
    a_rs = a.strides[0];
    a_cs = a.strides[1];
  } else {
    A = rows_of(a, M, K, hf32, a_buf, &a_rs);
  }
  const float* B = rows_of(b, K, N, hf32, b_buf, &ldb);
  const RowProduct product = kRowProducts[(N + 7) / 8 - 1];
  const float al = static_cast<float>(alpha), be = static_cast<float>(beta);
  const ConvertFn to_c = convert_fn(DType::Float32, c.dtype);
  const ConvertFn from_c = convert_fn(c.dtype, DType::Float32);
  const int64_t c_size = static_cast<int64_t>(dtype_size(c.dtype));
  for (int64_t m = 0; m < M; ++m) {
    product(A + m * a_rs, a_cs, B, ldb, K, N, row);
    char* cm = static_cast<char*>(c.data) + m * c.strides[0] * c_size;
    if (be != 0.0f) {
      from_c(cm, c.strides[1], old, 1, N);
      for (int64_t n = 0; n < N; ++n) row[n] = al * row[n] + be * old[n];
    } else if (al != 1.0f) {
      for (int64_t n = 0; n < N; ++n) row[n] *= al;
    }
    if (c.dtype == DType::Float32 && c.strides[1] == 1) {
      std::memcpy(cm, row, sizeof(float) * static_cast<size_t>(N));
    } else {
      to_c(row, 1, cm, c.strides[1], N);
    }
  }
  return true;
}

}  // namespace detail

namespace testing {
void set_gemm_small_path(bool on) {
  detail::g_small_path.store(on, std::memory_order_relaxed);
}
}  // namespace testing

}  // namespace npu::kernels
