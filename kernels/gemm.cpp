// GEMM: a packed, cache-blocked driver around the micro-kernels of gemm_microkernels.h.
//
// How it works (the Goto/BLIS scheme, with A as the broadcast operand):
//  - M is cut into row blocks whose A block (all of K, at most 16 MB) is packed once into MR-row
//    panels per K block of KC (a panel holds MR values per k), each panel by the first task
//    that needs it.
//  - The columns are cut into tasks of up to NC columns (and rows too, when there are fewer
//    column blocks than twice the threads). For each K block, a task packs its KC x NC block
//    of B into NR-column panels in its own buffer (<= 768 KB: stays in that core's L2), then
//    for every A panel (kept in L1 across the inner loop) runs the micro-kernel over every B
//    panel. Tasks run all K blocks, so a GEMM has one barrier (the end of its tasks) per row
//    block.
//  - Full tiles of a row-major float/double C are updated in place (C = alpha*AB + beta*C on
//    the first K block, C += alpha*AB after). Edge tiles go through a small tile buffer.
//  - A bfloat16 C of two bfloat16 operands (the AVX512-BF16 path) with K <= 2048 takes all of K
//    as one block: each C tile is final after one micro-kernel call, which rounds it to
//    bfloat16 in registers and stores it (no float workspace; the B block per task is sized for
//    a 1 MB L2 instead).
//  - Other C layouts or dtypes (column-major C is transposed away first, 16-bit C, ...) are
//    computed into a float workspace, so 16-bit outputs are rounded exactly once; each task
//    converts its own block of the workspace into C right after its last K block (while the
//    block is still in cache, and with no extra pass over C or barrier between the threads).
//  - 16-bit inputs: two BFloat16 operands on a CPU with AVX512-BF16 are packed as bfloat16
//    pairs of k for the vdpbf16ps micro-kernel (gemm_bf16_avx512.cpp): half the bytes packed
//    and moved, twice the multiply-adds per instruction, float32 accumulation. Otherwise
//    (Float16: this x86 has no fp16 arithmetic short of AVX512-FP16; BFloat16 without the
//    extension; mixed dtypes) packing converts to float with F16C / shifts, 8 values at a
//    time, and the float micro-kernels run. The instruction set is chosen at run time.
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "convert.h"
#include "dtype_traits.h"
#include "gemm_bf16.h"
#include "gemm_implicit.h"
#include "gemm_microkernels.h"
#include "npu/kernels/gemm_small.h"
#include "npu/kernels/matmul.h"
#include "npu/kernels/thread_pool.h"
#include "scratch.h"  // scratch(slot, n): the packing buffers (kGemm* slots)
#include "vec_math.h"

namespace npu::kernels {
namespace detail::gemm {

// EDX of CPUID leaf 7, subleaf 0: the AMX feature bits (22: AMX-BF16, 24: AMX-TILE).
unsigned cpuid7_edx() {
  unsigned eax, ebx, ecx, edx;
  __asm__("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(7), "c"(0));
  return edx;
}

bool amx_bf16_usable() {
  static const bool usable = [] {
    const unsigned edx = cpuid7_edx();
    const bool amx_bf16 = (edx >> 22) & 1, amx_tile = (edx >> 24) & 1;
    if (!amx_bf16 || !amx_tile) return false;
    // Linux hands out the 8 KB tile state only on request (arch_prctl ARCH_REQ_XCOMP_PERM for
    // XFEATURE_XTILEDATA), once per process for all its threads.
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return usable;
}


namespace {

// The most capable instruction set that tests allow (set_gemm_isa): 3 = everything the CPU
// has, 2 = no AMX, 1 = AVX-512 without BF16, 0 = AVX2 (the portable baseline of this library).
std::atomic<int> g_isa_cap{3};
// testing::set_gemm_private_a_panels: every task packs its own A panels.
std::atomic<bool> g_private_a_panels{false};

bool use_avx512() {
  static const bool supported = has_avx512();  // NPU_AVX512 code needs F, DQ, VL and BW
  return supported && g_isa_cap.load(std::memory_order_relaxed) >= 1;
}

bool use_avx512_bf16() {
  static const bool supported =
      __builtin_cpu_supports("avx512f") != 0 && __builtin_cpu_supports("avx512bf16") != 0;
  return supported && g_isa_cap.load(std::memory_order_relaxed) >= 2;
}

// AMX for two bfloat16 operands, from this size on (a smaller GEMM is mostly packing).
bool use_amx(int64_t M, int64_t N, int64_t K) {
  return g_isa_cap.load(std::memory_order_relaxed) >= 3 && M >= 32 && N >= 32 && K >= 32 &&
         amx_bf16_usable();
}

// Packed operand type P: T itself, or uint16_t for bfloat16 pairs of k (kStep = 2 k values per
// micro-kernel step).
template <class P>
inline constexpr int kStep = std::is_same_v<P, uint16_t> ? 2 : 1;

template <class T, class P>
struct Kernel {
  int mr, nr;
  void (*fn)(int64_t, const P*, const P*, T*, int64_t, T, T);
};

template <class T, class P>
Kernel<T, P> select_kernel() {
  if constexpr (std::is_same_v<P, uint16_t>) {
    return {kBf16MR, kBf16NR, &kernel_avx512bf16_14x32};
  } else if constexpr (std::is_same_v<T, float>) {
    if (use_avx512()) return {14, 32, &kernel_avx512_f32_14x32};
    return {6, 16, &kernel_avx2_f32_6x16};
  } else {
    if (use_avx512()) return {14, 16, &kernel_avx512_f64_14x16};
    return {6, 8, &kernel_avx2_f64_6x8};
  }
}

// The most rows of A for which the driver reads a row-major float32 B in place rather than
// packing it: a tall A reuses each B panel over many A panels, and a packed panel is contiguous
// where one in place is a strided column block (its rows ldb apart, which the L2 streamer
// follows less well): [4096 x 128] @ [128 x 128] measured 2-4% faster with B packed (one
// thread), while a short A (a head's [64 x 64] @ [64 x 32]) gains the packing's time.
constexpr int64_t kBInPlaceMaxRows = 512;

// What an 8-row panel costs per row against a 14-row one, as num / den. The 14-row kernel does
// 28 FMAs per 16 loads, the 8-row one 16 per 10; how much that matters depends on the core's
// load ports. Sapphire Rapids (three load ports; its cores are the ones with AMX): the 14-row
// kernel measured 5-10% faster per row (one thread, [4096 x 128..352] row blocks): 27 / 25.
// Ice Lake server (two load ports, no AMX): 1.35-1.44x on L1-resident panels (69-71 against
// 48-53 GFMA/s, K 256 and 512): 4 / 3. CPUID names the core's generation, not the OS's grant
// of AMX state, so this does not ask for the tile permission.
struct RowCost {
  int num, den;
};
RowCost eight_row_cost() {
  static const RowCost cost = (cpuid7_edx() >> 24) & 1 ? RowCost{27, 25} : RowCost{4, 3};
  return cost;
}

// The float32 kernel for an M x N product: 8-row panels where 14-row ones pad enough rows to
// cost more (eight_row_cost: convolutions' 8 or 16 output channels, which 14-row panels pad by
// up to 75%; on Sapphire Rapids also 32, 64 or 128 rows, which a two-load-port core runs
// faster on 14-row panels of 42, 70 or 140), 16-column panels for an N of at most 16 (a
// classifier's 10 outputs: 32-column panels would be two thirds padding). Each C value sums its
// k in the same order with any of them, so the choice never changes a result.
Kernel<float, float> select_float_kernel(int64_t M, int64_t N) {
  Kernel<float, float> kern = select_kernel<float, float>();
  if (kern.mr != 14) return kern;  // AVX2
  const bool narrow = N <= 16;
  const RowCost cost = eight_row_cost();
  if ((M + 7) / 8 * 8 * cost.num < (M + 13) / 14 * 14 * cost.den) {
    return narrow ? Kernel<float, float>{8, 16, &kernel_avx512_f32_8x16}
                  : Kernel<float, float>{8, 32, &kernel_avx512_f32_8x32};
  }
  return narrow ? Kernel<float, float>{14, 16, &kernel_avx512_f32_14x16} : kern;
}

// The panel width of B for a float32 GEMM with N columns (PackedB packs to it).
int float_nr(int64_t N) { return select_float_kernel(14, N).nr; }

// v + s * b with the product rounded first, as the vector output stage computes it (this file
// is compiled with FMA, and the compiler would contract the plain expression, or a product
// that computed v, into one). s = 1 adds b alone.
inline float add_scaled(float v, float s, float b) {
  return _mm_cvtss_f32(_mm_add_ss(_mm_set_ss(v), _mm_mul_ss(_mm_set_ss(s), _mm_set_ss(b))));
}

// Block sizes (elements of k / columns). KC * NR * sizeof(P) of B plus an A panel fit L1; a
// KC x NC B block fits L2 (2 MB per core on the target Xeon, ~1 MB on older ones). bfloat16
// panels take twice the k values in the same bytes.
template <class P>
struct Blocking {
  static constexpr int64_t kKC = std::is_same_v<P, double> ? 256 : std::is_same_v<P, float> ? 512 : 768;
  static constexpr int64_t kNC = std::is_same_v<P, double> ? 384 : 512;
  static constexpr int64_t kPackedA = (16 << 20) / sizeof(P);  // 16 MB of packed A at most
};

// The float32 K block for a depth of K: at most kKC, but K is cut into equal blocks (a multiple
// of 8) rather than full blocks and a short remainder, and a K of up to 1.25 kKC stays one
// block (3x3 convolutions over 64 channels: K = 576, which 512 + 64 split into a second pass
// over C for 64 values of k). A 14-row A panel of 640 k is 35 KB: still in L1.
int64_t float_kc(int64_t K) {
  constexpr int64_t kc = 512, one_block_max = kc + kc / 4;
  if (K <= one_block_max) return std::max<int64_t>(K, 1);
  const int64_t blocks = (K + kc - 1) / kc;
  return ((K + blocks - 1) / blocks + 7) / 8 * 8;
}

// Source matrix: element (r, c) at data[r * rs + c * cs], of storage type S. hf32: the cube
// reads it in HF32 (CubeMath::HF32): its packed float panels are rounded once packed.
struct MatRef {
  const void* data;
  DType dtype;
  int64_t rs, cs;
  bool hf32 = false;
  // The packed float panels are multiplied by 2^scale_exp (choose_subnormal_scaling below);
  // the driver divides the product by it again through alpha.
  int scale_exp = 0;
};

// Below this many flops a GEMM is not worth waking the pool's workers for.
constexpr double kThreadedFlops = 4e6;
// Below this many bytes of B a few-row GEMM (a GEMV: B read once) stays on one thread.
constexpr double kThreadedBytes = 256 * 1024;

// Rounds n packed floats to HF32 in place (round_to_hf32, npu/kernels/matmul.h). One extra pass
// over a panel that was just written, so it is still in cache; zero padding stays zero.
void round_panel_to_hf32(float* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) p[i] = round_to_hf32(p[i]);
}

// ---- subnormal operands ----------------------------------------------------------------------
// A multiply-add with a subnormal operand or result takes a microcode assist on x86 (~150
// cycles): a float32 GEMM whose A is 50% subnormal runs ~85x slower (a [4096 x 256] @
// [256 x 128] product: 186 ms against 2.2 ms, one thread). Such operands are common: the
// gradient of a saturated softmax or cross-entropy (probabilities below 2^-126, divided by the
// batch) feeds the output layer's two backward products. A GPU handles subnormals at full
// speed; here an operand found to hold them is packed multiplied by 2^24 (every subnormal
// becomes normal: the smallest is 2^-149), and alpha carries the 2^-24 back, applied to each K
// block's sum. Scaling by a power of two is exact, so each product and sum is the one IEEE
// arithmetic would give, or a more precise one where IEEE would have rounded a subnormal
// intermediate; a result that is itself subnormal is rounded once, as IEEE rounds it.

// The power of two a subnormal operand is scaled by.
constexpr int kSubnormalScaleExp = 24;
// testing::set_gemm_subnormal_scaling / gemm_subnormal_scaled_calls.
std::atomic<bool> g_subnormal_scaling{true};
std::atomic<int64_t> g_subnormal_scaled_calls{0};

// What a scan of float32 values found: the largest magnitude's bits (a NaN's exceed an Inf's,
// 0x7f800000, which exceed every finite value's: the integer maximum is NaN-safe), and whether
// a nonzero value below 2^-126 (a subnormal) was seen.
struct Magnitudes {
  uint32_t max_bits = 0;
  bool subnormal = false;
  void add(const Magnitudes& o) {
    max_bits = std::max(max_bits, o.max_bits);
    subnormal = subnormal || o.subnormal;
  }
};

// Scans n float32 values at p (p[i * stride]).
Magnitudes scan_magnitudes(const float* p, int64_t n, int64_t stride) {
  Magnitudes m;
  int64_t i = 0;
  if (stride == 1) {
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    const __m256i below_normal = _mm256_set1_epi32(0x007ffffe);  // |x| bits - 1 <= this: subnormal
    const __m256i one = _mm256_set1_epi32(1);
    __m256i mx = _mm256_setzero_si256(), sub = _mm256_setzero_si256();
    for (; i + 8 <= n; i += 8) {
      const __m256i bits = _mm256_and_si256(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)), abs_mask);
      mx = _mm256_max_epu32(mx, bits);
      // bits - 1 <= 0x007ffffe (unsigned) exactly for 0 < bits < 0x00800000.
      const __m256i d = _mm256_sub_epi32(bits, one);
      sub = _mm256_or_si256(sub, _mm256_cmpeq_epi32(_mm256_min_epu32(d, below_normal), d));
    }
    alignas(32) uint32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), mx);
    for (uint32_t v : lanes) m.max_bits = std::max(m.max_bits, v);
    m.subnormal = !_mm256_testz_si256(sub, sub);
  }
  for (; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, p + i * stride, 4);
    bits &= 0x7fffffffu;
    m.max_bits = std::max(m.max_bits, bits);
    m.subnormal = m.subnormal || (bits != 0 && bits < 0x00800000u);
  }
  return m;
}

