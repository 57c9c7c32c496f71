// Runtime latencies and bandwidth. Figures only; nothing here asserts on time.
//   launch_to_run: from npuLaunchTask to the first instruction of an empty task
//   launch_cost: host time of 512 back-to-back npuLaunchTask calls (below the queue bound;
//     the synchronize after them is not timed); items_per_second = launches per second
//   launch_throughput: back-to-back launches of empty tasks, then one synchronize
//   launch_throughput_beyond_bound: the same with 20000 tasks, so that launches meet the
//     stream's queue bound (NPU_SIM_MAX_PENDING_LAUNCHES, 1024) and wait for room
//   event_roundtrip: npuEventRecord + npuEventSynchronize on an idle stream
//   copy_h2d vs memcpy: host-to-device bandwidth against plain memcpy of the same size
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "npu/runtime.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Stamp {
  std::atomic<int64_t> ran_at{0};
};

void stampTask(void* arg) {
  static_cast<Stamp*>(arg)->ran_at.store(Clock::now().time_since_epoch().count(),
                                         std::memory_order_release);
}
void emptyTask(void*) {}

void check(npuError_t e) {
  if (e != npuSuccess) {
    std::fprintf(stderr, "runtime error: %s\n", npuGetLastErrorMessage());
    std::abort();
  }
}

void BM_launch_to_run(benchmark::State& state) {
  npuStream_t s = nullptr;
  check(npuStreamCreate(&s));
  Stamp stamp;
  for (auto _ : state) {
    stamp.ran_at.store(0, std::memory_order_relaxed);
    auto t0 = Clock::now();
    check(npuLaunchTask(s, "empty", stampTask, &stamp));
    int64_t ran = 0;
    while ((ran = stamp.ran_at.load(std::memory_order_acquire)) == 0) {
    }
    state.SetIterationTime(std::chrono::duration<double>(
                               Clock::duration(ran) - t0.time_since_epoch())
                               .count());
  }
  check(npuStreamSynchronize(s));
  check(npuStreamDestroy(s));
}
BENCHMARK(BM_launch_to_run)->UseManualTime();

void BM_launch_throughput(benchmark::State& state) {
  npuStream_t s = nullptr;
  check(npuStreamCreate(&s));
  for (auto _ : state) {
    for (int i = 0; i < 1000; ++i) check(npuLaunchTask(s, "empty", emptyTask, nullptr));
    check(npuStreamSynchronize(s));
  }
  state.SetItemsProcessed(state.iterations() * 1000);
  check(npuStreamDestroy(s));
}
BENCHMARK(BM_launch_throughput);

void BM_launch_cost(benchmark::State& state) {
  npuStream_t s = nullptr;
  check(npuStreamCreate(&s));
  for (auto _ : state) {
    auto t0 = Clock::now();
    for (int i = 0; i < 512; ++i) check(npuLaunchTask(s, "empty", emptyTask, nullptr));
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - t0).count());
    check(npuStreamSynchronize(s));
  }
  state.SetItemsProcessed(state.iterations() * 512);  // launches/s = 1 / the cost of one
  check(npuStreamDestroy(s));
}
BENCHMARK(BM_launch_cost)->UseManualTime();

void BM_launch_throughput_beyond_bound(benchmark::State& state) {
  npuStream_t s = nullptr;
  check(npuStreamCreate(&s));
  for (auto _ : state) {
    for (int i = 0; i < 20000; ++i) check(npuLaunchTask(s, "empty", emptyTask, nullptr));
    check(npuStreamSynchronize(s));
  }
  state.SetItemsProcessed(state.iterations() * 20000);
  check(npuStreamDestroy(s));
}
BENCHMARK(BM_launch_throughput_beyond_bound);

void BM_event_roundtrip(benchmark::State& state) {
  npuStream_t s = nullptr;
  npuEvent_t ev = nullptr;
  check(npuStreamCreate(&s));
  check(npuEventCreateWithFlags(&ev, npuEventDisableTiming));
  for (auto _ : state) {
    check(npuEventRecord(ev, s));
    check(npuEventSynchronize(ev));
  }
  check(npuEventDestroy(ev));
  check(npuStreamDestroy(s));
}
BENCHMARK(BM_event_roundtrip);

void BM_copy_h2d(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<char> host(bytes, 1);
  void* dev = nullptr;
  check(npuMalloc(&dev, bytes));
  for (auto _ : state) check(npuMemcpy(dev, host.data(), bytes, npuMemcpyHostToDevice));
  state.SetBytesProcessed(state.iterations() * bytes);
  check(npuFree(dev));
}
BENCHMARK(BM_copy_h2d)->Arg(64 << 10)->Arg(64 << 20)->UseRealTime();

void BM_memcpy_baseline(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}
BENCHMARK(BM_memcpy_baseline)->Arg(64 << 10)->Arg(64 << 20)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
