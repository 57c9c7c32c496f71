// Errors belong to their stream (include/npu/runtime.h, runtime/stream.cpp): who is told of a
// failed task, and when the stream runs work again. Threads play the roles of the issue's
// report: B's stream fails, A synchronizes the whole device.
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace {

void failingTask(void*) { npuTaskFail("index 7 is out of range"); }
void countTask(void* arg) { static_cast<std::atomic<int>*>(arg)->fetch_add(1); }

std::string lastMessage() { return npuGetLastErrorMessage(); }

bool namesTheFault(const std::string& message) {
  return message.find("task 'aten::gather' failed") != std::string::npos &&
         message.find("index 7 is out of range") != std::string::npos;
}

// Runs `fn` on a new thread (a different launcher) and waits for it.
template <typename F>
void onOtherThread(F fn) {
  std::thread(fn).join();
}

}  // namespace

TEST(StreamErrors, DeviceSynchronizeOfAnotherThreadReportsButDoesNotTakeTheError) {
  npuStream_t s = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&s));
  std::atomic<int> ran{0};
  ASSERT_NPU_OK(npuLaunchTask(s, "aten::gather", failingTask, nullptr));
  ASSERT_NPU_OK(npuLaunchTask(s, "after", countTask, &ran));
  // Another thread synchronizes the device twice: told both times, the error stays.
  for (int i = 0; i < 2; ++i) {
    onOtherThread([] {
      EXPECT_EQ(npuDeviceSynchronize(), npuErrorLaunchFailure);
      EXPECT_TRUE(namesTheFault(lastMessage())) << lastMessage();
    });
  }
  // Work launched meanwhile by the stream's owner is still skipped, not run on garbage.
  ASSERT_NPU_OK(npuLaunchTask(s, "after", countTask, &ran));
  // The owner's own synchronize reports it, then the stream works again.
  EXPECT_EQ(npuStreamSynchronize(s), npuErrorLaunchFailure);
  EXPECT_TRUE(namesTheFault(lastMessage())) << lastMessage();
  EXPECT_NE(lastMessage().find("2 later task(s) on the stream were skipped"), std::string::npos)
      << lastMessage();
  EXPECT_EQ(ran.load(), 0);
  ASSERT_NPU_OK(npuLaunchTask(s, "after", countTask, &ran));
  ASSERT_NPU_OK(npuStreamSynchronize(s));
  ASSERT_NPU_OK(npuDeviceSynchronize());
  EXPECT_EQ(ran.load(), 1);
  ASSERT_NPU_OK(npuStreamDestroy(s));
}

TEST(StreamErrors, DeviceSynchronizeByTheLaunchingThreadClearsIt) {
  // The single-threaded program: device synchronize reports the fault, the stream runs again.
  std::atomic<int> ran{0};
  ASSERT_NPU_OK(npuLaunchTask(nullptr, "aten::gather", failingTask, nullptr));
  EXPECT_EQ(npuDeviceSynchronize(), npuErrorLaunchFailure);
  EXPECT_TRUE(namesTheFault(lastMessage())) << lastMessage();
  ASSERT_NPU_OK(npuLaunchTask(nullptr, "after", countTask, &ran));
  ASSERT_NPU_OK(npuStreamSynchronize(nullptr));
  EXPECT_EQ(ran.load(), 1);
}

TEST(StreamErrors, EveryThreadWhoseWorkWasSkippedIsTold) {
  // A second thread's work on the same stream is skipped: it is told at its device synchronize
  // even after the thread that launched the fault has been told at its own.
  npuStream_t s = nullptr;
  std::atomic<int> ran{0};
  ASSERT_NPU_OK(npuStreamCreate(&s));
  ASSERT_NPU_OK(npuLaunchTask(s, "aten::gather", failingTask, nullptr));
  std::atomic<bool> launched{false}, go{false};
  npuError_t other_first = npuSuccess, other_second = npuSuccess;
  std::thread other([&] {
    npuLaunchTask(s, "other", countTask, &ran);
    launched = true;
    while (!go) std::this_thread::yield();
    other_first = npuDeviceSynchronize();
    other_second = npuDeviceSynchronize();
  });
  while (!launched) std::this_thread::yield();
  EXPECT_EQ(npuDeviceSynchronize(), npuErrorLaunchFailure);  // the launcher of the fault
  go = true;
  other.join();
  EXPECT_EQ(other_first, npuErrorLaunchFailure);  // its task was skipped: told
  EXPECT_EQ(other_second, npuSuccess);             // everybody told: cleared
  ASSERT_NPU_OK(npuLaunchTask(s, "after", countTask, &ran));
  ASSERT_NPU_OK(npuStreamSynchronize(s));
  EXPECT_EQ(ran.load(), 1);
  ASSERT_NPU_OK(npuStreamDestroy(s));
}