// Scans the float32 matrix m (rows x cols) along its contiguous dimension, every `every`-th line
// of it (1: all of it).
Magnitudes scan_matrix(const MatRef& m, int64_t rows, int64_t cols, int64_t every) {
  const float* d = static_cast<const float*>(m.data);
  const bool by_rows = m.cs == 1 || m.rs != 1;  // lines are rows (else columns: rs == 1)
  const int64_t lines = by_rows ? rows : cols, len = by_rows ? cols : rows;
  const int64_t line_stride = by_rows ? m.rs : m.cs, step = by_rows ? m.cs : m.rs;
  Magnitudes out;
  for (int64_t l = 0; l < lines; l += every) {
    out.add(scan_magnitudes(d + l * line_stride, len, step));
  }
  return out;
}

// Multiplies n packed floats by 2^e (0 < e <= kSubnormalScaleExp) in place, exactly, with no
// floating-point operation on a subnormal (a multiply by 2^e would take the assist once per
// vector holding one): a normal value's exponent field grows by e (choose_subnormal_scaling
// made sure it stays below 2^127); a subnormal's magnitude is its mantissa times 2^-149, so it
// becomes float(mantissa) * 2^(e - 149), a product of two normal values. Zeros stay zeros.
void scale_panel(float* p, int64_t n, int e) {
  const float sub_scale = std::ldexp(1.0f, e - 149);
  int64_t i = 0;
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), exp_step = _mm256_set1_epi32(e << 23);
  const __m256i below_min_normal = _mm256_set1_epi32(0x007fffff);
  const __m256 s = _mm256_set1_ps(sub_scale);
  for (; i + 8 <= n; i += 8) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i));
    const __m256i mag = _mm256_and_si256(bits, abs_mask);
    const __m256i sign = _mm256_andnot_si256(abs_mask, bits);
    const __m256i normal = _mm256_cmpgt_epi32(mag, below_min_normal);
    const __m256i small = _mm256_or_si256(
        sign, _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(mag), s)));
    const __m256i out = _mm256_blendv_epi8(small, _mm256_add_epi32(bits, exp_step), normal);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + i), out);
  }
  for (; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, p + i, 4);
    const uint32_t mag = bits & 0x7fffffffu;
    if (mag >= 0x00800000u) {
      bits += uint32_t(e) << 23;
    } else {
      const float v = float(int32_t(mag)) * sub_scale;
      uint32_t vb;
      std::memcpy(&vb, &v, 4);
      bits = (bits & 0x80000000u) | vb;
    }
    std::memcpy(p + i, &bits, 4);
  }
}

// Below this many multiply-adds a GEMM is not sampled for subnormals (its sample would cost
// more than the assists it could save).
constexpr double kSubnormalSampleMinFmas = 1 << 20;
// The sample reads every kSubnormalSampleEvery-th line of an operand (1/16: 0.3-1% of a
// [4096 x 256] @ [256 x 128] product's time when none is found).
constexpr int64_t kSubnormalSampleEvery = 16;

// Sets a.scale_exp / b.scale_exp for a float32 GEMM alpha (M x K) @ (K x N) whose operands
// hold subnormals, found in a sample of their lines; then both operands are scanned in full for
// their largest magnitude, and the scaling is taken only if both are finite, each scaled
// operand stays below 2^127, no partial sum of the scaled product can overflow (K * max|A| *
// 2^ea * max|B| * 2^eb < 2^125), and alpha * 2^-(ea + eb) is still a normal number (a tiny
// alpha would lose its bits there). Returns whether it set any.
bool choose_subnormal_scaling(int64_t M, int64_t N, int64_t K, float alpha, MatRef& a, MatRef& b) {
  if (!g_subnormal_scaling.load(std::memory_order_relaxed) || alpha == 0.0f) return false;
  if (a.dtype != DType::Float32 || b.dtype != DType::Float32 || a.hf32 || b.hf32) return false;
  if (double(M) * N * K < kSubnormalSampleMinFmas) return false;
  const bool sub_a = scan_matrix(a, M, K, kSubnormalSampleEvery).subnormal;
  const bool sub_b = scan_matrix(b, K, N, kSubnormalSampleEvery).subnormal;
  if (!sub_a && !sub_b) return false;
  const uint32_t max_a = scan_matrix(a, M, K, 1).max_bits, max_b = scan_matrix(b, K, N, 1).max_bits;
  if (max_a >= 0x7f800000u || max_b >= 0x7f800000u) return false;  // Inf or NaN: keep IEEE's
  auto as_float = [](uint32_t bits) { float f; std::memcpy(&f, &bits, 4); return double(f); };
  const int ea = sub_a ? kSubnormalScaleExp : 0, eb = sub_b ? kSubnormalScaleExp : 0;
  const double scaled_a = std::ldexp(as_float(max_a), ea);
  const double scaled_b = std::ldexp(as_float(max_b), eb);
  if (!(scaled_a < std::ldexp(1.0, 127) && scaled_b < std::ldexp(1.0, 127))) return false;
  if (!(double(K) * scaled_a * scaled_b < std::ldexp(1.0, 125))) return false;
  if (!(std::fabs(std::ldexp(double(alpha), -(ea + eb))) >= double(FLT_MIN))) return false;
  a.scale_exp = ea;
  b.scale_exp = eb;
  g_subnormal_scaled_calls.fetch_add(1, std::memory_order_relaxed);
  return true;
}

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

// ---- packing into float / double panels -----------------------------------------------------

// Eight consecutive values of a float-like storage type, as floats.
template <class S>
inline __m256 load8(const S* p) {
  if constexpr (std::is_same_v<S, float>) {
    return _mm256_loadu_ps(p);
  } else if constexpr (std::is_same_v<S, Half>) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {
    static_assert(std::is_same_v<S, BFloat16>);
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
}
template <class S>
inline constexpr bool kVectorLoad =
    std::is_same_v<S, float> || std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>;

// dst[0, n) = src[0, n) as floats.
template <class S>
inline void convert_row(const S* src, float* dst, int64_t n) {
  int64_t j = 0;
  if constexpr (kVectorLoad<S> && !std::is_same_v<S, float>) {
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(dst + j, load8(src + j));
  }
  for (; j < n; ++j) dst[j] = cast_value<float>(src[j]);
}

// `count` source rows (row i at src + i * stride, contiguous along k) become a panel with
// `width` values per k: d[k * width + i]; rows count..width are zero. 8 k at a time, rows in
// groups of 8 transposed in registers, so loads and stores are contiguous vectors. Packs a
// row-major A (rows of A) and a column-major B (columns of B).
template <class S>
void pack_transposed(const S* src, int64_t stride, int count, int64_t kc, int width, float* d) {
  int64_t k = 0;
  for (; k + 8 <= kc; k += 8) {
    for (int g = 0; g < width; g += 8) {
      const int lanes = std::min(8, width - g);
      __m256 r[8];
      for (int i = 0; i < 8; ++i) {
        r[i] = (i < lanes && g + i < count) ? load8(src + (g + i) * stride + k)
                                            : _mm256_setzero_ps();
      }
      transpose8x8(r);
      const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes),
                                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
      for (int j = 0; j < 8; ++j) _mm256_maskstore_ps(d + (k + j) * width + g, mask, r[j]);
    }
  }
  for (; k < kc; ++k) {
    for (int i = 0; i < width; ++i) {
      d[k * width + i] = i < count ? cast_value<float>(src[i * stride + k]) : 0.0f;
    }
  }
}

