// Kernel throughput. Figures only; nothing here asserts on time.
//   add_f32:      out = a + b over 16M floats (GB/s counts the 3 arrays moved)
//   sgemm/N:      N x N x N float32 matmul (GFLOP/s = 2 N^3 / time), every pool thread
//   sgemm_avx2/N: the same restricted to the AVX2 micro-kernel
//   gemm_bf16/N, gemm_f16/N: 16-bit A, B, C with float32 accumulation, on the best path the CPU
//                 has (label: the ISA); *_avx512 / *_avx2: forced onto that path
//   softmax_f32:  softmax over the last dim of a 4096 x 1024 float32 tensor
//   sum_f32:      sum of 16M floats to one value
//   flash_attention_{fwd,bwd}/S: causal attention, 2 heads of D = 64, float32 (GFLOP/s counts
//                 the useful causal flops: 2 GEMMs forward, 5 backward, S^2 / 2 scores each)
//   rms_norm_f32, swiglu_f32, rotary_mul_f32: the fused LLM kernels (GB/s of data moved)
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "npu/kernels.h"

namespace {

namespace nk = npu::kernels;
using nk::DType;
using nk::TensorDesc;

std::vector<float> random_floats(size_t n) {
  std::vector<float> v(n);
  std::mt19937 gen(42);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& x : v) x = u(gen);
  return v;
}

void BM_add_f32(benchmark::State& state) {
  const int64_t n = 16 << 20;
  auto a = random_floats(n), b = random_floats(n);
  std::vector<float> out(n);
  TensorDesc da = TensorDesc::make(a.data(), DType::Float32, {n});
  TensorDesc db = TensorDesc::make(b.data(), DType::Float32, {n});
  TensorDesc dout = TensorDesc::make(out.data(), DType::Float32, {n});
  for (auto _ : state) {
    nk::binary(nk::BinaryOp::Add, dout, da, db, DType::Float32, 1);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GB/s"] = benchmark::Counter(3.0 * n * sizeof(float) * state.iterations(),
                                              benchmark::Counter::kIsRate,
                                              benchmark::Counter::kIs1000);
}
BENCHMARK(BM_add_f32)->Unit(benchmark::kMillisecond)->UseRealTime();

void sgemm(benchmark::State& state, const char* isa) {
  const int64_t n = state.range(0);
  auto a = random_floats(n * n), b = random_floats(n * n);
  std::vector<float> c(n * n);
  TensorDesc da = TensorDesc::make(a.data(), DType::Float32, {n, n});
  TensorDesc db = TensorDesc::make(b.data(), DType::Float32, {n, n});
  TensorDesc dc = TensorDesc::make(c.data(), DType::Float32, {n, n});
  nk::testing::set_gemm_isa(isa);
  for (auto _ : state) {
    nk::gemm(dc, da, db);
    benchmark::DoNotOptimize(c.data());
  }
  nk::testing::set_gemm_isa("auto");
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * n * n * state.iterations(),
                                                 benchmark::Counter::kIsRate,
                                                 benchmark::Counter::kIs1000);
}
void BM_sgemm(benchmark::State& state) { sgemm(state, "auto"); }
void BM_sgemm_avx2(benchmark::State& state) { sgemm(state, "avx2"); }
BENCHMARK(BM_sgemm)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_sgemm_avx2)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();

// Random 16-bit matrices: floats in [-1, 1) rounded by the library's own copy kernel.
std::vector<uint16_t> random_16bit(size_t n, DType t) {
  auto f = random_floats(n);
  std::vector<uint16_t> v(n);
  const int64_t len = static_cast<int64_t>(n);
  nk::copy(TensorDesc::make(v.data(), t, {len}), TensorDesc::make(f.data(), DType::Float32, {len}));
  return v;
}

