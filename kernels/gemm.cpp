// GEMM: a packed, cache-blocked driver around the micro-kernels of gemm_microkernels.h.
//
// How it works (the Goto/BLIS scheme, with A as the broadcast operand):
//  - M is cut into row blocks whose A block (all of K, at most 16 MB) is packed once by all
//    threads together into MR-row panels per K block of KC (a panel holds MR values per k).
//  - The columns are cut into tasks of up to NC columns (and rows too, when there are fewer
//    column blocks than twice the threads). For each K block, a task packs its KC x NC block
//    of B into NR-column panels in its own buffer (<= 768 KB: stays in that core's L2), then
//    for every A panel (kept in L1 across the inner loop) runs the micro-kernel over every B
//    panel. Tasks run all K blocks, so a GEMM has only two barriers per row block.
//  - Full tiles of a row-major float/double C are updated in place (C = alpha*AB + beta*C on
//    the first K block, C += alpha*AB after). Edge tiles go through a small tile buffer.
//  - Other C layouts or dtypes (column-major C is transposed away first, 16-bit C, ...) are
//    computed into a float workspace and converted at the end, so 16-bit outputs are rounded
//    exactly once. Packing converts Float16/BFloat16 inputs to float on the fly.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dtype_traits.h"
#include "gemm_microkernels.h"
#include "npu/kernels/matmul.h"
#include "npu/kernels/thread_pool.h"