// Float32 panels whose `width` values of one k are contiguous in the source: k row r of the
// panel is src[r * ld + 0 .. count) followed by zeros up to `width` (<= 32). A column-major A
// (the weight gradient's x^T of a Linear) and a row-major B take it: one masked vector load and
// store per 16 values, where the generic loops moved a value (or called memcpy) at a time
// (packing a column-major A was a third of a [128 x 4096] @ [4096 x 128] product).
constexpr int64_t kPrefetchRows = 64;
NPU_AVX512 void pack_contiguous_f32_avx512(const float* src, int64_t ld, int count, int64_t kc,
                                           int width, float* d) {
  const __mmask16 load0 = static_cast<__mmask16>(count >= 16 ? 0xFFFF : (1u << count) - 1);
  const __mmask16 load1 =
      static_cast<__mmask16>(count >= 32 ? 0xFFFF : count <= 16 ? 0 : (1u << (count - 16)) - 1);
  const __mmask16 store0 = static_cast<__mmask16>(width >= 16 ? 0xFFFF : (1u << width) - 1);
  const __mmask16 store1 = static_cast<__mmask16>(
      width >= 32 ? 0xFFFF : width <= 16 ? 0 : (1u << (width - 16)) - 1);
  for (int64_t k = 0; k < kc; ++k) {
    const float* s = src + k * ld;
    float* o = d + k * width;
    // Rows ld apart leave the hardware prefetchers a few lines per page (ld = 128 floats: 8):
    // fetch a few rows ahead (prefetches past the source's end are dropped, never fault).
    _mm_prefetch(reinterpret_cast<const char*>(s + kPrefetchRows * ld), _MM_HINT_T0);
    if (width + (reinterpret_cast<uintptr_t>(s) & 63) / 4 > 16) {
      _mm_prefetch(reinterpret_cast<const char*>(s + kPrefetchRows * ld + 16), _MM_HINT_T0);
    }
    _mm512_mask_storeu_ps(o, store0, _mm512_maskz_loadu_ps(load0, s));
    if (width > 16) _mm512_mask_storeu_ps(o + 16, store1, _mm512_maskz_loadu_ps(load1, s + 16));
  }
}

// The AVX2 twin, 8 values per masked load / store (widths up to 16: the AVX2 kernels' 6 x 16).
void pack_contiguous_f32_avx2(const float* src, int64_t ld, int count, int64_t kc, int width,
                              float* d) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i load[2], store[2];
  for (int v = 0; v < 2; ++v) {
    load[v] = _mm256_cmpgt_epi32(_mm256_set1_epi32(count - 8 * v), lane);
    store[v] = _mm256_cmpgt_epi32(_mm256_set1_epi32(width - 8 * v), lane);
  }
  for (int64_t k = 0; k < kc; ++k) {
    const float* s = src + k * ld;
    float* o = d + k * width;
    _mm_prefetch(reinterpret_cast<const char*>(s + kPrefetchRows * ld), _MM_HINT_T0);
    _mm256_maskstore_ps(o, store[0], _mm256_maskload_ps(s, load[0]));
    if (width > 8) _mm256_maskstore_ps(o + 8, store[1], _mm256_maskload_ps(s + 8, load[1]));
  }
}

// Whether pack_contiguous_f32 takes panels of this width.
inline bool contiguous_f32_packable(int width) { return width <= (use_avx512() ? 32 : 16); }

void pack_contiguous_f32(const float* src, int64_t ld, int count, int64_t kc, int width,
                         float* d) {
  if (use_avx512()) pack_contiguous_f32_avx512(src, ld, count, kc, width, d);
  else pack_contiguous_f32_avx2(src, ld, count, kc, width, d);
}

// Packs rows [0, mc) x cols [0, kc) of A (already offset to the block) into MR-row panels
// [first_panel, last_panel); rows past mc are zero.
template <class T, class S>
void pack_a(const S* a, int64_t rs, int64_t cs, int64_t mc, int64_t kc, int mr,
            int64_t first_panel, int64_t last_panel, T* dst) {
  for (int64_t p = first_panel; p < last_panel; ++p) {
    T* d = dst + p * kc * mr;
    int64_t r0 = p * mr;
    int rows = static_cast<int>(std::min<int64_t>(mr, mc - r0));
    if constexpr (std::is_same_v<T, float> && kVectorLoad<S>) {
      if (cs == 1) {
        pack_transposed(a + r0 * rs, rs, rows, kc, mr, d);
        continue;
      }
    }
    if constexpr (std::is_same_v<T, float> && std::is_same_v<S, float>) {
      if (cs != 1 && rs == 1 && contiguous_f32_packable(mr)) {  // column-major A
        pack_contiguous_f32(a + r0, cs, rows, kc, mr, d);
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
        if constexpr (std::is_same_v<T, float>) {
          convert_row(src, d + k * mr, rows);
        } else {
          for (int i = 0; i < rows; ++i) d[k * mr + i] = cast_value<T>(src[i]);
        }
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
    if constexpr (std::is_same_v<T, float> && kVectorLoad<S>) {
      if (cs != 1 && rs == 1) {  // column-major B (x @ W.T): columns contiguous along k
        pack_transposed(b + c0 * cs, cs, cols, kc, nr, d);
        continue;
      }
    }
    if constexpr (std::is_same_v<T, float> && std::is_same_v<S, float>) {
      if (cs == 1 && contiguous_f32_packable(nr)) {  // row-major B
        pack_contiguous_f32(b + c0, rs, cols, kc, nr, d);
        continue;
      }
    }
    if (cols < nr) std::memset(static_cast<void*>(d), 0, sizeof(T) * kc * nr);
    if (cs == 1) {
      for (int64_t k = 0; k < kc; ++k) {
        const S* src = b + k * rs + c0;
        if constexpr (std::is_same_v<S, T>) {
          std::memcpy(d + k * nr, src, sizeof(T) * cols);
        } else if constexpr (std::is_same_v<T, float>) {
          convert_row(src, d + k * nr, cols);
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

// ---- packing into bfloat16 pair panels (the AVX512-BF16 path) --------------------------------
// A panel of width w holds, for each pair p of k, w 32-bit words (x[i][2p], x[i][2p+1]); an odd
// last k is paired with zero. kc here is the block's k count; a panel holds round_up(kc, 2) * w
// values.

inline uint32_t bf16_word(uint16_t lo, uint16_t hi) { return uint32_t(lo) | uint32_t(hi) << 16; }

// `count` source rows contiguous along k (row i at src + i * stride) -> pair panel of `width`.
// 8 pairs (16 k) at a time: the pairs are 32-bit words, so the float 8x8 transpose moves them.
void pack_pairs_transposed(const uint16_t* src, int64_t stride, int count, int64_t kc, int width,
                           uint32_t* d) {
  const int64_t full_pairs = kc / 2;
  int64_t p = 0;
  for (; p + 8 <= full_pairs; p += 8) {
    for (int g = 0; g < width; g += 8) {
      const int lanes = std::min(8, width - g);
      __m256 r[8];
      for (int i = 0; i < 8; ++i) {
        r[i] = (i < lanes && g + i < count)
                   ? _mm256_castsi256_ps(_mm256_loadu_si256(
                         reinterpret_cast<const __m256i*>(src + (g + i) * stride + 2 * p)))
                   : _mm256_setzero_ps();
      }
      transpose8x8(r);
      const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes),
                                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
      for (int j = 0; j < 8; ++j) {
        _mm256_maskstore_ps(reinterpret_cast<float*>(d + (p + j) * width + g), mask, r[j]);
      }
    }
  }
  for (; p < (kc + 1) / 2; ++p) {
    for (int i = 0; i < width; ++i) {
      const uint16_t* s = src + i * stride + 2 * p;
      d[p * width + i] = i < count ? bf16_word(s[0], 2 * p + 1 < kc ? s[1] : 0) : 0;
    }
  }
}

// Two source rows x0 (k = 2p) and x1 (k = 2p + 1, null: zero), contiguous along the panel's
// width, interleaved into n words; words n..width are zero.
void interleave_pair(const uint16_t* x0, const uint16_t* x1, int n, int width, uint32_t* d) {
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m128i v0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x0 + j));
    const __m128i v1 = x1 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(x1 + j))
                          : _mm_setzero_si128();
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + j), _mm_unpacklo_epi16(v0, v1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + j + 4), _mm_unpackhi_epi16(v0, v1));
  }
  for (; j < n; ++j) d[j] = bf16_word(x0[j], x1 ? x1[j] : 0);
  for (; j < width; ++j) d[j] = 0;
}

// Any layout: element (i, k) at src[i * is + k * ks].
void pack_pairs_strided(const uint16_t* src, int64_t is, int64_t ks, int count, int64_t kc,
                        int width, uint32_t* d) {
  for (int64_t p = 0; p < (kc + 1) / 2; ++p) {
    for (int i = 0; i < width; ++i) {
      if (i >= count) {
        d[p * width + i] = 0;
        continue;
      }
      const uint16_t* s = src + i * is + 2 * p * ks;
      d[p * width + i] = bf16_word(s[0], 2 * p + 1 < kc ? s[ks] : 0);
    }
  }
}

// Rows [0, mc) x k [0, kc) of a BFloat16 A into pair panels [p0, p1).
void pack_a_pairs(const uint16_t* a, int64_t rs, int64_t cs, int64_t mc, int64_t kc, int mr,
                  int64_t p0, int64_t p1, uint16_t* dst) {
  const int64_t kcp = (kc + 1) / 2 * 2;
  for (int64_t p = p0; p < p1; ++p) {
    uint32_t* d = reinterpret_cast<uint32_t*>(dst + p * kcp * mr);
    const uint16_t* src = a + p * mr * rs;
    const int rows = static_cast<int>(std::min<int64_t>(mr, mc - p * mr));
    if (cs == 1) {
      pack_pairs_transposed(src, rs, rows, kc, mr, d);
    } else if (rs == 1) {  // column-major A: k rows of mr contiguous values
      for (int64_t q = 0; q < kcp / 2; ++q) {
        interleave_pair(src + 2 * q * cs, 2 * q + 1 < kc ? src + (2 * q + 1) * cs : nullptr, rows,
                        mr, d + q * mr);
      }
    } else {
      pack_pairs_strided(src, rs, cs, rows, kc, mr, d);
    }
  }
}

// k [0, kc) x cols [0, nc) of a BFloat16 B into pair panels of nr columns.
void pack_b_pairs(const uint16_t* b, int64_t rs, int64_t cs, int64_t kc, int64_t nc, int nr,
                  uint16_t* dst) {
  const int64_t kcp = (kc + 1) / 2 * 2;
  for (int64_t q = 0; q * nr < nc; ++q) {
    uint32_t* d = reinterpret_cast<uint32_t*>(dst + q * kcp * nr);
    const uint16_t* src = b + q * nr * cs;
    const int cols = static_cast<int>(std::min<int64_t>(nr, nc - q * nr));
    if (cs == 1) {  // row-major B: interleave rows 2p and 2p + 1
      for (int64_t p = 0; p < kcp / 2; ++p) {
        interleave_pair(src + 2 * p * rs, 2 * p + 1 < kc ? src + (2 * p + 1) * rs : nullptr, cols,
                        nr, d + p * nr);
      }
    } else if (rs == 1) {  // column-major B (x @ W.T): each column's pairs are words already
      pack_pairs_transposed(src, cs, cols, kc, nr, d);
    } else {
      pack_pairs_strided(src, cs, rs, cols, kc, nr, d);
    }
  }
}

