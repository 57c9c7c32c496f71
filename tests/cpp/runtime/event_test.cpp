#include <chrono>
#include <thread>

#include "test_util.h"

namespace {
void sleepTask(void* arg) {
  std::this_thread::sleep_for(std::chrono::milliseconds(reinterpret_cast<intptr_t>(arg)));
}
}  // namespace

TEST(Event, RecordQuerySynchronizeAndElapsedTime) {
  npuEvent_t start = nullptr, end = nullptr;
  ASSERT_NPU_OK(npuEventCreate(&start));
  ASSERT_NPU_OK(npuEventCreate(&end));
  EXPECT_EQ(npuEventQuery(start), npuSuccess);  // never recorded counts as complete
  float ms = 0;
  EXPECT_EQ(npuEventElapsedTime(&ms, start, end), npuErrorInvalidResourceHandle);
  ASSERT_NPU_OK(npuEventRecord(start, nullptr));
  ASSERT_NPU_OK(npuLaunchTask(nullptr, "sleep", sleepTask, reinterpret_cast<void*>(50)));
  ASSERT_NPU_OK(npuEventRecord(end, nullptr));
  EXPECT_EQ(npuEventQuery(end), npuErrorNotReady);
  EXPECT_EQ(npuEventElapsedTime(&ms, start, end), npuErrorNotReady);
  ASSERT_NPU_OK(npuEventSynchronize(end));
  EXPECT_EQ(npuEventQuery(end), npuSuccess);
  ASSERT_NPU_OK(npuEventElapsedTime(&ms, start, end));
  EXPECT_GE(ms, 50.0f);
  EXPECT_LT(ms, 1000.0f);
  ASSERT_NPU_OK(npuEventDestroy(start));
  ASSERT_NPU_OK(npuEventDestroy(end));
  EXPECT_EQ(npuEventQuery(end), npuErrorInvalidResourceHandle);
}

TEST(Event, TimingDisabledAndBadFlags) {
  npuEvent_t a = nullptr, b = nullptr;
  ASSERT_NPU_OK(npuEventCreateWithFlags(&a, npuEventDisableTiming));
  ASSERT_NPU_OK(npuEventCreate(&b));
  ASSERT_NPU_OK(npuEventRecord(a, nullptr));
  ASSERT_NPU_OK(npuEventRecord(b, nullptr));
  ASSERT_NPU_OK(npuEventSynchronize(b));
  float ms = 0;
  EXPECT_EQ(npuEventElapsedTime(&ms, a, b), npuErrorInvalidResourceHandle);
  EXPECT_NE(std::string(npuGetLastErrorMessage()).find("timing disabled"), std::string::npos);
  npuEvent_t c = nullptr;
  EXPECT_EQ(npuEventCreateWithFlags(&c, 0x100), npuErrorInvalidValue);
  ASSERT_NPU_OK(npuEventDestroy(a));
  ASSERT_NPU_OK(npuEventDestroy(b));
}

TEST(Event, DestroyWhileRecordIsPendingIsSafe) {
  npuEvent_t ev = nullptr;
  ASSERT_NPU_OK(npuEventCreate(&ev));
  ASSERT_NPU_OK(npuLaunchTask(nullptr, "sleep", sleepTask, reinterpret_cast<void*>(50)));
  ASSERT_NPU_OK(npuEventRecord(ev, nullptr));
  ASSERT_NPU_OK(npuEventDestroy(ev));  // the queued record keeps it alive
  ASSERT_NPU_OK(npuDeviceSynchronize());
}

TEST(Event, WaitOnAnUnrecordedEventIsANoOp) {
  npuEvent_t ev = nullptr;
  ASSERT_NPU_OK(npuEventCreate(&ev));
  ASSERT_NPU_OK(npuStreamWaitEvent(nullptr, ev, 0));
  ASSERT_NPU_OK(npuStreamSynchronize(nullptr));
  ASSERT_NPU_OK(npuEventDestroy(ev));
}