namespace npu::kernels {
namespace detail::gemm {
namespace {

std::atomic<bool> g_force_avx2{false};

bool use_avx512() {
  static const bool supported = __builtin_cpu_supports("avx512f") != 0;
  return supported && !g_force_avx2.load(std::memory_order_relaxed);
}

template <class T>
struct Kernel {
  int mr, nr;
  void (*fn)(int64_t, const T*, const T*, T*, int64_t, T, T);
};

template <class T>
Kernel<T> select_kernel() {
  if constexpr (std::is_same_v<T, float>) {
    if (use_avx512()) return {14, 32, &kernel_avx512_f32_14x32};
    return {6, 16, &kernel_avx2_f32_6x16};
  } else {
    if (use_avx512()) return {14, 16, &kernel_avx512_f64_14x16};
    return {6, 8, &kernel_avx2_f64_6x8};
  }
}

// Block sizes (elements). KC * NR * sizeof(T) of B plus an A panel fit L1; a KC x NC B block
// fits L2 (2 MB per core on the target Xeon, ~1 MB on older ones).
template <class T>
struct Blocking {
  static constexpr int64_t kKC = std::is_same_v<T, float> ? 384 : 256;
  static constexpr int64_t kNC = std::is_same_v<T, float> ? 512 : 384;
  static constexpr int64_t kPackedA = (16 << 20) / sizeof(T);  // 16 MB of packed A at most
};

// A 64-byte aligned per-thread scratch buffer (one per slot), grown on demand and kept: a GEMM
// reuses it on the next call instead of faulting fresh pages in.
template <class T>
T* scratch(int slot, size_t n) {
  struct Buf {
    void* p = nullptr;
    size_t bytes = 0;
    ~Buf() { std::free(p); }
  };
  thread_local Buf bufs[2];
  Buf& b = bufs[slot];
  size_t need = (n * sizeof(T) + 63) / 64 * 64;
  if (b.bytes < need) {
    std::free(b.p);
    b.p = std::aligned_alloc(64, need);
    NPU_KERNEL_ASSERT(b.p != nullptr, "out of host memory for GEMM packing buffers");
    b.bytes = need;
  }
  return static_cast<T*>(b.p);
}

// Source matrix: element (r, c) at data[r * rs + c * cs], of storage type S.
struct MatRef {
  const void* data;
  DType dtype;
  int64_t rs, cs;
};

// Packs rows [0, mc) x cols [0, kc) of A (already offset to the block) into MR-row panels
// [first_panel, last_panel); rows past mc are zero.
// 8x8 float transpose in registers: r[j] becomes column j.
inline void transpose8x8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

// Row-major float A (the common case): 8 k at a time, rows in groups of 8 transposed in
// registers, so both the loads and the stores are contiguous vectors.
inline void pack_a_rowmajor_f32(const float* a, int64_t rs, int rows, int64_t kc, int mr,
                                float* d) {
  int64_t k = 0;
  for (; k + 8 <= kc; k += 8) {
    for (int g = 0; g < mr; g += 8) {
      const int width = std::min(8, mr - g);
      __m256 r[8];
      for (int i = 0; i < 8; ++i) {
        r[i] = (i < width && g + i < rows) ? _mm256_loadu_ps(a + (g + i) * rs + k)
                                           : _mm256_setzero_ps();
      }
      transpose8x8(r);
      const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(width),
                                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
      for (int j = 0; j < 8; ++j) _mm256_maskstore_ps(d + (k + j) * mr + g, mask, r[j]);
    }
  }
  for (; k < kc; ++k) {
    for (int i = 0; i < mr; ++i) d[k * mr + i] = i < rows ? a[i * rs + k] : 0.0f;
  }
}

template <class T, class S>
void pack_a(const S* a, int64_t rs, int64_t cs, int64_t mc, int64_t kc, int mr,
            int64_t first_panel, int64_t last_panel, T* dst) {
  for (int64_t p = first_panel; p < last_panel; ++p) {
    T* d = dst + p * kc * mr;
    int64_t r0 = p * mr;
    int rows = static_cast<int>(std::min<int64_t>(mr, mc - r0));
    if constexpr (std::is_same_v<T, float> && std::is_same_v<S, float>) {
      if (cs == 1) {
        pack_a_rowmajor_f32(a + r0 * rs, rs, rows, kc, mr, d);
        continue;
      }
    }
    if (rows < mr) std::memset(static_cast<void*>(d), 0, sizeof(T) * kc * mr);
    if (cs == 1 || rs != 1) {
      for (int i = 0; i < rows; ++i) {
        const S* src = a + (r0 + i) * rs;
        for (int64_t k = 0; k < kc; ++k) d[k * mr + i] = cast_value<T>(src[k * cs]);
      }
    } else {  // column-major A: the mr values of one k are contiguous
      for (int64_t k = 0; k < kc; ++k) {
        const S* src = a + r0 + k * cs;
        for (int i = 0; i < rows; ++i) d[k * mr + i] = cast_value<T>(src[i]);
      }
    }
  }
}

// Packs rows [0, kc) x cols [0, nc) of B into NR-column panels; columns past nc are zero.
template <class T, class S>
void pack_b(const S* b, int64_t rs, int64_t cs, int64_t kc, int64_t nc, int nr, T* dst) {
  for (int64_t q = 0; q * nr < nc; ++q) {
    T* d = dst + q * kc * nr;
    int64_t c0 = q * nr;
    int cols = static_cast<int>(std::min<int64_t>(nr, nc - c0));
    if (cols < nr) std::memset(static_cast<void*>(d), 0, sizeof(T) * kc * nr);
    if (cs == 1) {
      for (int64_t k = 0; k < kc; ++k) {
        const S* src = b + k * rs + c0;
        if constexpr (std::is_same_v<S, T>) {
          std::memcpy(d + k * nr, src, sizeof(T) * cols);
        } else {
          for (int j = 0; j < cols; ++j) d[k * nr + j] = cast_value<T>(src[j]);
        }
      }
    } else {
      for (int j = 0; j < cols; ++j) {
        const S* src = b + (c0 + j) * cs;
        for (int64_t k = 0; k < kc; ++k) d[k * nr + j] = cast_value<T>(src[k * rs]);
      }
    }
  }
}

template <class T>
void pack_a_any(const MatRef& a, int64_t r0, int64_t k0, int64_t mc, int64_t kc, int mr,
                int64_t p0, int64_t p1, T* dst) {
  dispatch_storage(a.dtype, [&]<class S>() {
    if constexpr (std::is_floating_point_v<compute_t<S>>) {
      const S* base = static_cast<const S*>(a.data) + r0 * a.rs + k0 * a.cs;
      pack_a<T>(base, a.rs, a.cs, mc, kc, mr, p0, p1, dst);
    } else {
      NPU_KERNEL_ASSERT(false, "integer GEMM operands");
    }
  });
}

template <class T>
void pack_b_any(const MatRef& b, int64_t k0, int64_t c0, int64_t kc, int64_t nc, int nr, T* dst) {
  dispatch_storage(b.dtype, [&]<class S>() {
    if constexpr (std::is_floating_point_v<compute_t<S>>) {
      const S* base = static_cast<const S*>(b.data) + k0 * b.rs + c0 * b.cs;
      pack_b<T>(base, b.rs, b.cs, kc, nc, nr, dst);
    } else {
      NPU_KERNEL_ASSERT(false, "integer GEMM operands");
    }
  });
}

// C[M x N] (row-major, leading dimension ldc, type T) = alpha * A B + beta * C.
template <class T>
void driver(int64_t M, int64_t N, int64_t K, T alpha, const MatRef& a, const MatRef& b, T beta,
            T* c, int64_t ldc) {
  const Kernel<T> kern = select_kernel<T>();
  const int mr = kern.mr, nr = kern.nr;
  using B = Blocking<T>;
  const int threads = num_threads();
  const bool small = 2.0 * M * N * K < 4e6;  // not worth waking the workers

  // Rows per A block: the whole K extent of the block is packed up front (<= kPackedA
  // elements), so the tasks below run every K block without a barrier in between.
  const int64_t mc_max = std::max<int64_t>(mr, B::kPackedA / std::max<int64_t>(K, 1) / mr * mr);
  for (int64_t ic = 0; ic < M; ic += mc_max) {
    const int64_t mc = std::min(mc_max, M - ic);
    const int64_t m_panels = (mc + mr - 1) / mr;
    const int64_t mpad = m_panels * mr;
    // Panel p of the K block starting at pc lives at ap + pc * mpad + p * kc * mr.
    T* ap = scratch<T>(0, static_cast<size_t>(mpad * K));
    parallel_for(0, m_panels, small ? m_panels : std::max<int64_t>(1, 65536 / (mr * K + 1)),
                 [&](int64_t p0, int64_t p1) {
      for (int64_t pc = 0; pc < K; pc += B::kKC) {
        const int64_t kc = std::min(B::kKC, K - pc);
        pack_a_any<T>(a, ic, pc, mc, kc, mr, p0, p1, ap + pc * mpad);
      }
    });

    // Column blocks of at most NC, at least two per thread when N allows (so a thread slowed
    // by other work hands its share to the others), and row splits when columns run out.
    int64_t nc_target = ((N + 2 * threads - 1) / (2 * threads) + nr - 1) / nr * nr;
    nc_target = std::clamp<int64_t>(nc_target, nr, B::kNC);
    const int64_t nj = (N + nc_target - 1) / nc_target;
    const int64_t ni = small ? 1 : std::min<int64_t>(m_panels, (2 * threads + nj - 1) / nj);
    const int64_t tasks = nj * ni;

    parallel_for(0, tasks, small ? tasks : 1, [&](int64_t t0, int64_t t1) {
      alignas(64) T tile[14 * 32];
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t jb = t % nj, ib = t / nj;
        const int64_t jc = jb * nc_target;
        const int64_t nc = std::min(nc_target, N - jc);
        const int64_t p_begin = m_panels * ib / ni, p_end = m_panels * (ib + 1) / ni;
        const int64_t n_panels = (nc + nr - 1) / nr;
        T* bp = scratch<T>(1, static_cast<size_t>(n_panels * nr * std::min(B::kKC, K)));
        for (int64_t pc = 0; pc < K; pc += B::kKC) {
          const int64_t kc = std::min(B::kKC, K - pc);
          const T beta_eff = pc == 0 ? beta : T(1);
          pack_b_any<T>(b, pc, jc, kc, nc, nr, bp);
          for (int64_t p = p_begin; p < p_end; ++p) {
            const T* a_panel = ap + pc * mpad + p * kc * mr;
            const int64_t row = ic + p * mr;
            const int rows = static_cast<int>(std::min<int64_t>(mr, M - row));
            for (int64_t q = 0; q < n_panels; ++q) {
              const T* b_panel = bp + q * kc * nr;
              const int64_t col = jc + q * nr;
              const int cols = static_cast<int>(std::min<int64_t>(nr, nc - q * nr));
              T* cp = c + row * ldc + col;
              if (rows == mr && cols == nr) {
                kern.fn(kc, a_panel, b_panel, cp, ldc, alpha, beta_eff);
              } else {
                kern.fn(kc, a_panel, b_panel, tile, nr, T(1), T(0));
                for (int i = 0; i < rows; ++i) {
                  for (int j = 0; j < cols; ++j) {
                    T v = alpha * tile[i * nr + j];
                    cp[i * ldc + j] = beta_eff == T(0) ? v : v + beta_eff * cp[i * ldc + j];
                  }
                }
              }
            }
          }
        }
      }
    });
  }
}

// C = beta * C in any dtype (the K == 0 case).
void scale_c(const TensorDesc& c, double beta) {
  dispatch_storage(c.dtype, [&]<class S>() {
    for (int64_t i = 0; i < c.sizes[0]; ++i) {
      for (int64_t j = 0; j < c.sizes[1]; ++j) {
        S* p = static_cast<S*>(c.data) + i * c.strides[0] + j * c.strides[1];
        double v = beta == 0 ? 0.0 : beta * cast_value<double>(*p);
        *p = cast_value<S>(v);
      }
    }
  });
}

template <class T>
void gemm_typed(const TensorDesc& c, const TensorDesc& a, const TensorDesc& b, double alpha,
                double beta) {
  int64_t M = c.sizes[0], N = c.sizes[1], K = a.sizes[1];
  MatRef ma{a.data, a.dtype, a.strides[0], a.strides[1]};
  MatRef mb{b.data, b.dtype, b.strides[0], b.strides[1]};
  int64_t crs = c.strides[0], ccs = c.strides[1];
  if (N == 1) ccs = 1;  // the stride of a size-1 dimension is meaningless
  if (M == 1) crs = N;
  // A column-major C is a row-major C^T = B^T A^T.
  if (ccs != 1 && crs == 1) {
    std::swap(M, N);
    MatRef at{mb.data, mb.dtype, mb.cs, mb.rs};
    MatRef bt{ma.data, ma.dtype, ma.cs, ma.rs};
    ma = at, mb = bt;
    std::swap(crs, ccs);
  }
  if (c.dtype == dtype_of<T>() && ccs == 1) {
    driver<T>(M, N, K, T(alpha), ma, mb, T(beta), static_cast<T*>(c.data), crs);
    return;
  }
  // Workspace path: compute A B in T, then C = alpha * W + beta * C with conversion.
  std::unique_ptr<T[]> w(new T[static_cast<size_t>(M * N)]);
  driver<T>(M, N, K, T(1), ma, mb, T(0), w.get(), N);
  dispatch_storage(c.dtype, [&]<class S>() {
    parallel_for(0, M, std::max<int64_t>(1, 65536 / std::max<int64_t>(N, 1)),
                 [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        for (int64_t j = 0; j < N; ++j) {
          S* p = static_cast<S*>(c.data) + i * crs + j * ccs;
          T v = T(alpha) * w[i * N + j];
          if (beta != 0) v += T(beta) * cast_value<T>(*p);
          *p = cast_value<S>(v);
        }
      }
    });
  });
}

}  // namespace
}  // namespace detail::gemm