// A bfloat16 GEMM on the tile unit: A copied into zero-padded rows, B into 32-column pair
// panels (pack_b_pairs, with K padded to the 32-value tile row), then gemm_amx_bf16_packed.
void gemm_amx_bf16(int64_t M, int64_t N, int64_t K, float alpha, const MatRef& a, const MatRef& b,
                   float beta, float* c, int64_t ldc, const AmxBlockDone* done) {
  constexpr int64_t kBlock = 32, kTileK = 32;
  const int64_t Mp = (M + kBlock - 1) / kBlock * kBlock;
  const int64_t Np = (N + kBlock - 1) / kBlock * kBlock;
  const int64_t Kp = (K + kTileK - 1) / kTileK * kTileK;
  const int64_t m_blocks = Mp / kBlock, n_blocks = Np / kBlock;
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  auto zeroed = [](size_t bytes) {
    bytes = std::max<size_t>(64, (bytes + 63) / 64 * 64);
    void* p = std::aligned_alloc(64, bytes);
    NPU_KERNEL_ASSERT(p != nullptr, "out of host memory for AMX GEMM packing buffers");
    std::memset(p, 0, bytes);
    return std::unique_ptr<void, Free>(p);
  };
  const auto a_buf = zeroed(static_cast<size_t>(Mp * Kp) * sizeof(uint16_t));
  const auto b_buf = zeroed(static_cast<size_t>(Np * Kp / 2) * sizeof(uint32_t));
  uint16_t* const A = static_cast<uint16_t*>(a_buf.get());
  uint32_t* const B = static_cast<uint32_t*>(b_buf.get());
  const uint16_t* const as = static_cast<const uint16_t*>(a.data);
  const uint16_t* const bs = static_cast<const uint16_t*>(b.data);
  parallel_for(0, m_blocks + n_blocks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      if (t < m_blocks) {  // rows of A
        for (int64_t i = t * kBlock; i < std::min(M, (t + 1) * kBlock); ++i) {
          const uint16_t* src = as + i * a.rs;
          uint16_t* row = A + i * Kp;
          if (a.cs == 1) {
            std::memcpy(row, src, K * sizeof(uint16_t));
          } else {
            for (int64_t k = 0; k < K; ++k) row[k] = src[k * a.cs];
          }
        }
      } else {  // one 32-column panel of B
        const int64_t j0 = (t - m_blocks) * kBlock;
        pack_b_pairs(bs + j0 * b.cs, b.rs, b.cs, K, std::min(kBlock, N - j0), kBlock,
                     reinterpret_cast<uint16_t*>(B + j0 * (Kp / 2)));
      }
    }
  });
  gemm_amx_bf16_packed(M, N, Kp, alpha, A, B, beta, c, ldc, done);
}

template <class P>
void pack_a_any(const MatRef& a, int64_t r0, int64_t k0, int64_t mc, int64_t kc, int mr,
                int64_t p0, int64_t p1, P* dst) {
  if constexpr (std::is_same_v<P, uint16_t>) {
    NPU_KERNEL_ASSERT(a.dtype == DType::BFloat16, "bfloat16 GEMM path given another dtype");
    const uint16_t* base = static_cast<const uint16_t*>(a.data) + r0 * a.rs + k0 * a.cs;
    pack_a_pairs(base, a.rs, a.cs, mc, kc, mr, p0, p1, dst);
  } else {
    dispatch_storage(a.dtype, [&]<class S>() {
      if constexpr (std::is_floating_point_v<compute_t<S>>) {
        const S* base = static_cast<const S*>(a.data) + r0 * a.rs + k0 * a.cs;
        pack_a<P>(base, a.rs, a.cs, mc, kc, mr, p0, p1, dst);
        if constexpr (std::is_same_v<P, float>) {
          if (a.hf32) round_panel_to_hf32(dst + p0 * kc * mr, (p1 - p0) * kc * mr);
          if (a.scale_exp) scale_panel(dst + p0 * kc * mr, (p1 - p0) * kc * mr, a.scale_exp);
        }
      } else {
        NPU_KERNEL_ASSERT(false, "integer GEMM operands");
      }
    });
  }
}

template <class P>
void pack_b_any(const MatRef& b, int64_t k0, int64_t c0, int64_t kc, int64_t nc, int nr, P* dst) {
  if constexpr (std::is_same_v<P, uint16_t>) {
    NPU_KERNEL_ASSERT(b.dtype == DType::BFloat16, "bfloat16 GEMM path given another dtype");
    const uint16_t* base = static_cast<const uint16_t*>(b.data) + k0 * b.rs + c0 * b.cs;
    pack_b_pairs(base, b.rs, b.cs, kc, nc, nr, dst);
  } else {
    dispatch_storage(b.dtype, [&]<class S>() {
      if constexpr (std::is_floating_point_v<compute_t<S>>) {
        const S* base = static_cast<const S*>(b.data) + k0 * b.rs + c0 * b.cs;
        pack_b<P>(base, b.rs, b.cs, kc, nc, nr, dst);
        if constexpr (std::is_same_v<P, float>) {
          if (b.hf32) round_panel_to_hf32(dst, (nc + nr - 1) / nr * nr * kc);
          if (b.scale_exp) scale_panel(dst, (nc + nr - 1) / nr * nr * kc, b.scale_exp);
        }
      } else {
        NPU_KERNEL_ASSERT(false, "integer GEMM operands");
      }
    });
  }
}

// Called by the task that computed C's rows [r0, r1) x columns [c0, c1), once that block is
// final (the workspace path converts it into the real output there).
using BlockDone = std::function<void(int64_t r0, int64_t r1, int64_t c0, int64_t c1)>;

// Largest K a bfloat16-output GEMM takes as one K block (written straight into its bfloat16 C:
// driver<float, uint16_t, uint16_t>); larger K go through the float workspace. An A panel of
// 1024 pairs (56 KB) then outgrows L1, but it stays in L2 next to the B block and the
// micro-kernel keeps its speed (measured: within 2% of an L1-resident panel on Zen 5).
inline constexpr int64_t kBf16DirectMaxK = 2048;
// The bytes of packed B a task keeps in L2 on that path (half of a 1 MB L2, the smallest of the
// AVX512-BF16 CPUs: Zen 4 / Zen 5 have 1 MB per core, Sapphire Rapids 2 MB).
inline constexpr int64_t kBf16DirectBBytes = 512 << 10;

// An edge tile (fewer than MR rows or NR columns) of a product with a fused output stage and
// beta = 0 (K in one block: the offline engine's Linear layers), through the full tile's vector
// stage kernel: on the tile buffer, with the stage's biases copied into padded buffers (the
// kernel reads a whole tile's worth of each), then the tile's rows and columns copied out. The
// same float operations as a full tile's and as the scalar loop it replaces (alpha * tile, then
// post_value), which took 8% of the engine's MLP (a batch of 64 rows: the 14-row kernel's last
// panel holds 8). With beta != 0 (the last of several K blocks) edge tiles keep the scalar loop,
// whose alpha * tile + beta * C the compiler may or may not fuse: the stage must give the bits
// of the same product without it followed by a pass (gemm_test), so both take that loop.
void stage_edge_tile(StageKernelF fn, int64_t kcp, const float* a_panel, const float* b_panel,
                     float* c, int64_t ldc, int rows, int cols, int mr, int nr, float alpha,
                     const GemmOutputStage& st, int64_t row, int64_t col, float* tile) {
  alignas(64) float row_bias[14] = {}, col_bias[32] = {};
  if (st.row_bias) std::copy(st.row_bias + row, st.row_bias + row + rows, row_bias);
  if (st.col_bias) std::copy(st.col_bias + col, st.col_bias + col + cols, col_bias);
  fn(kcp, a_panel, b_panel, tile, nr, alpha, 0.0f,
     OutputStageF{st.row_bias ? row_bias : nullptr, st.col_bias ? col_bias : nullptr, st.col_scale,
                  st.relu});
  for (int i = 0; i < rows; ++i) std::copy(tile + i * nr, tile + i * nr + cols, c + i * ldc);
}

