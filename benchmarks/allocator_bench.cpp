// Cached allocate + free latency of the caching allocator, next to malloc + free of the same
// sizes. The allocator's figure is the hot path: the block comes from the free set every time
// (the first, uncached allocation happens before timing starts).
#include <benchmark/benchmark.h>

#include <cstdlib>

#include "npu/caching_allocator.h"

namespace {

npu::alloc::CachingAllocator& allocator() {
  static auto* a = new npu::alloc::CachingAllocator(npu::alloc::AllocatorConfig{});
  return *a;
}

void BM_CachedAllocateFree(benchmark::State& state) {
  const auto size = static_cast<size_t>(state.range(0));
  auto& a = allocator();
  a.free(a.allocate(size, 0, nullptr));  // creates the segment: later rounds hit the cache
  for (auto _ : state) {
    void* p = a.allocate(size, 0, nullptr);
    benchmark::DoNotOptimize(p);
    a.free(p);
  }
  state.SetLabel("npu::alloc::CachingAllocator");
}

void BM_MallocFree(benchmark::State& state) {
  const auto size = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void* p = std::malloc(size);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
  state.SetLabel("malloc");
}

BENCHMARK(BM_CachedAllocateFree)->Arg(512)->Arg(64 << 10)->Arg(4 << 20);
BENCHMARK(BM_MallocFree)->Arg(512)->Arg(64 << 10)->Arg(4 << 20);

// Two threads on one device: the cost of sharing its lock.
void BM_CachedAllocateFreeTwoThreads(benchmark::State& state) {
  auto& a = allocator();
  for (auto _ : state) {
    void* p = a.allocate(64 << 10, 0, nullptr);
    benchmark::DoNotOptimize(p);
    a.free(p);
  }
}
BENCHMARK(BM_CachedAllocateFreeTwoThreads)->Threads(2)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