bool gemm_supports(DType a, DType b, DType c) {
  auto f16_32 = [](DType t) {
    return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16;
  };
  if (a == DType::Float64 && b == DType::Float64 && c == DType::Float64) return true;
  return f16_32(a) && f16_32(b) && f16_32(c);
}

void gemm(const TensorDesc& c, const TensorDesc& a, const TensorDesc& b, double alpha,
          double beta) {
  NPU_KERNEL_ASSERT(c.ndim == 2 && a.ndim == 2 && b.ndim == 2, "gemm takes 2-D descriptors");
  NPU_KERNEL_ASSERT(a.sizes[0] == c.sizes[0] && b.sizes[1] == c.sizes[1] &&
                        a.sizes[1] == b.sizes[0],
                    "gemm shapes do not agree");
  NPU_KERNEL_ASSERT(gemm_supports(a.dtype, b.dtype, c.dtype), "gemm dtypes");
  if (c.sizes[0] == 0 || c.sizes[1] == 0) return;
  if (a.sizes[1] == 0) {
    detail::gemm::scale_c(c, beta);
    return;
  }
  if (c.dtype == DType::Float64) detail::gemm::gemm_typed<double>(c, a, b, alpha, beta);
  else detail::gemm::gemm_typed<float>(c, a, b, alpha, beta);
}