// C[M x N] (row-major, leading dimension ldc, type CT) = alpha * A B + beta * C, with the
// operands packed as P (T itself, or bfloat16 pairs of k). CT is T, or uint16_t for a bfloat16
// C written by the bfloat16 micro-kernel (only with P = uint16_t and K <= kBf16DirectMaxK: the
// whole K is then one block, so each C tile is final after one micro-kernel call and is rounded
// once).
//
// imp (float only): B is packed by imp->pack_b, over imp->batch pairs of B_n / C_n (C_n at
// c + n * imp->c_batch_stride) sharing A's packed panels, and imp->epilogue replaces
// block_done; b is then unused.
//
// packed (float only): B's panels made beforehand (PackedB); b is then unused.
//
// stage (float only): an output stage fused into the stores of C's final values (for imp, its
// own stage is used).
template <class T, class P, class CT = T>
void driver(int64_t M, int64_t N, int64_t K, T alpha, const MatRef& a_arg, const MatRef& b_arg,
            T beta, CT* c, int64_t ldc, const BlockDone* block_done,
            const ImplicitGemm* imp = nullptr, const PackedB* packed = nullptr,
            const GemmOutputStage* stage = nullptr) {
  constexpr bool kBf16C = std::is_same_v<CT, uint16_t>;
  MatRef a = a_arg, b = b_arg;
  // Operands holding subnormals are packed scaled (then never read in place); alpha undoes it.
  if constexpr (std::is_same_v<P, float> && std::is_same_v<T, float>) {
    if (!imp && !packed && choose_subnormal_scaling(M, N, K, alpha, a, b)) {
      alpha = std::ldexp(alpha, -(a.scale_exp + b.scale_exp));
    }
  }
  static_assert(!kBf16C || std::is_same_v<P, uint16_t>, "a bfloat16 C needs the bfloat16 kernel");
  Kernel<T, P> kern = select_kernel<T, P>();
  if constexpr (std::is_same_v<P, float>) kern = select_float_kernel(M, N);
  const int mr = kern.mr, nr = kern.nr;
  // The fused output stage (GemmOutputStage): AVX-512 float kernels apply it in their stores;
  // the AVX2 path and edge tiles apply it to the tile's C values right after.
  const GemmOutputStage no_stage;
  const GemmOutputStage& st = stage ? *stage : imp ? imp->stage : no_stage;
  const bool post = st.active();
  StageKernelF stage_fn = nullptr;
  if constexpr (std::is_same_v<P, float>) {
    if (post && kern.fn == &kernel_avx512_f32_14x32) stage_fn = &kernel_avx512_f32_stage<14, 2>;
    if (post && kern.fn == &kernel_avx512_f32_8x32) stage_fn = &kernel_avx512_f32_stage<8, 2>;
    if (post && kern.fn == &kernel_avx512_f32_14x16) stage_fn = &kernel_avx512_f32_stage<14, 1>;
    if (post && kern.fn == &kernel_avx512_f32_8x16) stage_fn = &kernel_avx512_f32_stage<8, 1>;
  }
  // Operands read in place (kernel_avx512_f32_direct) instead of packed: a float32 A that is
  // row-major or column-major (any of the AVX-512 kernels; 14 row pointers spill a few
  // offsets to the stack, which measured 5-10% faster than the 8-row kernel on [4096 x K] row
  // blocks all the same) for its full panels (a last, partial panel is packed, padded with
  // zero rows); a row-major float32 B whose columns fill whole panels and whose block stays in
  // L2, against an A of at most kBInPlaceMaxRows rows (a Linear's weight gradient, a head's
  // keys).
  // With B read in place, a packed A panel (a partial one, or one of another layout) takes the
  // same kernel with kColA (a packed panel is a column-major A with lda = MR).
  DirectKernelF direct_fn = nullptr, packed_a_fn = nullptr;
  bool b_direct = false;
  if constexpr (std::is_same_v<P, float> && std::is_same_v<T, float>) {
    const bool plain = !imp && !post && !packed && use_avx512() && (mr == 8 || mr == 14) &&
                       !g_private_a_panels.load(std::memory_order_relaxed);
    if (plain) packed_a_fn = direct_kernel_f32(mr, nr, true);
    if (plain && a.dtype == DType::Float32 && !a.hf32 && !a.scale_exp) {
      if (a.rs == 1 && a.cs != 1) {
        direct_fn = packed_a_fn;
      } else if (a.cs == 1) {
        direct_fn = direct_kernel_f32(mr, nr, false);
      }
    }
    b_direct = plain && M <= kBInPlaceMaxRows && b.dtype == DType::Float32 && !b.hf32 &&
               !b.scale_exp &&
               b.cs == 1 && N % nr == 0 &&
               std::min(float_kc(K), K) * std::min<int64_t>(N, Blocking<P>::kNC) * 4 <= (512 << 10);
  }
  auto post_value = [&](int64_t row, int64_t col, T v) -> T {
    if constexpr (std::is_same_v<T, float>) {
      if (st.row_bias) v = add_scaled(v, 1.0f, st.row_bias[row]);
      if (st.col_bias) v = add_scaled(v, st.col_scale, st.col_bias[col]);
      if (st.relu) v = (v > 0.0f || v != v) ? v : 0.0f;
    }
    return v;
  };
  constexpr int step = kStep<P>;
  using B = Blocking<P>;
  static_assert(B::kKC % step == 0, "K blocks must hold whole k pairs");
  const int threads = num_threads();
  const int64_t batch = imp ? imp->batch : 1;
  const bool small = 2.0 * M * N * K * batch < kThreadedFlops;
  // K padded to whole steps: only the last K block can be odd, so this is the packed A's depth.
  const int64_t Kp = (K + step - 1) / step * step;
  int64_t kc_max = B::kKC, nc_max = B::kNC;
  if constexpr (std::is_same_v<P, float>) kc_max = float_kc(K);
  if constexpr (kBf16C) {
    NPU_KERNEL_ASSERT(K <= kBf16DirectMaxK, "bfloat16-output GEMM path given too large a K");
    kc_max = Kp;
    nc_max = std::max<int64_t>(nr, kBf16DirectBBytes / (2 * Kp) / nr * nr);
  }

  // Rows per A block: the block's packed panels (all K) stay in one buffer (<= kPackedA
  // elements), so the tasks below run every K block without a barrier in between.
  const int64_t mc_max = std::max<int64_t>(mr, B::kPackedA / std::max<int64_t>(Kp, 1) / mr * mr);
  for (int64_t ic = 0; ic < M; ic += mc_max) {
    const int64_t mc = std::min(mc_max, M - ic);
    const int64_t m_panels = (mc + mr - 1) / mr;
    const int64_t mpad = m_panels * mr;
    // Panel p of the K block starting at pc lives at ap + pc * mpad + p * kcp * mr.
    P* ap = scratch<P>(kGemmPackedA, static_cast<size_t>(mpad * Kp));
    // A panels are packed on first use, one K block at a time, by the task that needs them
    // first (state per panel and K block; 0: not packed, 1: being packed, 2: packed), so there
    // is no packing pass with a barrier before the tasks: one hand-off between the threads
    // fewer, which on a loaded machine is a wait for a thread to get a core back. A task that
    // finds a block being packed by another thread packs its own copy instead of waiting for
    // it. (Packing all K blocks of a panel at once wrote a deep A's whole packed copy before
    // the second K block was used: [128 x 4096] @ [4096 x 128] then read it back from L3.)
    const int64_t k_blocks = (K + kc_max - 1) / kc_max;
    std::unique_ptr<std::atomic<int>[]> a_state(new std::atomic<int>[m_panels * k_blocks]);
    for (int64_t p = 0; p < m_panels * k_blocks; ++p) {
      a_state[p].store(0, std::memory_order_relaxed);
    }
    auto a_panel_at = [&](int64_t p, int64_t pc, int64_t kc, int64_t kcp) -> const P* {
      const P* shared = ap + pc * mpad + p * kcp * mr;
      std::atomic<int>& state = a_state[pc / kc_max * m_panels + p];
      const bool private_copy = g_private_a_panels.load(std::memory_order_relaxed);
      if (!private_copy && state.load(std::memory_order_acquire) == 2) return shared;
      int expected = private_copy ? -1 : 0;
      if (!private_copy && state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
        pack_a_any<P>(a, ic, pc, mc, kc, mr, p, p + 1, ap + pc * mpad);
        state.store(2, std::memory_order_release);
        return shared;
      }
      if (expected == 2) return shared;
      P* own = scratch<P>(kGemmPanel, static_cast<size_t>(kcp * mr));
      pack_a_any<P>(a, ic + p * mr, pc, mc - p * mr, kc, mr, 0, 1, own);
      return own;
    };

    // Column blocks of at most NC, at least two per thread when N allows (so a thread slowed
    // by other work hands its share to the others), and row splits when columns run out. A
    // batch's items are more such blocks. A single product whose columns fit one block and
    // whose A is the larger operand (M >= N: a Linear's forward and grad_input over many
    // tokens, or its weight gradient) is split by rows only: a column split makes every task
    // read all of A (packed once, then again from L3 by the other tasks), a row split makes
    // each task pack B's smaller block. One thread takes the whole product as one task.
    // But where B is read in place (b_direct: a weight gradient, K = the tokens), every task
    // of a row split streams all of B again from L3: there one task per thread
    // ([352 x 4096] @ [4096 x 128], operands in L3 or memory, two threads: 3215 -> 2900 us).
    const int64_t tasks_wanted = threads == 1 ? 1 : b_direct ? threads : 2 * threads;
    const bool rows_only = batch == 1 && N <= nc_max && M >= N;
    const int64_t splits = rows_only ? 1 : std::max<int64_t>(1, (2 * threads + batch - 1) / batch);
    int64_t nc_target = ((N + splits - 1) / splits + nr - 1) / nr * nr;
    nc_target = std::clamp<int64_t>(nc_target, nr, nc_max);
    const int64_t nj = (N + nc_target - 1) / nc_target;
    const int64_t ni =
        small ? 1
              : std::min<int64_t>(m_panels, rows_only ? tasks_wanted
                                                      : (2 * threads + nj * batch - 1) / (nj * batch));
    const int64_t tasks = nj * ni * batch;

    parallel_for(0, tasks, small ? tasks : 1, [&](int64_t t0, int64_t t1) {
      alignas(64) T tile[14 * 32];
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t item = t / (nj * ni), jb = t % nj, ib = t / nj % ni;
        CT* const c_item = imp ? c + item * imp->c_batch_stride : c;
        const int64_t jc = jb * nc_target;
        const int64_t nc = std::min(nc_target, N - jc);
        const int64_t p_begin = m_panels * ib / ni, p_end = m_panels * (ib + 1) / ni;
        const int64_t n_panels = (nc + nr - 1) / nr;
        P* bp = packed ? nullptr
                       : scratch<P>(kGemmPackedB,
                                    static_cast<size_t>(n_panels * nr * std::min(kc_max, Kp)));
        for (int64_t pc = 0; pc < K; pc += kc_max) {
          const int64_t kc = std::min(kc_max, K - pc);
          const int64_t kcp = (kc + step - 1) / step * step;
          const T beta_eff = pc == 0 ? beta : T(1);
          const bool post_now = post && pc + kc >= K;  // the last K block: C is final
          const P* b_block = bp;
          if constexpr (std::is_same_v<P, float>) {
            if (packed) {
              b_block = packed->panels(pc, jc, kcp);
            } else if (imp) {
              imp->pack_b(item, pc, kc, jc, nc, nr, bp);
              if (imp->math == CubeMath::HF32 && !imp->b_is_hf32) {
                round_panel_to_hf32(bp, n_panels * nr * kc);
              }
            } else if (!b_direct) {
              pack_b_any<P>(b, pc, jc, kc, nc, nr, bp);
            }
          } else {
            pack_b_any<P>(b, pc, jc, kc, nc, nr, bp);
          }
          // The first tasks (one per thread) start at different A panels, so that the threads
          // pack different panels rather than meeting at the same one (where one of them would
          // pack a private copy).
          const int64_t np = p_end - p_begin, p_shift = np * (t % threads) / threads;
          for (int64_t i = 0; i < np; ++i) {
            const int64_t p = p_begin + (i + p_shift) % np;
            const int64_t row = ic + p * mr;
            const int rows = static_cast<int>(std::min<int64_t>(mr, M - row));
            const bool direct = direct_fn && rows == mr;
            const P* a_panel = direct ? nullptr : a_panel_at(p, pc, kc, kcp);
            const float* a_in =
                direct ? static_cast<const float*>(a.data) + row * a.rs + pc * a.cs : nullptr;
            const int64_t lda = a.rs == 1 && a.cs != 1 ? a.cs : a.rs;
            for (int64_t q = 0; q < n_panels; ++q) {
              const P* b_panel = b_block + q * kcp * nr;
              int64_t ldb = nr;
              if constexpr (std::is_same_v<P, float> && std::is_same_v<T, float>) {
                if (b_direct) {
                  b_panel = static_cast<const float*>(b.data) + pc * b.rs + jc + q * nr;
                  ldb = b.rs;
                }
              }
              const int64_t col = jc + q * nr;
              const int cols = static_cast<int>(std::min<int64_t>(nr, nc - q * nr));
              CT* cp = c_item + row * ldc + col;
              if (rows == mr && cols == nr) {
                if constexpr (kBf16C) {
                  kernel_avx512bf16_14x32_bf16c(kcp / step, a_panel, b_panel, cp, ldc, alpha,
                                                beta_eff);
                } else if (post_now && stage_fn) {
                  if constexpr (std::is_same_v<T, float> && std::is_same_v<P, float>) {
                    const OutputStageF tile_stage{
                        st.row_bias ? st.row_bias + row : nullptr,
                        st.col_bias ? st.col_bias + col : nullptr, st.col_scale, st.relu};
                    stage_fn(kcp, a_panel, b_panel, cp, ldc, alpha, beta_eff, tile_stage);
                  }
                } else {
                  if constexpr (std::is_same_v<P, float> && std::is_same_v<T, float>) {
                    if (direct) direct_fn(kc, a_in, lda, b_panel, ldb, cp, ldc, alpha, beta_eff);
                    else if (b_direct) packed_a_fn(kc, a_panel, mr, b_panel, ldb, cp, ldc, alpha, beta_eff);
                  }
                  if (!direct && !b_direct) {
                    kern.fn(kcp / step, a_panel, b_panel, cp, ldc, alpha, beta_eff);
                  }
                  if (post_now) {
                    for (int i = 0; i < rows; ++i) {
                      for (int j = 0; j < cols; ++j) {
                        cp[i * ldc + j] = post_value(row + i, col + j, cp[i * ldc + j]);
                      }
                    }
                  }
                }
              } else if (post_now && stage_fn && beta_eff == T(0)) {
                if constexpr (std::is_same_v<T, float> && std::is_same_v<P, float>) {
                  stage_edge_tile(stage_fn, kcp, a_panel, b_panel, cp, ldc, rows, cols, mr, nr,
                                  alpha, st, row, col, tile);
                }
              } else {
                if constexpr (std::is_same_v<P, float> && std::is_same_v<T, float>) {
                  if (direct) direct_fn(kc, a_in, lda, b_panel, ldb, tile, nr, 1.0f, 0.0f);
                  else if (b_direct) packed_a_fn(kc, a_panel, mr, b_panel, ldb, tile, nr, 1.0f, 0.0f);
                }
                if (!direct && !b_direct) kern.fn(kcp / step, a_panel, b_panel, tile, nr, T(1), T(0));
                for (int i = 0; i < rows; ++i) {
                  for (int j = 0; j < cols; ++j) {
                    T v = alpha * tile[i * nr + j];
                    if constexpr (kBf16C) {
                      uint16_t& out = cp[i * ldc + j];
                      if (beta_eff != T(0)) v += beta_eff * bf16_to_float(BFloat16{out});
                      out = float_to_bf16(v).bits;
                    } else {
                      v = beta_eff == T(0) ? v : v + beta_eff * cp[i * ldc + j];
                      cp[i * ldc + j] = post_now ? post_value(row + i, col + j, v) : v;
                    }
                  }
                }
              }
            }
          }
        }
        if (imp && imp->epilogue) {
          imp->epilogue(item, ic + p_begin * mr, ic + std::min(p_end * mr, mc), jc, jc + nc);
        } else if (block_done) {
          (*block_done)(ic + p_begin * mr, ic + std::min(p_end * mr, mc), jc, jc + nc);
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

// A float GEMM with a few rows of A (M <= kRowsMax) and B's columns contiguous in k: a Linear
// layer at decode time (A holds the batch's one token each, B is the weight transposed). Each C
// value is a dot product of an A row with a B column, all M rows of A against a column at once
// (the rows stay in L1), so B is read from memory once and never packed. The driver above packs
// B, reading and writing all of it for a few rows of A: 3.5x the time at M = 1 (a 32000 x 512
// weight: 8.6 ms, where a single-threaded MKL sgemv took 2.4 ms on this machine). Columns are
// split between the threads.
constexpr int64_t kRowsMax = kGemmFewRowsMax;

// out[r] = dot(A row r, col) for R rows at once: each 8 values of the column are loaded once.
template <int R>
void row_dots(const float* a, int64_t lda, const float* col, int64_t K, float* out) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    const __m256 w = _mm256_loadu_ps(col + k);
    for (int r = 0; r < R; ++r) {
      acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(a + r * lda + k), w, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float sum = hsum256(acc[r]);
    for (int64_t j = k; j < K; ++j) sum += a[r * lda + j] * col[j];
    out[r] = sum;
  }
}

using RowDots = void (*)(const float*, int64_t, const float*, int64_t, float*);
constexpr RowDots kRowDots[kRowsMax] = {row_dots<1>, row_dots<2>, row_dots<3>, row_dots<4>,
                                        row_dots<5>, row_dots<6>, row_dots<7>, row_dots<8>};

// The AVX-512 form: R rows of A against NC columns of B at once, R x NC accumulators of 16
// lanes. Each step of 16 k loads NC vectors of B and R of A for R * NC FMAs: at 8 rows the
// AVX2 form above issues 9 loads per 8 FMAs of 8 lanes, which made an 8-row Linear bound by
// load ports (a 32000 x 512 weight at 10 GB/s, where one row streams it at 32 GB/s); 8 x 3
// here issues 11 loads per 24 FMAs of 16 lanes.
//  - A comes packed (pack_few_rows): step s of 16 k holds the R rows' 16 values one after the
//    other, zero past K, so every A load is one pointer plus a constant (a row pointer each
//    took the general registers the loop needs) and the K tail needs no mask on A.
//  - The loop runs unmasked over whole steps; a K tail of fewer than 16 loads B masked, once.
//  - While a block's columns stream in, the next block's are prefetched (prefetch_next: their
//    lines at the same k): without it an 8-row product computed and waited for memory in turn,
//    the B reads of the decode step's Linears at 13 GB/s where one row reads them at 30.
//  - Column sums: 8 rows of one column reduce together (sums8), the same pairs in the same
//    order as _mm512_reduce_add_ps (halves of 256, 128, 64 and 32 bits), so each sum is bit for
//    bit the one a reduce per accumulator gives, at a third of the shuffles.
// out[c * R + r] = dot(A row r, column c).
constexpr int64_t kFewRowsStep = 16;

// A's R rows [R, K] (row stride lda) as ceil(K / 16) steps of R x 16 values, zero-padded.
void pack_few_rows(const float* a, int64_t lda, int64_t R, int64_t K, float* packed) {
  for (int64_t k = 0; k < K; k += kFewRowsStep) {
    const int64_t n = std::min(kFewRowsStep, K - k);
    for (int64_t r = 0; r < R; ++r) {
      float* dst = packed + (k / kFewRowsStep) * kFewRowsStep * R + r * kFewRowsStep;
      std::copy_n(a + r * lda + k, n, dst);
      std::fill(dst + n, dst + kFewRowsStep, 0.0f);
    }
  }
}

// The sums of 8 accumulators' lanes, to out[0..7], each added as _mm512_reduce_add_ps adds.
NPU_AVX512 inline void sums8(const __m512 (&v)[8], float* out) {
  __m512 s[4];
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) {  // lanes i + (i + 8): [v0 q0+q2, v0 q1+q3, v1 q0+q2, v1 q1+q3]
    s[p] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0x44),
                         _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0xEE));
  }
  // 128-bit lane j of u0 holds v_j's 4 partial sums (u1: v_{j+4}'s).
  const __m512 u0 = _mm512_add_ps(_mm512_shuffle_f32x4(s[0], s[1], 0x88),
                                  _mm512_shuffle_f32x4(s[0], s[1], 0xDD));
  const __m512 u1 = _mm512_add_ps(_mm512_shuffle_f32x4(s[2], s[3], 0x88),
                                  _mm512_shuffle_f32x4(s[2], s[3], 0xDD));
  // lane j: [u0 e0+e2, u1 e0+e2, u0 e1+e3, u1 e1+e3], then the two halves added.
  const __m512 w = _mm512_add_ps(_mm512_unpacklo_ps(u0, u1), _mm512_unpackhi_ps(u0, u1));
  const __m512 z = _mm512_add_ps(w, _mm512_permute_ps(w, 0x4E));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
  _mm256_storeu_ps(out, _mm512_castps512_ps256(_mm512_permutexvar_ps(order, z)));
}

