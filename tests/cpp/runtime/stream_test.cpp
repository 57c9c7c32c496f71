#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace {

using Clock = std::chrono::steady_clock;

void sleepTask(void* arg) {
  std::this_thread::sleep_for(std::chrono::milliseconds(reinterpret_cast<intptr_t>(arg)));
}

struct Log {
  std::mutex mutex;
  std::vector<int> order;
};
struct LogEntry {
  Log* log;
  int value;
};
void appendTask(void* arg) {
  auto* e = static_cast<LogEntry*>(arg);
  std::lock_guard<std::mutex> lock(e->log->mutex);
  e->log->order.push_back(e->value);
}

// A task that waits (up to a generous deadline) until someone opens its gate.
struct Gate {
  std::atomic<bool> open{false};
  std::atomic<bool> sawOpen{false};
};
bool waitOpen(Gate& gate) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (!gate.open.load(std::memory_order_acquire)) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}
void gatedTask(void* arg) {
  auto* gate = static_cast<Gate*>(arg);
  gate->sawOpen = waitOpen(*gate);
}
struct Handshake {
  Gate* mine;
  Gate* other;
};
void handshakeTask(void* arg) {
  auto* h = static_cast<Handshake*>(arg);
  h->mine->open.store(true, std::memory_order_release);
  h->other->sawOpen = waitOpen(*h->other);
}

void failingTask(void*) { npuTaskFail("the kernel found NaN in its input"); }
void throwingTask(void*) { throw std::runtime_error("index 12 is out of bounds"); }
void countTask(void* arg) { static_cast<std::atomic<int>*>(arg)->fetch_add(1); }

std::string lastMessage() { return npuGetLastErrorMessage(); }

}  // namespace

TEST(Stream, LaunchReturnsBeforeTheTaskRuns) {
  // The task blocks until the test opens its gate after npuLaunchTask returned: a synchronous
  // launch would make the task give up waiting (deadline 30 s) and report it. No clock bounds.
  npuStream_t s = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&s));
  Gate gate;
  ASSERT_NPU_OK(npuLaunchTask(s, "gated", gatedTask, &gate));
  EXPECT_EQ(npuStreamQuery(s), npuErrorNotReady);
  gate.open.store(true, std::memory_order_release);
  ASSERT_NPU_OK(npuStreamSynchronize(s));
  EXPECT_TRUE(gate.sawOpen.load());
  EXPECT_EQ(npuStreamQuery(s), npuSuccess);
  ASSERT_NPU_OK(npuStreamDestroy(s));
}

TEST(Stream, TasksRunInOrder) {
  Log log;
  std::vector<LogEntry> entries;
  for (int i = 0; i < 100; ++i) entries.push_back({&log, i});
  for (auto& e : entries) ASSERT_NPU_OK(npuLaunchTask(nullptr, "append", appendTask, &e));
  ASSERT_NPU_OK(npuDeviceSynchronize());
  std::vector<int> expected(100);
  for (int i = 0; i < 100; ++i) expected[i] = i;
  EXPECT_EQ(log.order, expected);
}

TEST(Stream, TwoStreamsOrderedByAnEvent) {
  npuStream_t a = nullptr, b = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&a));
  ASSERT_NPU_OK(npuStreamCreateWithPriority(&b, 0, -1));
  int priority = 0;
  ASSERT_NPU_OK(npuStreamGetPriority(b, &priority));
  EXPECT_EQ(priority, -1);
  npuEvent_t ev = nullptr;
  ASSERT_NPU_OK(npuEventCreate(&ev));
  Log log;
  LogEntry first{&log, 1}, second{&log, 2};
  ASSERT_NPU_OK(npuLaunchTask(a, "sleep", sleepTask, reinterpret_cast<void*>(100)));
  ASSERT_NPU_OK(npuLaunchTask(a, "first", appendTask, &first));
  ASSERT_NPU_OK(npuEventRecord(ev, a));
  ASSERT_NPU_OK(npuStreamWaitEvent(b, ev, 0));
  ASSERT_NPU_OK(npuLaunchTask(b, "second", appendTask, &second));
  ASSERT_NPU_OK(npuStreamSynchronize(b));
  EXPECT_EQ(log.order, (std::vector<int>{1, 2}));
  ASSERT_NPU_OK(npuEventDestroy(ev));
  ASSERT_NPU_OK(npuStreamDestroy(a));
  ASSERT_NPU_OK(npuStreamDestroy(b));
}