void gemm16(benchmark::State& state, DType t, const char* isa) {
  const int64_t n = state.range(0);
  auto a = random_16bit(n * n, t), b = random_16bit(n * n, t);
  std::vector<uint16_t> c(n * n);
  TensorDesc da = TensorDesc::make(a.data(), t, {n, n});
  TensorDesc db = TensorDesc::make(b.data(), t, {n, n});
  TensorDesc dc = TensorDesc::make(c.data(), t, {n, n});
  nk::testing::set_gemm_isa(isa);
  state.SetLabel(nk::testing::gemm_isa(t, t));
  for (auto _ : state) {
    nk::gemm(dc, da, db);
    benchmark::DoNotOptimize(c.data());
  }
  nk::testing::set_gemm_isa("auto");
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * n * n * state.iterations(),
                                                 benchmark::Counter::kIsRate,
                                                 benchmark::Counter::kIs1000);
}
void BM_gemm_bf16(benchmark::State& state) { gemm16(state, DType::BFloat16, "auto"); }
void BM_gemm_bf16_avx512(benchmark::State& state) { gemm16(state, DType::BFloat16, "avx512"); }
void BM_gemm_bf16_avx2(benchmark::State& state) { gemm16(state, DType::BFloat16, "avx2"); }
void BM_gemm_f16(benchmark::State& state) { gemm16(state, DType::Float16, "auto"); }
void BM_gemm_f16_avx2(benchmark::State& state) { gemm16(state, DType::Float16, "avx2"); }
BENCHMARK(BM_gemm_bf16)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_gemm_bf16_avx512)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_gemm_bf16_avx2)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_gemm_f16)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_gemm_f16_avx2)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_softmax_f32(benchmark::State& state) {
  const int64_t rows = 4096, cols = 1024;
  auto x = random_floats(rows * cols);
  std::vector<float> y(rows * cols);
  TensorDesc dx = TensorDesc::make(x.data(), DType::Float32, {rows, cols});
  TensorDesc dy = TensorDesc::make(y.data(), DType::Float32, {rows, cols});
  for (auto _ : state) {
    nk::softmax(dy, dx, 1, false);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GB/s"] = benchmark::Counter(2.0 * rows * cols * sizeof(float) * state.iterations(),
                                              benchmark::Counter::kIsRate,
                                              benchmark::Counter::kIs1000);
}
BENCHMARK(BM_softmax_f32)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_sum_f32(benchmark::State& state) {
  const int64_t n = 16 << 20;
  auto x = random_floats(n);
  float out = 0;
  TensorDesc dx = TensorDesc::make(x.data(), DType::Float32, {n});
  TensorDesc dout = TensorDesc::make(&out, DType::Float32, {1});
  for (auto _ : state) {
    nk::reduce(nk::ReduceOp::Sum, dout, dx, DType::Float32);
    benchmark::DoNotOptimize(out);
  }
  state.counters["GB/s"] = benchmark::Counter(1.0 * n * sizeof(float) * state.iterations(),
                                              benchmark::Counter::kIsRate,
                                              benchmark::Counter::kIs1000);
}
BENCHMARK(BM_sum_f32)->Unit(benchmark::kMillisecond)->UseRealTime();

struct Attention {
  int64_t S, H = 2, D = 64;
  std::vector<float> q, k, v, o, dout, dq, dk, dv, smax, ssum;
  explicit Attention(int64_t s) : S(s) {
    q = random_floats(S * H * D), k = random_floats(S * H * D), v = random_floats(S * H * D);
    dout = random_floats(S * H * D);
    o.resize(S * H * D), dq.resize(S * H * D), dk.resize(S * H * D), dv.resize(S * H * D);
    smax.resize(H * S * 8), ssum.resize(H * S * 8);
  }
  // BSND memory, [B, N, S, D] descriptors.
  TensorDesc bsnd(std::vector<float>& t) const {
    return TensorDesc::make(t.data(), DType::Float32, {1, H, S, D}, {S * H * D, D, H * D, 1});
  }
  TensorDesc stats(std::vector<float>& t) const {
    return TensorDesc::make(t.data(), DType::Float32, {1, H, S, 8});
  }
  nk::FlashAttentionArgs args() {
    nk::FlashAttentionArgs a;
    a.q = bsnd(q), a.k = bsnd(k), a.v = bsnd(v);
    a.band.next = 0;
    a.band.bottom_right = true;
    a.scale = 0.125;
    return a;
  }
  double causal_flops(int gemms) const { return gemms * 2.0 * S * S / 2 * D * H; }
};

