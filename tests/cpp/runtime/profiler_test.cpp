// The runtime's activity records (include/npu/profiler.h): what a session records, with which
// correlation id, stream and times.
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "npu/profiler.h"
#include "test_util.h"

namespace {

void sleepTask(void* arg) {
  std::this_thread::sleep_for(std::chrono::milliseconds(reinterpret_cast<intptr_t>(arg)));
}
void noopTask(void*) {}

std::vector<npuActivityRecord> drainAll() {
  std::vector<npuActivityRecord> out(64);
  std::vector<npuActivityRecord> all;
  while (size_t n = npuProfilerDrain(out.data(), out.size())) {
    all.insert(all.end(), out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n));
  }
  return all;
}

const npuActivityRecord* findByName(const std::vector<npuActivityRecord>& records,
                                    const char* name) {
  for (const auto& r : records) {
    if (std::strcmp(r.name, name) == 0) return &r;
  }
  return nullptr;
}

TEST(Profiler, RecordsNothingWithoutASession) {
  ASSERT_NPU_OK(npuLaunchTask(nullptr, "before", &noopTask, nullptr));
  ASSERT_NPU_OK(npuDeviceSynchronize());
  ASSERT_NPU_OK(npuProfilerStart());
  ASSERT_NPU_OK(npuProfilerStop());
  EXPECT_TRUE(drainAll().empty());
}

TEST(Profiler, KernelRecordCarriesCorrelationIdAndRunsAfterItsLaunch) {
  ASSERT_NPU_OK(npuProfilerStart());
  EXPECT_EQ(npuProfilerIsActive(), 1);
  const uint64_t previous = npuProfilerSetCorrelationId(42);
  const uint64_t before = npuProfilerClockNs();
  // The first task keeps the stream busy, so the second starts well after its launch.
  ASSERT_NPU_OK(npuLaunchTask(nullptr, "busy", &sleepTask, reinterpret_cast<void*>(20)));
  ASSERT_NPU_OK(npuLaunchTask(nullptr, "mm", &noopTask, nullptr));
  npuProfilerSetCorrelationId(previous);
  ASSERT_NPU_OK(npuDeviceSynchronize());
  ASSERT_NPU_OK(npuProfilerStop());
  EXPECT_EQ(npuProfilerIsActive(), 0);

  const auto records = drainAll();
  ASSERT_EQ(records.size(), 2u);
  const npuActivityRecord* busy = findByName(records, "busy");
  const npuActivityRecord* mm = findByName(records, "mm");
  ASSERT_TRUE(busy && mm);
  EXPECT_EQ(mm->correlation_id, 42u);
  EXPECT_EQ(mm->kind, npuActivityKernel);
  EXPECT_EQ(mm->device, 0);
  EXPECT_EQ(mm->stream_id, 0);  // the default stream
  EXPECT_GE(mm->launch_ns, before);
  EXPECT_GE(mm->start_ns, mm->launch_ns);
  EXPECT_GE(mm->end_ns, mm->start_ns);
  EXPECT_GE(mm->start_ns, busy->end_ns);  // one stream runs its tasks in order
  EXPECT_GE(busy->end_ns - busy->start_ns, 20'000'000u);
  EXPECT_GT(mm->launch_thread, 0);
}

TEST(Profiler, CopiesAndMemsetsRecordDirectionAndBytes) {
  void* dev = nullptr;
  ASSERT_NPU_OK(npuMalloc(&dev, 4096));
  std::vector<char> host(4096, 1);
  ASSERT_NPU_OK(npuProfilerStart());
  ASSERT_NPU_OK(npuMemcpy(dev, host.data(), 4096, npuMemcpyDefault));
  ASSERT_NPU_OK(npuMemsetAsync(dev, 0, 1024, nullptr));
  ASSERT_NPU_OK(npuMemcpy(host.data(), dev, 2048, npuMemcpyDeviceToHost));
  ASSERT_NPU_OK(npuProfilerStop());
  const auto records = drainAll();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].kind, npuActivityMemcpy);
  EXPECT_EQ(records[0].memcpy_kind, npuMemcpyHostToDevice);  // resolved from the pointers
  EXPECT_EQ(records[0].bytes, 4096u);
  EXPECT_EQ(records[1].kind, npuActivityMemset);
  EXPECT_EQ(records[1].bytes, 1024u);
  EXPECT_EQ(records[2].memcpy_kind, npuMemcpyDeviceToHost);
  EXPECT_EQ(records[2].bytes, 2048u);
  ASSERT_NPU_OK(npuFree(dev));
}