TEST(Stream, WorkOnTwoStreamsOverlaps) {
  // Each task opens its own gate and waits for the other's: they can only both see the other
  // open if the two streams run at the same time (serialized, the first one times out).
  npuStream_t a = nullptr, b = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&a));
  ASSERT_NPU_OK(npuStreamCreate(&b));
  Gate gateA, gateB;
  Handshake onA{&gateA, &gateB}, onB{&gateB, &gateA};
  ASSERT_NPU_OK(npuLaunchTask(a, "handshake", handshakeTask, &onA));
  ASSERT_NPU_OK(npuLaunchTask(b, "handshake", handshakeTask, &onB));
  ASSERT_NPU_OK(npuStreamSynchronize(a));
  ASSERT_NPU_OK(npuStreamSynchronize(b));
  EXPECT_TRUE(gateB.sawOpen.load()) << "the task on stream a never saw stream b's task run";
  EXPECT_TRUE(gateA.sawOpen.load()) << "the task on stream b never saw stream a's task run";
  ASSERT_NPU_OK(npuStreamDestroy(a));
  ASSERT_NPU_OK(npuStreamDestroy(b));
}

TEST(Stream, TaskErrorSurfacesAtSynchronizeWithItsName) {
  npuStream_t s = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&s));
  std::atomic<int> ran{0};
  ASSERT_NPU_OK(npuLaunchTask(s, "aten::my_kernel", failingTask, nullptr));
  ASSERT_NPU_OK(npuLaunchTask(s, "after", countTask, &ran));  // launching still succeeds
  EXPECT_EQ(npuStreamSynchronize(s), npuErrorLaunchFailure);
  EXPECT_NE(lastMessage().find("task 'aten::my_kernel' failed"), std::string::npos)
      << lastMessage();
  EXPECT_NE(lastMessage().find("NaN in its input"), std::string::npos);
  EXPECT_NE(lastMessage().find("1 later task(s) on the stream were skipped"), std::string::npos)
      << lastMessage();
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(npuGetLastError(), npuErrorLaunchFailure);  // also the process's pending error
  // Reported once; the stream then works again.
  ASSERT_NPU_OK(npuLaunchTask(s, "after", countTask, &ran));
  ASSERT_NPU_OK(npuStreamSynchronize(s));
  EXPECT_EQ(ran.load(), 1);
  ASSERT_NPU_OK(npuStreamDestroy(s));
}

TEST(Stream, ExceptionInTaskIsCapturedAndQueryReportsIt) {
  ASSERT_NPU_OK(npuLaunchTask(nullptr, "aten::index", throwingTask, nullptr));
  npuError_t e = npuErrorNotReady;
  for (int i = 0; i < 1000 && e == npuErrorNotReady; ++i) {
    e = npuStreamQuery(nullptr);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(e, npuErrorLaunchFailure);
  EXPECT_NE(lastMessage().find("'aten::index' failed"), std::string::npos) << lastMessage();
  EXPECT_NE(lastMessage().find("index 12 is out of bounds"), std::string::npos);
}

TEST(Stream, LaunchBlockingMakesLaunchesSynchronous) {
  setenv("ASCEND_LAUNCH_BLOCKING", "1", 1);  // this test runs in its own process
  auto t0 = Clock::now();
  ASSERT_NPU_OK(npuLaunchTask(nullptr, "sleep", sleepTask, reinterpret_cast<void*>(100)));
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(100));
  EXPECT_EQ(npuLaunchTask(nullptr, "aten::bad", failingTask, nullptr), npuErrorLaunchFailure);
  EXPECT_NE(lastMessage().find("'aten::bad'"), std::string::npos);
}

TEST(Stream, ConcurrentLaunchFromTwoThreads) {
  npuStream_t s = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&s));
  std::atomic<int> ran{0};
  auto launcher = [&] {
    for (int i = 0; i < 5000; ++i) npuLaunchTask(s, "count", countTask, &ran);
  };
  std::thread t1(launcher), t2(launcher);
  t1.join();
  t2.join();
  ASSERT_NPU_OK(npuStreamSynchronize(s));
  EXPECT_EQ(ran.load(), 10000);
  ASSERT_NPU_OK(npuStreamDestroy(s));
}