// One step of 16 k: acc[r][c] += A row r's 16 values (packed at x) * column c's (w[c]).
template <int R, int NC>
NPU_AVX512 __attribute__((always_inline)) inline void few_rows_step(__m512 (&acc)[R][NC],
                                                                     const __m512 (&w)[NC],
                                                                     const float* x) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const __m512 xr = _mm512_load_ps(x + r * kFewRowsStep);
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_fmadd_ps(xr, w[c], acc[r][c]);
  }
}

template <int R, int NC>
NPU_AVX512 void row_dots512(const float* ap, const float* b, int64_t ldb, int64_t K,
                            bool prefetch_next, float* out) {
  __m512 acc[R][NC];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  const int64_t whole = K / kFewRowsStep * kFewRowsStep;
  const float* next = b + NC * ldb;
  int64_t k = 0;
  if (prefetch_next) {
    for (; k < whole; k += kFewRowsStep, ap += R * kFewRowsStep) {
      __m512 w[NC];
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        w[c] = _mm512_loadu_ps(b + c * ldb + k);
        _mm_prefetch(reinterpret_cast<const char*>(next + c * ldb + k), _MM_HINT_T0);
      }
      few_rows_step<R, NC>(acc, w, ap);
    }
  } else {
    for (; k < whole; k += kFewRowsStep, ap += R * kFewRowsStep) {
      __m512 w[NC];
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) w[c] = _mm512_loadu_ps(b + c * ldb + k);
      few_rows_step<R, NC>(acc, w, ap);
    }
  }
  if (k < K) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (K - k)) - 1);
    __m512 w[NC];
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) w[c] = _mm512_maskz_loadu_ps(mask, b + c * ldb + k);
    few_rows_step<R, NC>(acc, w, ap);
  }
  if constexpr (R == 8) {
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
      __m512 col[8];
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r) col[r] = acc[r][c];
      sums8(col, out + c * R);
    }
  } else {
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) out[c * R + r] = _mm512_reduce_add_ps(acc[r][c]);
    }
  }
}

// Columns per block for R rows: as many accumulators as leave registers for B and A.
constexpr int few_rows_block(int R) { return R == 1 ? 8 : R == 2 ? 6 : R <= 4 ? 4 : 3; }

// Columns [n0, n1) of the few-row product: blocks of few_rows_block(R) columns, then one at a
// time. ap: A packed by pack_few_rows. c[m * ldc + n] = alpha * dot + beta * c (beta == 0: C
// is not read).
// hf32: B's columns are read rounded to HF32 (a block at a time, into a buffer), so that the
// product equals the float32 product of pre-rounded operands bit for bit.
template <int R>
NPU_AVX512 void few_rows_columns512(const float* ap, const float* b, int64_t ldb, int64_t K,
                                    int64_t n0, int64_t n1, float alpha, float beta, float* c,
                                    int64_t ldc, bool hf32) {
  constexpr int NC = few_rows_block(R);
  float dots[NC * R];
  std::vector<float> rounded(hf32 ? static_cast<size_t>(NC * K) : 0);
  // Columns [n, n + nc) of B, rounded to HF32 where asked: (pointer, stride between columns).
  auto columns = [&](int64_t n, int nc) -> std::pair<const float*, int64_t> {
    if (!hf32) return {b + n * ldb, ldb};
    for (int j = 0; j < nc; ++j) std::copy_n(b + (n + j) * ldb, K, rounded.data() + j * K);
    round_panel_to_hf32(rounded.data(), nc * K);
    return {rounded.data(), K};
  };
  auto store = [&](int64_t n, int nc) {
    for (int j = 0; j < nc; ++j) {
      for (int m = 0; m < R; ++m) {
        const float v = alpha * dots[j * R + m];
        float* o = c + m * ldc + n + j;
        *o = beta == 0 ? v : v + beta * *o;
      }
    }
  };
  int64_t n = n0;
  for (; n + NC <= n1; n += NC) {
    const auto [cols, ld] = columns(n, NC);
    // The next block is this thread's (its lines are not another's) and in B itself.
    row_dots512<R, NC>(ap, cols, ld, K, !hf32 && n + 2 * NC <= n1, dots);
    store(n, NC);
  }
  for (; n < n1; ++n) {
    const auto [cols, ld] = columns(n, 1);
    row_dots512<R, 1>(ap, cols, ld, K, false, dots);
    store(n, 1);
  }
}

using FewRowsColumns = void (*)(const float*, const float*, int64_t, int64_t, int64_t, int64_t,
                                float, float, float*, int64_t, bool);