void gemm_batched(const TensorDesc& c, const TensorDesc& a, const TensorDesc& b, double alpha,
                  double beta) {
  NPU_KERNEL_ASSERT(c.ndim == 3 && a.ndim == 3 && b.ndim == 3, "gemm_batched takes 3-D descriptors");
  NPU_KERNEL_ASSERT(a.sizes[0] == c.sizes[0] && b.sizes[0] == c.sizes[0], "batch sizes differ");
  const int64_t batch = c.sizes[0];
  auto slice = [](const TensorDesc& t, int64_t i) {
    TensorDesc s;
    s.data = static_cast<char*>(t.data) + i * t.strides[0] * static_cast<int64_t>(dtype_size(t.dtype));
    s.dtype = t.dtype;
    s.ndim = 2;
    s.sizes[0] = t.sizes[1], s.sizes[1] = t.sizes[2];
    s.strides[0] = t.strides[1], s.strides[1] = t.strides[2];
    return s;
  };
  // Small matrices: one matrix per task (each GEMM then runs single-threaded, since nested
  // parallel_for runs inline). Large ones: one after the other, each using every thread.
  double flops = 2.0 * c.sizes[1] * c.sizes[2] * a.sizes[2];
  int64_t grain = flops >= 4e6 ? batch : 1;
  parallel_for(0, batch, grain, [&](int64_t b0, int64_t b1) {
    for (int64_t i = b0; i < b1; ++i) gemm(slice(c, i), slice(a, i), slice(b, i), alpha, beta);
  });
}

namespace testing {
void set_gemm_isa(const char* isa) {
  detail::gemm::g_force_avx2.store(std::string(isa) == "avx2", std::memory_order_relaxed);
}
}  // namespace testing

}  // namespace npu::kernels