TEST(Stream, BadHandlesAreErrors) {
  npuStream_t s = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&s));
  ASSERT_NPU_OK(npuStreamDestroy(s));
  EXPECT_EQ(npuStreamSynchronize(s), npuErrorInvalidResourceHandle);
  EXPECT_EQ(npuLaunchTask(nullptr, "x", nullptr, nullptr), npuErrorInvalidValue);
  npuStream_t def = nullptr;
  ASSERT_NPU_OK(npuGetDefaultStream(0, &def));
  EXPECT_EQ(npuStreamDestroy(def), npuErrorInvalidResourceHandle);
  EXPECT_EQ(npuStreamCreateWithPriority(&s, 0, 5), npuErrorInvalidValue);
  EXPECT_EQ(npuGetDefaultStream(42, &def), npuErrorInvalidDevice);
}

TEST(Stream, UtilizationReflectsBusyTime) {
  int pct = -1;
  ASSERT_NPU_OK(npuDeviceGetUtilization(0, &pct));  // first sample
  ASSERT_NPU_OK(npuLaunchTask(nullptr, "sleep", sleepTask, reinterpret_cast<void*>(200)));
  ASSERT_NPU_OK(npuDeviceSynchronize());
  ASSERT_NPU_OK(npuDeviceGetUtilization(0, &pct));
  EXPECT_GE(pct, 70);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_NPU_OK(npuDeviceGetUtilization(0, &pct));
  EXPECT_LE(pct, 10);
}

// ---- host runs and the hand-offs skipped on idle streams -------------------------------------

void recordThreadTask(void* arg) {
  *static_cast<std::thread::id*>(arg) = std::this_thread::get_id();
}

TEST(StreamHostRun, LaunchesRunOnTheCallingThreadInOrderWhileTheStreamIsIdle) {
  npuStream_t s;
  ASSERT_NPU_OK(npuStreamCreate(&s));
  ASSERT_NPU_OK(npuStreamBeginHostRun(s));
  std::thread::id ranOn;
  Log log;
  LogEntry one{&log, 1}, two{&log, 2};
  ASSERT_NPU_OK(npuLaunchTask(s, "where", recordThreadTask, &ranOn));
  EXPECT_EQ(ranOn, std::this_thread::get_id());  // ran before the launch returned, right here
  ASSERT_NPU_OK(npuLaunchTask(s, "one", appendTask, &one));
  npuEvent_t ev;
  ASSERT_NPU_OK(npuEventCreate(&ev));
  ASSERT_NPU_OK(npuEventRecord(ev, s));
  EXPECT_EQ(npuEventQuery(ev), npuSuccess);
  ASSERT_NPU_OK(npuLaunchTask(s, "two", appendTask, &two));
  EXPECT_EQ(log.order, (std::vector<int>{1, 2}));
  EXPECT_EQ(npuStreamQuery(s), npuSuccess);
  ASSERT_NPU_OK(npuStreamEndHostRun(s));
  // After the host run, launches go to the worker again.
  ASSERT_NPU_OK(npuLaunchTask(s, "where", recordThreadTask, &ranOn));
  ASSERT_NPU_OK(npuStreamSynchronize(s));
  EXPECT_NE(ranOn, std::this_thread::get_id());
  ASSERT_NPU_OK(npuEventDestroy(ev));
  ASSERT_NPU_OK(npuStreamDestroy(s));
}

TEST(StreamHostRun, ABusyStreamRefusesAndLaunchesQueueAsUsual) {
  npuStream_t s;
  ASSERT_NPU_OK(npuStreamCreate(&s));
  Gate gate;
  ASSERT_NPU_OK(npuLaunchTask(s, "gated", gatedTask, &gate));
  EXPECT_EQ(npuStreamBeginHostRun(s), npuErrorNotReady);
  std::thread::id ranOn;
  ASSERT_NPU_OK(npuLaunchTask(s, "where", recordThreadTask, &ranOn));
  EXPECT_EQ(ranOn, std::thread::id());  // queued behind the gated task
  gate.open = true;
  ASSERT_NPU_OK(npuStreamSynchronize(s));
  EXPECT_TRUE(gate.sawOpen);
  EXPECT_NE(ranOn, std::this_thread::get_id());
  ASSERT_NPU_OK(npuStreamEndHostRun(s));  // harmless without a host run
  ASSERT_NPU_OK(npuStreamDestroy(s));
}