constexpr FewRowsColumns kFewRowsColumns512[kRowsMax] = {
    few_rows_columns512<1>, few_rows_columns512<2>, few_rows_columns512<3>,
    few_rows_columns512<4>, few_rows_columns512<5>, few_rows_columns512<6>,
    few_rows_columns512<7>, few_rows_columns512<8>};

bool few_rows_gemm(int64_t M, int64_t N, int64_t K, float alpha, const MatRef& a,
                   const MatRef& b, float beta, float* c, int64_t ldc) {
  if (M > kRowsMax || a.dtype != DType::Float32 || b.dtype != DType::Float32 ||
      a.cs != 1 || b.rs != 1 || K < 16) {
    return false;
  }
  const float* ap = static_cast<const float*>(a.data);
  const float* bp = static_cast<const float*>(b.data);
  int64_t lda = a.rs;
  // HF32 (a.hf32 and b.hf32 are set together): the operands are read rounded, A's few rows once
  // here, each column of B into a per-thread buffer, so that an HF32 product equals the float32
  // product of pre-rounded operands bit for bit on this path as on the packed one.
  std::vector<float> a_rounded;
  if (a.hf32) {
    a_rounded.resize(static_cast<size_t>(M * K));
    for (int64_t m = 0; m < M; ++m) std::copy_n(ap + m * a.rs, K, a_rounded.data() + m * K);
    round_panel_to_hf32(a_rounded.data(), M * K);
    ap = a_rounded.data();
    lda = K;
  }
  // Memory-bound: B is read once, so B's size decides whether the pool's threads are worth
  // waking (one core streams about half of what two stream), not the flop count.
  const bool small = static_cast<double>(N) * K * sizeof(float) < kThreadedBytes;
  if (use_avx512()) {
    float* packed = scratch<float>(kGemmPackedA, static_cast<size_t>(
        (K + kFewRowsStep - 1) / kFewRowsStep * kFewRowsStep * M));
    pack_few_rows(ap, lda, M, K, packed);
    parallel_for(0, N, small ? N : 48, [&](int64_t n0, int64_t n1) {
      kFewRowsColumns512[M - 1](packed, bp, b.cs, K, n0, n1, alpha, beta, c, ldc, b.hf32);
    });
    return true;
  }
  parallel_for(0, N, small ? N : 64, [&](int64_t n0, int64_t n1) {
    std::vector<float> col_rounded(b.hf32 ? static_cast<size_t>(K) : 0);
    for (int64_t n = n0; n < n1; ++n) {
      float dots[kRowsMax];
      const float* col = bp + n * b.cs;
      if (b.hf32) {
        std::copy_n(col, K, col_rounded.data());
        round_panel_to_hf32(col_rounded.data(), K);
        col = col_rounded.data();
      }
      kRowDots[M - 1](ap, lda, col, K, dots);
      for (int64_t m = 0; m < M; ++m) {
        const float v = alpha * dots[m];
        float* out = c + m * ldc + n;
        *out = beta == 0 ? v : v + beta * *out;
      }
    }
  });
  return true;
}

template <class T>
void gemm_typed(const TensorDesc& c, const TensorDesc& a, const TensorDesc& b, double alpha,
                double beta, CubeMath math) {
  int64_t M = c.sizes[0], N = c.sizes[1], K = a.sizes[1];
  // HF32 is a float32 format: double GEMMs keep their dtype.
  const bool hf32 = math == CubeMath::HF32 && std::is_same_v<T, float>;
  MatRef ma{a.data, a.dtype, a.strides[0], a.strides[1], hf32};
  MatRef mb{b.data, b.dtype, b.strides[0], b.strides[1], hf32};
  int64_t crs = c.strides[0], ccs = c.strides[1];
  if (N == 1) ccs = 1;  // the stride of a size-1 dimension is meaningless
  if (M == 1) crs = N;
  // A column-major C is a row-major C^T = B^T A^T.
  if (ccs != 1 && crs == 1) {
    std::swap(M, N);
    MatRef at{mb.data, mb.dtype, mb.cs, mb.rs, mb.hf32};
    MatRef bt{ma.data, ma.dtype, ma.cs, ma.rs, ma.hf32};
    ma = at, mb = bt;
    std::swap(crs, ccs);
  }
  // Two bfloat16 operands take the vdpbf16ps kernel where the CPU has it (HF32 changes nothing
  // there: a bfloat16 value has 7 mantissa bits, so it is an HF32 value already).
  auto run = [&](T al, T be, T* out, int64_t ld, const BlockDone* done) {
    if constexpr (std::is_same_v<T, float>) {
      if (ma.dtype == DType::BFloat16 && mb.dtype == DType::BFloat16 && use_amx(M, N, K)) {
        gemm_amx_bf16(M, N, K, al, ma, mb, be, out, ld, done);
        return;
      }
      if (ma.dtype == DType::BFloat16 && mb.dtype == DType::BFloat16 && use_avx512_bf16()) {
        driver<float, uint16_t>(M, N, K, al, ma, mb, be, out, ld, done);
        return;
      }
    }
    driver<T, T>(M, N, K, al, ma, mb, be, out, ld, done);
  };
  if constexpr (std::is_same_v<T, float>) {
    if (c.dtype == DType::Float32 && ccs == 1 &&
        few_rows_gemm(M, N, K, float(alpha), ma, mb, float(beta), static_cast<float*>(c.data),
                      crs)) {
      return;
    }
  }
  if (c.dtype == dtype_of<T>() && ccs == 1) {
    run(T(alpha), T(beta), static_cast<T*>(c.data), crs, nullptr);
    return;
  }
  // A bfloat16 C of two bfloat16 operands with K in one block: the micro-kernel rounds each
  // tile into C itself (no float workspace, no second pass over C).
  if constexpr (std::is_same_v<T, float>) {
    if (c.dtype == DType::BFloat16 && ccs == 1 && ma.dtype == DType::BFloat16 &&
        mb.dtype == DType::BFloat16 && K <= kBf16DirectMaxK && use_avx512_bf16() &&
        !use_amx(M, N, K)) {
      driver<float, uint16_t, uint16_t>(M, N, K, float(alpha), ma, mb, float(beta),
                                        static_cast<uint16_t*>(c.data), crs, nullptr);
      return;
    }
  }
  // Workspace path: compute A B in T, then C = alpha * W + beta * C with conversion, block by
  // block as the tasks finish them (the plain C = W of mm / bmm: the library's vectorised
  // conversion, one rounding).
  std::unique_ptr<T[]> w(new T[static_cast<size_t>(M * N)]);
  const ConvertFn to_c = convert_fn(dtype_of<T>(), c.dtype);
  const int64_t c_size = static_cast<int64_t>(dtype_size(c.dtype));
  const BlockDone convert_block = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    for (int64_t i = r0; i < r1; ++i) {
      const T* src = w.get() + i * N;
      if (alpha == 1 && beta == 0) {
        to_c(src + c0, 1, static_cast<char*>(c.data) + (i * crs + c0 * ccs) * c_size, ccs,
             c1 - c0);
        continue;
      }
      dispatch_storage(c.dtype, [&]<class S>() {
        for (int64_t j = c0; j < c1; ++j) {
          S* p = static_cast<S*>(c.data) + i * crs + j * ccs;
          T v = T(alpha) * src[j];
          if (beta != 0) v += T(beta) * cast_value<T>(*p);
          *p = cast_value<S>(v);
        }
      });
    }
  };
  run(T(1), T(0), w.get(), N, &convert_block);
}


// A batch of small float32 products (attention's scores and values per head: [64 x 32] @
// [32 x 64], [64 x 64] @ [64 x 32]) run on the in-place kernels of the driver without the
// driver: one item is a few microseconds of FMAs, and the driver's set-up per call (its panel
// states, task split and closures) cost a third of that on top (bmm of 256 [64 x 64] @
// [64 x 32]: 1.2x MKL's time). Per item:
//  - A is read in place, row-major or column-major, for its full MR-row panels; a last, partial
//    panel is packed (zero rows past M), as the driver does.
//  - B is read in place where it is row-major and its columns fill whole NR panels, else
//    packed once per item into NR-column panels (a column-major B: q @ k^T).
//  - K is one block (at most float_kc's single block), so every C tile is final after one
//    kernel call. Each C value is summed in the same order as the driver's: with beta == 0 the
//    results are the driver's bit for bit (tests/cpp/kernels/gemm_test.cpp compares the two;
//    with beta, an edge tile's alpha * AB + beta * C may be contracted differently).
// Returns false (nothing done) where these conditions do not hold.
constexpr int64_t kBatchedDirectMaxMN = 256;
std::atomic<bool> g_batched_direct{true};
std::atomic<int64_t> g_batched_direct_calls{0};  // testing: calls the path took

bool batched_direct(const TensorDesc& c, const TensorDesc& a, const TensorDesc& b, float alpha,
                    float beta, CubeMath math) {
  const int64_t batch = c.sizes[0], M = c.sizes[1], N = c.sizes[2], K = a.sizes[2];
  if (!g_batched_direct.load(std::memory_order_relaxed) || !use_avx512() ||
      math == CubeMath::HF32 || g_private_a_panels.load(std::memory_order_relaxed)) {
    return false;
  }
  if (c.dtype != DType::Float32 || a.dtype != DType::Float32 || b.dtype != DType::Float32) {
    return false;
  }
  // M > kGemmFewRowsMax: fewer rows may take gemm()'s dot-product path (another order of sums).
  if (M <= kGemmFewRowsMax || N < 16 || M > kBatchedDirectMaxMN || N > kBatchedDirectMaxMN ||
      K < 1 || float_kc(K) != K) {
    return false;
  }
  // Products gemm_small takes (a few thousand flops) stay there, as before this path existed.
  if (M <= kGemmSmallMaxMN && N <= kGemmSmallMaxMN && K <= kGemmSmallMaxK &&
      M * N * K <= kGemmSmallMaxVolume) {
    return false;
  }
  const bool a_row = a.strides[2] == 1, a_col = !a_row && a.strides[1] == 1;
  const bool b_row = b.strides[2] == 1, b_col = !b_row && b.strides[1] == 1;
  if ((!a_row && !a_col) || (!b_row && !b_col) || c.strides[2] != 1) return false;
  const Kernel<float, float> kern = select_float_kernel(M, N);
  const int mr = kern.mr, nr = kern.nr;
  if (mr != 8 && mr != 14) return false;
  const DirectKernelF packed_fn = direct_kernel_f32(mr, nr, true);
  const DirectKernelF row_fn = direct_kernel_f32(mr, nr, false);
  const DirectKernelF a_fn = a_row ? row_fn : packed_fn;
  const int64_t lda = a_row ? a.strides[1] : a.strides[2];
  const bool b_in_place = b_row && N % nr == 0;
  const int64_t m_panels = (M + mr - 1) / mr, n_panels = (N + nr - 1) / nr;
  const float* const a0 = static_cast<const float*>(a.data);
  const float* const b0 = static_cast<const float*>(b.data);
  float* const c0 = static_cast<float*>(c.data);
  const int64_t ldc = c.strides[1];
  const double flops = 2.0 * M * N * K;
  const int64_t grain = std::max<int64_t>(1, static_cast<int64_t>(kThreadedFlops / 4 / flops));
  g_batched_direct_calls.fetch_add(1, std::memory_order_relaxed);
  parallel_for(0, batch, grain, [&](int64_t i0, int64_t i1) {
    alignas(64) float tile[14 * 32];
    float* const bp =
        b_in_place ? nullptr : scratch<float>(kGemmPackedB, static_cast<size_t>(n_panels * nr * K));
    float* const ap = scratch<float>(kGemmPanel, static_cast<size_t>(mr * K));
    for (int64_t item = i0; item < i1; ++item) {
      const float* A = a0 + item * a.strides[0];
      const float* B = b0 + item * b.strides[0];
      float* C = c0 + item * c.strides[0];
      if (!b_in_place) pack_b<float>(B, b.strides[1], b.strides[2], K, N, nr, bp);
      const int64_t ldb = b_in_place ? b.strides[1] : nr;
      for (int64_t p = 0; p < m_panels; ++p) {
        const int64_t row = p * mr;
        const int rows = static_cast<int>(std::min<int64_t>(mr, M - row));
        const float* a_in = A + row * a.strides[1];
        DirectKernelF fn = a_fn;
        int64_t a_ld = lda;
        if (rows < mr) {
          pack_a<float>(a_in, a.strides[1], a.strides[2], rows, K, mr, 0, 1, ap);
          a_in = ap, fn = packed_fn, a_ld = mr;
        }
        for (int64_t q = 0; q < n_panels; ++q) {
          const int64_t col = q * nr;
          const int cols = static_cast<int>(std::min<int64_t>(nr, N - col));
          const float* b_panel = b_in_place ? B + col : bp + q * K * nr;
          float* cp = C + row * ldc + col;
          if (rows == mr && cols == nr) {
            fn(K, a_in, a_ld, b_panel, ldb, cp, ldc, alpha, beta);
            continue;
          }
          fn(K, a_in, a_ld, b_panel, ldb, tile, nr, 1.0f, 0.0f);
          for (int r = 0; r < rows; ++r) {
            for (int j = 0; j < cols; ++j) {
              const float v = alpha * tile[r * nr + j];
              cp[r * ldc + j] = beta == 0.0f ? v : v + beta * cp[r * ldc + j];
            }
          }
        }
      }
    }
  });
  return true;
}

}  // namespace
}  // namespace detail::gemm

