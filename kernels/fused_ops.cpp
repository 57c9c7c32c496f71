// add_rms_norm, rotary_mul and swiglu (forward and backward): row kernels in one pass.
//
// Each works on rows (the last dim, or the normalized dims): the rows of every operand are
// loaded into float buffers (in place when already contiguous float), computed with AVX2 where
// the math is more than a multiply-add (silu), and stored back with one rounding.
#include <immintrin.h>

#include <cmath>
#include <vector>

#include "rows.h"
#include "scratch.h"
#include "vec_math.h"
#include "npu/kernels/fused.h"
#include "npu/kernels/thread_pool.h"

namespace npu::kernels {
namespace detail {
namespace {

// Call sites of thread_scratch (scratch.h): a row's 16-bit rounding, a rotary row's rotation.
struct RoundScratch;
struct RotaryScratch;

// Runs fn(row, in[NIn], out[NOut], n) over the rows of the operands (all with the same row
// count M and row length N), loading inputs and storing outputs through float buffers.
// An output slot may be nullptr (not wanted): fn still gets a scratch row for it.
template <int NIn, int NOut, class F>
void rows_float(const Rows* const* ins, const Rows* const* outs, int64_t cost, F&& fn) {
  const int64_t M = ins[0]->M(), N = ins[0]->N();
  if (M == 0 || N == 0) return;
  parallel_for(0, M, std::max<int64_t>(1, 32768 / (N * cost)), [&](int64_t r0, int64_t r1) {
    std::vector<float> bufs(static_cast<size_t>(N) * (NIn + NOut));
    for (int64_t r = r0; r < r1; ++r) {
      const float* in[NIn];
      float* out[NOut];
      for (int k = 0; k < NIn; ++k) {
        const float* d = ins[k]->template direct<float>(r);
        if (!d) {
          ins[k]->load(r, bufs.data() + k * N);
          d = bufs.data() + k * N;
        }
        in[k] = d;
      }
      for (int k = 0; k < NOut; ++k) {
        float* d = outs[k] ? outs[k]->template direct<float>(r) : nullptr;
        out[k] = d ? d : bufs.data() + (NIn + k) * N;
      }
      fn(r, in, out, N);
      for (int k = 0; k < NOut; ++k) {
        if (outs[k] && out[k] == bufs.data() + (NIn + k) * N) outs[k]->store(r, out[k]);
      }
    }
  });
}

// rotate(x) of one row into y (y != x).
void rotate(const float* x, float* y, int64_t n, RotaryMode mode) {
  if (mode == RotaryMode::Half) {
    const int64_t h = n / 2;
    for (int64_t i = 0; i < h; ++i) {
      y[i] = -x[i + h];
      y[i + h] = x[i];
    }
  } else {
    for (int64_t i = 0; i + 1 < n; i += 2) {
      y[i] = -x[i + 1];
      y[i + 1] = x[i];
    }
  }
}

// The values of one row as the dtype of `t` would store them (x1 + x2 rounded).
void round_row(float* x, int64_t n, DType t) {
  if (t == DType::Float32) return;
  ConvertFn to = convert_fn(DType::Float32, t), back = convert_fn(t, DType::Float32);
  uint16_t* const tmp = thread_scratch<RoundScratch, uint16_t>(static_cast<size_t>(n));
  to(x, 1, tmp, 1, n);
  back(tmp, 1, x, 1, n);
}

}  // namespace
}  // namespace detail

void add_rms_norm(const TensorDesc& y, const TensorDesc& rstd, const TensorDesc& x_out,
                  const TensorDesc& x1, const TensorDesc& x2, const TensorDesc& gamma,
                  int normalized_ndim, double eps) {
  using namespace detail;
  Rows ry(y, normalized_ndim), rx(x_out, normalized_ndim), r1(x1, normalized_ndim),
      r2(x2, normalized_ndim), rr(rstd, 0);
  std::vector<float> g(static_cast<size_t>(ry.N()));
  Rows(gamma, gamma.ndim).load(0, g.data());
  const Rows* ins[2] = {&r1, &r2};
  const Rows* outs[2] = {&ry, &rx};
  rows_float<2, 2>(ins, outs, 3, [&](int64_t r, const float* const* in, float* const* out,
                                     int64_t n) {
    float* x = out[1];
    for (int64_t i = 0; i < n; ++i) x[i] = in[0][i] + in[1][i];
    round_row(x, n, x_out.dtype);
    const double rs = 1.0 / std::sqrt(sum_squares(x, n) / n + eps);
    const float tr = static_cast<float>(rs);
    scale_mul(x, tr, g.data(), out[0], n);
    float v = tr;
    rr.store(r, &v);
  });
}

void rotary_mul(const TensorDesc& out, const TensorDesc& x, const TensorDesc& r1,
                const TensorDesc& r2, RotaryMode mode) {
  using namespace detail;
  Rows ro(out, 1), rx(x, 1), ra(r1, 1), rb(r2, 1);
  const Rows* ins[3] = {&rx, &ra, &rb};
  const Rows* outs[1] = {&ro};
  rows_float<3, 1>(ins, outs, 3, [&](int64_t, const float* const* in, float* const* o,
                                     int64_t n) {
    float* t = thread_scratch<RotaryScratch, float>(static_cast<size_t>(n));
    rotate(in[0], t, n, mode);
    for (int64_t i = 0; i < n; ++i) o[0][i] = in[0][i] * in[1][i] + t[i] * in[2][i];
  });
}

void rotary_mul_backward(const TensorDesc* grad_x, const TensorDesc* grad_r1,
                         const TensorDesc* grad_r2, const TensorDesc& grad_out,
                         const TensorDesc& x, const TensorDesc& r1, const TensorDesc& r2,
                         RotaryMode mode) {
  using namespace detail;
  auto rows_of = [](const TensorDesc* t) {
    return t && t->data ? Rows(*t, 1) : Rows(TensorDesc(), 0);
  };
  Rows rg(grad_out, 1), rx(x, 1), ra(r1, 1), rb(r2, 1);
  Rows gx = rows_of(grad_x), g1 = rows_of(grad_r1), g2 = rows_of(grad_r2);
  const Rows* ins[4] = {&rg, &rx, &ra, &rb};
  const Rows* outs[3] = {grad_x && grad_x->data ? &gx : nullptr,
                         grad_r1 && grad_r1->data ? &g1 : nullptr,
                         grad_r2 && grad_r2->data ? &g2 : nullptr};
  rows_float<4, 3>(ins, outs, 4,
                   [&](int64_t, const float* const* in, float* const* o, int64_t n) {
    float* const t = thread_scratch<RotaryScratch, float>(static_cast<size_t>(2 * n));
    float* const u = t + n;
    const float* dy = in[0];
    if (outs[0]) {
      for (int64_t i = 0; i < n; ++i) u[i] = dy[i] * in[3][i];
      rotate(u, t, n, mode);
      for (int64_t i = 0; i < n; ++i) o[0][i] = dy[i] * in[2][i] - t[i];
    }
    if (outs[1]) {
      for (int64_t i = 0; i < n; ++i) o[1][i] = dy[i] * in[1][i];
    }
    if (outs[2]) {
      rotate(in[1], t, n, mode);
      for (int64_t i = 0; i < n; ++i) o[2][i] = dy[i] * t[i];
    }
  });
}

void swiglu(const TensorDesc& out, const TensorDesc& a, const TensorDesc& b) {
  using namespace detail;
  Rows ro(out, 1), ra(a, 1), rb(b, 1);
  const Rows* ins[2] = {&ra, &rb};
  const Rows* outs[1] = {&ro};
  rows_float<2, 1>(ins, outs, 4, [&](int64_t, const float* const* in, float* const* o,
                                     int64_t n) {
    const float* av = in[0];
    const float* bv = in[1];
    float* y = o[0];
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      __m256 x = _mm256_loadu_ps(av + i);
      __m256 s = _mm256_mul_ps(x, sigmoid256(x));
      _mm256_storeu_ps(y + i, _mm256_mul_ps(s, _mm256_loadu_ps(bv + i)));
    }
    for (; i < n; ++i) y[i] = av[i] / (1.0f + std::exp(-av[i])) * bv[i];
  });
}

