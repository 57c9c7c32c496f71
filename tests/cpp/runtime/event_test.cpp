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

// A stream that waited for an event and was then synchronized by the host: the event must
// query complete at once (CUDA's order). The recording stream counts the record a moment after
// the event completes; a wait that ended on the event alone let the host see the waiting
// stream done while npuEventQuery still said not ready (seen 1 in ~50 under load).
TEST(Event, CompleteOnceAStreamThatWaitedForItIsSynchronized) {
  npuStream_t side = nullptr, main_stream = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&side));
  ASSERT_NPU_OK(npuStreamCreate(&main_stream));
  npuEvent_t ev = nullptr;
  ASSERT_NPU_OK(npuEventCreate(&ev));
  for (int i = 0; i < 300; ++i) {
    ASSERT_NPU_OK(npuLaunchTask(side, "sleep", sleepTask, reinterpret_cast<void*>(i % 3 ? 0 : 1)));
    ASSERT_NPU_OK(npuEventRecord(ev, side));
    ASSERT_NPU_OK(npuStreamWaitEvent(main_stream, ev, 0));
    ASSERT_NPU_OK(npuStreamSynchronize(main_stream));
    ASSERT_EQ(npuEventQuery(ev), npuSuccess) << "iteration " << i;
  }
  ASSERT_NPU_OK(npuEventDestroy(ev));
  ASSERT_NPU_OK(npuStreamDestroy(side));
  ASSERT_NPU_OK(npuStreamDestroy(main_stream));
}