namespace detail {
void gemm_implicit(const ImplicitGemm& g) {
  NPU_KERNEL_ASSERT(g.a.ndim == 2 && g.a.dtype == DType::Float32 && g.a.sizes[0] == g.M &&
                        g.a.sizes[1] == g.K && g.pack_b,
                    "gemm_implicit takes a [M, K] float32 A and a B packer");
  if (g.M == 0 || g.N == 0 || g.batch == 0) return;
  NPU_KERNEL_ASSERT(g.K > 0, "gemm_implicit needs K > 0");
  const gemm::MatRef ma{g.a.data, g.a.dtype, g.a.strides[0], g.a.strides[1],
                        g.math == CubeMath::HF32};
  gemm::driver<float, float>(g.M, g.N, g.K, 1.0f, ma, ma, 0.0f, g.c, g.ldc, nullptr, &g);
}
}  // namespace detail

void PackedB::Free::operator()(float* p) const { std::free(p); }

PackedB::PackedB(const TensorDesc& b, CubeMath math) : math_(math) {
  NPU_KERNEL_ASSERT(b.ndim == 2 && b.dtype == DType::Float32, "PackedB takes a [K, N] float32 B");
  using namespace detail::gemm;
  k_ = b.sizes[0];
  n_ = b.sizes[1];
  nr_ = float_nr(n_);
  n_padded_ = (n_ + nr_ - 1) / nr_ * nr_;
  // K blocks of the driver's KC, each holding every column's panel: block pc starts at
  // pc * n_padded (every block before it has KC rows).
  const size_t bytes = std::max<size_t>(64, (k_ * n_padded_ * sizeof(float) + 63) / 64 * 64);
  data_.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
  NPU_KERNEL_ASSERT(data_ != nullptr, "out of host memory for packed GEMM weights");
  const MatRef mb{b.data, b.dtype, b.strides[0], b.strides[1], math == CubeMath::HF32};
  const int64_t kc_max = float_kc(k_);  // the driver's K blocks
  for (int64_t pc = 0; pc < k_; pc += kc_max) {
    pack_b_any<float>(mb, pc, 0, std::min(kc_max, k_ - pc), n_, nr_, data_.get() + pc * n_padded_);
  }
}

void gemm_prepacked(const TensorDesc& c, const TensorDesc& a, const TensorDesc& b,
                    const PackedB& packed, double alpha, double beta,
                    const GemmEpilogue& epilogue, const GemmOutputStage& stage) {
  using namespace detail::gemm;
  NPU_KERNEL_ASSERT(c.ndim == 2 && a.ndim == 2 && b.ndim == 2, "gemm takes 2-D descriptors");
  NPU_KERNEL_ASSERT(b.sizes[0] == packed.k() && b.sizes[1] == packed.n(),
                    "gemm_prepacked: B is not the matrix that was packed");
  const int64_t M = c.sizes[0], N = c.sizes[1], K = a.sizes[1];
  const bool hf32 = packed.math() == CubeMath::HF32;
  const MatRef ma{a.data, a.dtype, a.strides[0], a.strides[1], hf32};
  const MatRef mb{b.data, b.dtype, b.strides[0], b.strides[1], hf32};
  const int64_t ldc = M == 1 ? N : c.strides[0];
  const bool fits = c.dtype == DType::Float32 && a.dtype == DType::Float32 &&
                    (c.strides[1] == 1 || N == 1) && M > 0 && N > 0 && K > 0 &&
                    float_nr(N) == packed.nr();
  float* cp = static_cast<float*>(c.data);
  // The paths without the driver: the stage as a pass over C (the same operations).
  auto stage_pass = [&] {
    if (!stage.active()) return;
    NPU_KERNEL_ASSERT(c.dtype == DType::Float32, "gemm_prepacked: an output stage needs a float32 C");
    float* base = static_cast<float*>(c.data);
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        float& v = base[i * c.strides[0] + j * c.strides[1]];
        float x = v;
        if (stage.row_bias) x = add_scaled(x, 1.0f, stage.row_bias[i]);
        if (stage.col_bias) x = add_scaled(x, stage.col_scale, stage.col_bias[j]);
        if (stage.relu) x = (x > 0.0f || x != x) ? x : 0.0f;
        v = x;
      }
    }
  };
  if (fits && few_rows_gemm(M, N, K, float(alpha), ma, mb, float(beta), cp, ldc)) {
    stage_pass();
    if (epilogue) epilogue(0, M, 0, N);
    return;
  }
  if (!fits) {
    gemm(c, a, b, alpha, beta, packed.math());
    if (M > 0 && N > 0) stage_pass();
    if (epilogue && M > 0 && N > 0) epilogue(0, M, 0, N);
    return;
  }
  NPU_KERNEL_ASSERT(a.sizes[0] == M && b.sizes[1] == N && b.sizes[0] == K,
                    "gemm shapes do not agree");
  const BlockDone* done = epilogue ? &epilogue : nullptr;
  driver<float, float>(M, N, K, float(alpha), ma, mb, float(beta), cp, ldc, done, nullptr,
                       &packed, stage.active() ? &stage : nullptr);
}

bool gemm_supports(DType a, DType b, DType c) {
  auto f16_32 = [](DType t) {
    return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16;
  };
  if (a == DType::Float64 && b == DType::Float64 && c == DType::Float64) return true;
  return f16_32(a) && f16_32(b) && f16_32(c);
}

void gemm(const TensorDesc& c, const TensorDesc& a, const TensorDesc& b, double alpha,
          double beta, CubeMath math) {
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
  if (detail::gemm_small(c, a, b, alpha, beta, math)) return;
  if (c.dtype == DType::Float64) detail::gemm::gemm_typed<double>(c, a, b, alpha, beta, math);
  else detail::gemm::gemm_typed<float>(c, a, b, alpha, beta, math);
}

void gemm_batched(const TensorDesc& c, const TensorDesc& a, const TensorDesc& b, double alpha,
                  double beta, CubeMath math) {
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
  if (batch > 0 && c.sizes[1] > 0 && c.sizes[2] > 0 && a.sizes[2] > 0 &&
      detail::gemm::batched_direct(c, a, b, static_cast<float>(alpha), static_cast<float>(beta),
                                   math)) {
    return;
  }
  if (batch > 0 && c.sizes[1] > 0 && c.sizes[2] > 0 && a.sizes[2] > 0 &&
      detail::gemm_small(slice(c, 0), slice(a, 0), slice(b, 0), alpha, beta, math)) {
    // Small products (a head's scores): a few thousand flops each, so tasks take many.
    parallel_for(1, batch, std::max<int64_t>(1, batch / (4 * num_threads())),
                 [&](int64_t b0, int64_t b1) {
                   for (int64_t i = b0; i < b1; ++i) {
                     detail::gemm_small(slice(c, i), slice(a, i), slice(b, i), alpha, beta, math);
                   }
                 });
    return;
  }
  parallel_for(0, batch, grain, [&](int64_t b0, int64_t b1) {
    for (int64_t i = b0; i < b1; ++i) {
      gemm(slice(c, i), slice(a, i), slice(b, i), alpha, beta, math);
    }
  });
}

namespace testing {
void set_gemm_isa(const char* isa) {
  const std::string s(isa);
  NPU_KERNEL_ASSERT(s == "auto" || s == "avx512_bf16" || s == "avx512" || s == "avx2",
                    "set_gemm_isa takes \"auto\", \"avx512_bf16\", \"avx512\" or \"avx2\"");
  detail::gemm::g_isa_cap.store(
      s == "auto" ? 3 : s == "avx512_bf16" ? 2 : s == "avx512" ? 1 : 0, std::memory_order_relaxed);
}

void set_gemm_batched_direct(bool on) {
  detail::gemm::g_batched_direct.store(on, std::memory_order_relaxed);
}

int64_t gemm_batched_direct_calls() {
  return detail::gemm::g_batched_direct_calls.load(std::memory_order_relaxed);
}

void set_gemm_subnormal_scaling(bool on) {
  detail::gemm::g_subnormal_scaling.store(on, std::memory_order_relaxed);
}

int64_t gemm_subnormal_scaled_calls() {
  return detail::gemm::g_subnormal_scaled_calls.load(std::memory_order_relaxed);
}

void set_gemm_private_a_panels(bool on) {
  detail::gemm::g_private_a_panels.store(on, std::memory_order_relaxed);
}

const char* gemm_isa(DType a, DType b) {
  if (a == DType::BFloat16 && b == DType::BFloat16 && detail::gemm::use_amx(32, 32, 32)) {
    return "amx_bf16";
  }
  if (a == DType::BFloat16 && b == DType::BFloat16 && detail::gemm::use_avx512_bf16()) {
    return "avx512_bf16";
  }
  return detail::gemm::use_avx512() ? "avx512" : "avx2";
}
}  // namespace testing

}  // namespace npu::kernels