void BM_flash_attention_fwd(benchmark::State& state) {
  Attention t(state.range(0));
  auto a = t.args();
  for (auto _ : state) {
    nk::flash_attention_forward(a, t.bsnd(t.o), t.stats(t.smax), t.stats(t.ssum));
  }
  state.counters["GFLOP/s"] = benchmark::Counter(t.causal_flops(2) * state.iterations(),
                                                 benchmark::Counter::kIsRate,
                                                 benchmark::Counter::kIs1000);
}
BENCHMARK(BM_flash_attention_fwd)
    ->Arg(1024)
    ->Arg(4096)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_flash_attention_bwd(benchmark::State& state) {
  Attention t(state.range(0));
  auto a = t.args();
  nk::flash_attention_forward(a, t.bsnd(t.o), t.stats(t.smax), t.stats(t.ssum));
  for (auto _ : state) {
    nk::flash_attention_backward(a, t.bsnd(t.o), t.bsnd(t.dout), t.stats(t.smax),
                                 t.stats(t.ssum), t.bsnd(t.dq), t.bsnd(t.dk), t.bsnd(t.dv));
  }
  state.counters["GFLOP/s"] = benchmark::Counter(t.causal_flops(5) * state.iterations(),
                                                 benchmark::Counter::kIsRate,
                                                 benchmark::Counter::kIs1000);
}
BENCHMARK(BM_flash_attention_bwd)
    ->Arg(1024)
    ->Arg(4096)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_rms_norm_f32(benchmark::State& state) {
  const int64_t rows = 8192, cols = 2048;
  auto x = random_floats(rows * cols), g = random_floats(cols);
  std::vector<float> y(rows * cols), r(rows);
  TensorDesc dx = TensorDesc::make(x.data(), DType::Float32, {rows, cols});
  TensorDesc dy = TensorDesc::make(y.data(), DType::Float32, {rows, cols});
  TensorDesc dg = TensorDesc::make(g.data(), DType::Float32, {cols});
  TensorDesc dr = TensorDesc::make(r.data(), DType::Float32, {rows, 1});
  for (auto _ : state) nk::rms_norm(dy, dr, dx, &dg, 1, 1e-6);
  state.counters["GB/s"] = benchmark::Counter(2.0 * rows * cols * 4 * state.iterations(),
                                              benchmark::Counter::kIsRate,
                                              benchmark::Counter::kIs1000);
}
BENCHMARK(BM_rms_norm_f32)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_swiglu_f32(benchmark::State& state) {
  const int64_t rows = 8192, half = 2752;
  auto x = random_floats(rows * 2 * half);
  std::vector<float> y(rows * half);
  TensorDesc a = TensorDesc::make(x.data(), DType::Float32, {rows, half}, {2 * half, 1});
  TensorDesc b = TensorDesc::make(x.data() + half, DType::Float32, {rows, half}, {2 * half, 1});
  TensorDesc dy = TensorDesc::make(y.data(), DType::Float32, {rows, half});
  for (auto _ : state) nk::swiglu(dy, a, b);
  state.counters["GB/s"] = benchmark::Counter(3.0 * rows * half * 4 * state.iterations(),
                                              benchmark::Counter::kIsRate,
                                              benchmark::Counter::kIs1000);
}
BENCHMARK(BM_swiglu_f32)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_rotary_mul_f32(benchmark::State& state) {
  const int64_t B = 4, S = 2048, N = 16, D = 128;
  auto x = random_floats(B * S * N * D), r1 = random_floats(S * D), r2 = random_floats(S * D);
  std::vector<float> y(B * S * N * D);
  TensorDesc dx = TensorDesc::make(x.data(), DType::Float32, {B, S, N, D});
  TensorDesc dy = TensorDesc::make(y.data(), DType::Float32, {B, S, N, D});
  TensorDesc d1 = TensorDesc::make(r1.data(), DType::Float32, {B, S, N, D}, {0, D, 0, 1});
  TensorDesc d2 = TensorDesc::make(r2.data(), DType::Float32, {B, S, N, D}, {0, D, 0, 1});
  for (auto _ : state) nk::rotary_mul(dy, dx, d1, d2, nk::RotaryMode::Half);
  state.counters["GB/s"] = benchmark::Counter(2.0 * B * S * N * D * 4 * state.iterations(),
                                              benchmark::Counter::kIsRate,
                                              benchmark::Counter::kIs1000);
}
BENCHMARK(BM_rotary_mul_f32)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