void swiglu_backward(const TensorDesc& grad_a, const TensorDesc& grad_b,
                     const TensorDesc& grad_out, const TensorDesc& a, const TensorDesc& b) {
  using namespace detail;
  Rows rga(grad_a, 1), rgb(grad_b, 1), rg(grad_out, 1), ra(a, 1), rb(b, 1);
  const Rows* ins[3] = {&rg, &ra, &rb};
  const Rows* outs[2] = {&rga, &rgb};
  rows_float<3, 2>(ins, outs, 6, [&](int64_t, const float* const* in, float* const* o,
                                     int64_t n) {
    const float* dy = in[0];
    const float* av = in[1];
    const float* bv = in[2];
    int64_t i = 0;
    const __m256 one = _mm256_set1_ps(1.0f);
    for (; i + 8 <= n; i += 8) {
      __m256 x = _mm256_loadu_ps(av + i), g = _mm256_loadu_ps(dy + i);
      __m256 s = sigmoid256(x);
      __m256 silu = _mm256_mul_ps(x, s);
      // silu'(x) = s * (1 + x * (1 - s))
      __m256 d = _mm256_mul_ps(s, _mm256_fmadd_ps(x, _mm256_sub_ps(one, s), one));
      _mm256_storeu_ps(o[0] + i, _mm256_mul_ps(_mm256_mul_ps(g, _mm256_loadu_ps(bv + i)), d));
      _mm256_storeu_ps(o[1] + i, _mm256_mul_ps(g, silu));
    }
    for (; i < n; ++i) {
      const float s = 1.0f / (1.0f + std::exp(-av[i]));
      o[0][i] = dy[i] * bv[i] * s * (1.0f + av[i] * (1.0f - s));
      o[1][i] = dy[i] * av[i] * s;
    }
  });
}

}  // namespace npu::kernels