TEST(StreamErrors, EventRecordedAfterTheFaultReportsItWithoutClearingIt) {
  npuStream_t s = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&s));
  npuEvent_t before = nullptr, after = nullptr;
  ASSERT_NPU_OK(npuEventCreate(&before));
  ASSERT_NPU_OK(npuEventCreate(&after));
  ASSERT_NPU_OK(npuEventRecord(before, s));
  ASSERT_NPU_OK(npuLaunchTask(s, "aten::gather", failingTask, nullptr));
  ASSERT_NPU_OK(npuEventRecord(after, s));
  ASSERT_NPU_OK(npuEventSynchronize(before));  // marks work done before the fault
  EXPECT_EQ(npuEventSynchronize(after), npuErrorLaunchFailure);
  EXPECT_TRUE(namesTheFault(lastMessage())) << lastMessage();
  EXPECT_EQ(npuEventQuery(after), npuErrorLaunchFailure);
  EXPECT_EQ(npuEventSynchronize(after), npuErrorLaunchFailure);  // every time
  EXPECT_EQ(npuStreamSynchronize(s), npuErrorLaunchFailure);     // the stream still has it
  // Recorded again on the now healthy stream, the event is clean.
  ASSERT_NPU_OK(npuEventRecord(after, s));
  ASSERT_NPU_OK(npuEventSynchronize(after));
  ASSERT_NPU_OK(npuEventQuery(after));
  float ms = -1;
  ASSERT_NPU_OK(npuEventElapsedTime(&ms, before, after));
  EXPECT_GE(ms, 0.0f);
  ASSERT_NPU_OK(npuEventDestroy(before));
  ASSERT_NPU_OK(npuEventDestroy(after));
  ASSERT_NPU_OK(npuStreamDestroy(s));
}

TEST(StreamErrors, AStreamWaitingForAFailedRecordFailsToo) {
  npuStream_t producer = nullptr, consumer = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&producer));
  ASSERT_NPU_OK(npuStreamCreate(&consumer));
  npuEvent_t ev = nullptr;
  ASSERT_NPU_OK(npuEventCreateWithFlags(&ev, npuEventDisableTiming));
  std::atomic<int> ran{0};
  ASSERT_NPU_OK(npuLaunchTask(producer, "aten::gather", failingTask, nullptr));
  ASSERT_NPU_OK(npuEventRecord(ev, producer));
  ASSERT_NPU_OK(npuStreamWaitEvent(consumer, ev, 0));
  ASSERT_NPU_OK(npuLaunchTask(consumer, "reads the producer's output", countTask, &ran));
  EXPECT_EQ(npuStreamSynchronize(consumer), npuErrorLaunchFailure);
  EXPECT_NE(lastMessage().find("waited for an event recorded after a failure"),
            std::string::npos)
      << lastMessage();
  EXPECT_TRUE(namesTheFault(lastMessage())) << lastMessage();
  EXPECT_EQ(ran.load(), 0);  // the consumer did not read garbage
  EXPECT_EQ(npuStreamSynchronize(producer), npuErrorLaunchFailure);
  ASSERT_NPU_OK(npuLaunchTask(consumer, "again", countTask, &ran));
  ASSERT_NPU_OK(npuStreamSynchronize(consumer));
  EXPECT_EQ(ran.load(), 1);
  ASSERT_NPU_OK(npuEventDestroy(ev));
  ASSERT_NPU_OK(npuStreamDestroy(producer));
  ASSERT_NPU_OK(npuStreamDestroy(consumer));
}

TEST(StreamErrors, BlockingCopyOnTheStreamReportsAndClears) {
  void* dev = nullptr;
  ASSERT_NPU_OK(npuMalloc(&dev, 64));
  std::vector<char> host(64, 1);
  ASSERT_NPU_OK(npuLaunchTask(nullptr, "aten::gather", failingTask, nullptr));
  onOtherThread([] { EXPECT_EQ(npuDeviceSynchronize(), npuErrorLaunchFailure); });
  // The copy reads what the stream produced: it reports the fault instead of stale bytes.
  EXPECT_EQ(npuMemcpy(host.data(), dev, 64, npuMemcpyDeviceToHost), npuErrorLaunchFailure);
  EXPECT_TRUE(namesTheFault(lastMessage())) << lastMessage();
  ASSERT_NPU_OK(npuMemcpy(host.data(), dev, 64, npuMemcpyDeviceToHost));
  ASSERT_NPU_OK(npuFree(dev));
}

TEST(StreamErrors, ThreadsOnTheirOwnStreamsEachSeeOnlyWhatConcernsThem) {
  // A launches healthy work on its stream and synchronizes it over and over while B's stream
  // fails: A's stream synchronizes never report B's fault, B's own synchronize always does.
  constexpr int kRounds = 200;
  std::atomic<int> a_errors{0}, b_reported{0}, b_ran{0};
  std::thread a([&] {
    npuStream_t s = nullptr;
    ASSERT_NPU_OK(npuStreamCreate(&s));
    std::atomic<int> ran{0};
    for (int i = 0; i < kRounds; ++i) {
      npuLaunchTask(s, "a", countTask, &ran);
      if (npuStreamSynchronize(s) != npuSuccess) ++a_errors;
      if (i % 10 == 0) npuDeviceSynchronize();  // sees B's fault at times; must not take it
    }
    EXPECT_EQ(ran.load(), kRounds);
    npuStreamDestroy(s);
  });
  std::thread b([&] {
    npuStream_t s = nullptr;
    ASSERT_NPU_OK(npuStreamCreate(&s));
    for (int i = 0; i < kRounds; ++i) {
      npuLaunchTask(s, "aten::gather", failingTask, nullptr);
      npuLaunchTask(s, "b", countTask, &b_ran);
      const npuError_t e = npuStreamSynchronize(s);
      if (e == npuErrorLaunchFailure && namesTheFault(lastMessage())) ++b_reported;
    }
    npuStreamDestroy(s);
  });
  a.join();
  b.join();
  EXPECT_EQ(a_errors.load(), 0);
  EXPECT_EQ(b_reported.load(), kRounds);
  EXPECT_EQ(b_ran.load(), 0);
}