TEST(StreamHostRun, AnotherThreadsLaunchWaitsForTheEndAndKeepsFifoOrder) {
  npuStream_t s;
  ASSERT_NPU_OK(npuStreamCreate(&s));
  ASSERT_NPU_OK(npuStreamBeginHostRun(s));
  Log log;
  LogEntry one{&log, 1}, two{&log, 2}, three{&log, 3};
  ASSERT_NPU_OK(npuLaunchTask(s, "one", appendTask, &one));
  std::thread other([&] { ASSERT_NPU_OK(npuLaunchTask(s, "two", appendTask, &two)); });
  other.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  {
    std::lock_guard<std::mutex> lock(log.mutex);
    EXPECT_EQ(log.order, (std::vector<int>{1}));  // the worker waits for the host run to end
  }
  // The owner's next launch is behind queued work: it queues too, and the worker takes over.
  ASSERT_NPU_OK(npuLaunchTask(s, "three", appendTask, &three));
  ASSERT_NPU_OK(npuStreamEndHostRun(s));
  ASSERT_NPU_OK(npuStreamSynchronize(s));
  EXPECT_EQ(log.order, (std::vector<int>{1, 2, 3}));
  ASSERT_NPU_OK(npuStreamDestroy(s));
}

TEST(StreamHostRun, ATaskFailingOnTheHostFailsItsStreamAsOnTheWorker) {
  npuStream_t s;
  ASSERT_NPU_OK(npuStreamCreate(&s));
  ASSERT_NPU_OK(npuStreamBeginHostRun(s));
  ASSERT_NPU_OK(npuLaunchTask(s, "boom", [](void*) { npuTaskFail("it broke"); }, nullptr));
  npuEvent_t ev;
  ASSERT_NPU_OK(npuEventCreate(&ev));
  ASSERT_NPU_OK(npuEventRecord(ev, s));
  ASSERT_NPU_OK(npuStreamEndHostRun(s));
  EXPECT_EQ(npuEventQuery(ev), npuErrorLaunchFailure);  // the record carries the failure
  EXPECT_EQ(npuStreamSynchronize(s), npuErrorLaunchFailure);
  EXPECT_NE(std::string(npuGetLastErrorMessage()).find("it broke"), std::string::npos);
  ASSERT_NPU_OK(npuEventDestroy(ev));
  ASSERT_NPU_OK(npuStreamDestroy(s));
}

TEST(StreamIdle, ARecordOnAnIdleStreamIsCompleteAtOnceAndAWaitForItQueuesNothing) {
  npuStream_t a, b;
  ASSERT_NPU_OK(npuStreamCreate(&a));
  ASSERT_NPU_OK(npuStreamCreate(&b));
  npuEvent_t ev;
  ASSERT_NPU_OK(npuEventCreate(&ev));
  ASSERT_NPU_OK(npuEventRecord(ev, a));
  EXPECT_EQ(npuEventQuery(ev), npuSuccess);
  ASSERT_NPU_OK(npuStreamWaitEvent(b, ev, 0));
  npuStreamQueueStats stats;
  ASSERT_NPU_OK(npuStreamGetQueueStats(b, &stats));
  EXPECT_EQ(stats.peak_pending, 0u);
  // On a busy stream the record waits for the work ahead of it, and so does a waiter.
  Gate gate;
  Log log;
  LogEntry after{&log, 1};
  ASSERT_NPU_OK(npuLaunchTask(a, "gated", gatedTask, &gate));
  ASSERT_NPU_OK(npuEventRecord(ev, a));
  EXPECT_EQ(npuEventQuery(ev), npuErrorNotReady);
  ASSERT_NPU_OK(npuStreamWaitEvent(b, ev, 0));
  ASSERT_NPU_OK(npuLaunchTask(b, "after", appendTask, &after));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  {
    std::lock_guard<std::mutex> lock(log.mutex);
    EXPECT_TRUE(log.order.empty());
  }
  gate.open = true;
  ASSERT_NPU_OK(npuStreamSynchronize(b));
  EXPECT_EQ(log.order, (std::vector<int>{1}));
  EXPECT_EQ(npuEventQuery(ev), npuSuccess);
  ASSERT_NPU_OK(npuEventDestroy(ev));
  ASSERT_NPU_OK(npuStreamDestroy(a));
  ASSERT_NPU_OK(npuStreamDestroy(b));
}