TEST(Profiler, StreamsHaveDistinctIds) {
  npuStream_t a = nullptr, b = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&a));
  ASSERT_NPU_OK(npuStreamCreate(&b));
  int id_default = -1, id_a = -1, id_b = -1;
  ASSERT_NPU_OK(npuStreamGetId(nullptr, &id_default));
  ASSERT_NPU_OK(npuStreamGetId(a, &id_a));
  ASSERT_NPU_OK(npuStreamGetId(b, &id_b));
  EXPECT_EQ(id_default, 0);
  EXPECT_NE(id_a, id_b);
  EXPECT_GT(id_a, 0);
  EXPECT_GT(id_b, 0);

  ASSERT_NPU_OK(npuProfilerStart());
  ASSERT_NPU_OK(npuLaunchTask(a, "on_a", &noopTask, nullptr));
  ASSERT_NPU_OK(npuLaunchTask(b, "on_b", &noopTask, nullptr));
  ASSERT_NPU_OK(npuDeviceSynchronize());
  ASSERT_NPU_OK(npuProfilerStop());
  const auto records = drainAll();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(findByName(records, "on_a")->stream_id, id_a);
  EXPECT_EQ(findByName(records, "on_b")->stream_id, id_b);
  EXPECT_EQ(npuStreamGetId(a, nullptr), npuErrorInvalidValue);
  ASSERT_NPU_OK(npuStreamDestroy(a));
  ASSERT_NPU_OK(npuStreamDestroy(b));
}

TEST(Profiler, StopWaitsForTheSessionsTasksAndLaterLaunchesAreNotRecorded) {
  npuStream_t other = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&other));
  ASSERT_NPU_OK(npuProfilerStart());
  ASSERT_NPU_OK(npuLaunchTask(nullptr, "slow", &sleepTask, reinterpret_cast<void*>(30)));
  ASSERT_NPU_OK(npuLaunchTask(nullptr, "late", &noopTask, nullptr));
  ASSERT_NPU_OK(npuLaunchTask(other, "slow_other", &sleepTask, reinterpret_cast<void*>(30)));
  ASSERT_NPU_OK(npuProfilerStop());  // no synchronize: Stop itself waits
  const auto first = drainAll();
  EXPECT_TRUE(findByName(first, "late"));
  EXPECT_TRUE(findByName(first, "slow_other"));
  ASSERT_NPU_OK(npuLaunchTask(nullptr, "after_stop", &noopTask, nullptr));
  ASSERT_NPU_OK(npuDeviceSynchronize());
  EXPECT_TRUE(drainAll().empty());
  ASSERT_NPU_OK(npuStreamDestroy(other));

  // A task of session 1 still queued when session 2 opens is not session 2's.
  ASSERT_NPU_OK(npuProfilerStart());
  ASSERT_NPU_OK(npuProfilerStop());
  ASSERT_NPU_OK(npuLaunchTask(nullptr, "unprofiled", &noopTask, nullptr));
  ASSERT_NPU_OK(npuDeviceSynchronize());
  EXPECT_TRUE(drainAll().empty());
}

TEST(Profiler, OneSessionAtATime) {
  ASSERT_NPU_OK(npuProfilerStart());
  EXPECT_EQ(npuProfilerStart(), npuErrorNotReady);
  EXPECT_NE(std::string(npuGetLastErrorMessage()).find("already open"), std::string::npos);
  ASSERT_NPU_OK(npuProfilerStop());
  ASSERT_NPU_OK(npuProfilerStop());  // idempotent
}

TEST(Profiler, CorrelationIdIsPerThread) {
  npuProfilerSetCorrelationId(7);
  uint64_t seen_on_other = 99;
  std::thread([&] { seen_on_other = npuProfilerGetCorrelationId(); }).join();
  EXPECT_EQ(seen_on_other, 0u);
  EXPECT_EQ(npuProfilerSetCorrelationId(0), 7u);
}

}  // namespace
