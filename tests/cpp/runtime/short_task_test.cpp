// npuLaunchShortTaskWithRelease and npuLaunchTaskSync: on an idle stream the task runs on the
// launching thread before the call returns; on a busy stream (or a capturing one, for a short
// task) it is queued like any task; the stream's order, counts, events and error reporting are
// those of a queued task.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace {

// What a task saw when it ran.
struct Probe {
  std::thread::id ran_on;
  std::atomic<int> runs{0};
  std::atomic<int> releases{0};
};
void probeTask(void* arg) {
  auto* p = static_cast<Probe*>(arg);
  p->ran_on = std::this_thread::get_id();
  p->runs.fetch_add(1);
}
void probeRelease(void* arg) { static_cast<Probe*>(arg)->releases.fetch_add(1); }

// Holds its stream busy until the gate opens.
void gatedTask(void* arg) {
  auto* open = static_cast<std::atomic<bool>*>(arg);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!open->load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void failingTask(void*) { npuTaskFail("short kernel found a NaN"); }

// Appends its value and lasts a few microseconds; flags a task that starts while another of the
// stream's tasks runs, and counts the tasks that ran on the thread that launched the short ones.
struct Journal {
  std::mutex mutex;
  std::vector<int> order;
  std::atomic<int> running{0};
  std::atomic<int> overlaps{0};
  std::thread::id short_launcher;
  std::atomic<int> on_launcher{0};
};
struct Entry {
  Journal* journal;
  int value;
};
void journalTask(void* arg) {
  auto* e = static_cast<Entry*>(arg);
  Journal& j = *e->journal;
  if (j.running.fetch_add(1) != 0) j.overlaps.fetch_add(1);
  if (std::this_thread::get_id() == j.short_launcher) j.on_launcher.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(j.mutex);
    j.order.push_back(e->value);
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(3);
  while (std::chrono::steady_clock::now() < until) {
  }
  j.running.fetch_sub(1);
}

}  // namespace

TEST(ShortTask, RunsOnTheCallerWhenTheStreamIsIdle) {
  npuStream_t s = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&s));
  Probe p;
  ASSERT_NPU_OK(npuLaunchShortTaskWithRelease(s, "short", probeTask, probeRelease, &p));
  EXPECT_EQ(p.runs.load(), 1);  // already ran and was released: no synchronize needed
  EXPECT_EQ(p.releases.load(), 1);
  EXPECT_EQ(p.ran_on, std::this_thread::get_id());
  EXPECT_EQ(npuStreamQuery(s), npuSuccess);  // counted as submitted and completed
  ASSERT_NPU_OK(npuStreamSynchronize(s));
  ASSERT_NPU_OK(npuStreamDestroy(s));
}

TEST(ShortTask, IsQueuedBehindWorkAlreadyOnTheStream) {
  npuStream_t s = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&s));
  std::atomic<bool> open{false};
  ASSERT_NPU_OK(npuLaunchTask(s, "gated", gatedTask, &open));
  Probe p;
  ASSERT_NPU_OK(npuLaunchShortTaskWithRelease(s, "short", probeTask, probeRelease, &p));
  EXPECT_EQ(p.runs.load(), 0);  // waits for the gated task, on the worker
  EXPECT_EQ(npuStreamQuery(s), npuErrorNotReady);
  open.store(true);
  ASSERT_NPU_OK(npuStreamSynchronize(s));
  EXPECT_EQ(p.runs.load(), 1);
  EXPECT_EQ(p.releases.load(), 1);
  EXPECT_NE(p.ran_on, std::this_thread::get_id());
  ASSERT_NPU_OK(npuStreamDestroy(s));
}

TEST(ShortTask, OrderHoldsWithOtherThreadsLaunchingOnTheStream) {
  // Two threads launch onto one stream, one short tasks, one queued tasks (pausing now and then,
  // so that the stream is idle at times and short tasks run inline); each thread's tasks run in
  // its launch order and no two of the stream's tasks ever run at the same time.
  npuStream_t s = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&s));
  Journal journal;
  constexpr int kPerThread = 3000;
  std::vector<Entry> shorts, queued;
  for (int i = 0; i < kPerThread; ++i) shorts.push_back({&journal, i});
  for (int i = 0; i < kPerThread; ++i) queued.push_back({&journal, kPerThread + i});
  std::atomic<bool> go{false};
  std::thread a([&] {
    journal.short_launcher = std::this_thread::get_id();
    go.store(true);
    for (int i = 0; i < kPerThread; ++i) {
      npuLaunchShortTaskWithRelease(s, "short", journalTask, nullptr, &shorts[i]);
      if (i % 4 == 3) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  });
  std::thread b([&] {
    while (!go.load()) std::this_thread::yield();
    for (int i = 0; i < kPerThread; ++i) {
      npuLaunchTask(s, "queued", journalTask, &queued[i]);
      if (i % 16 == 15) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
  a.join();
  b.join();
  ASSERT_NPU_OK(npuStreamSynchronize(s));
  EXPECT_EQ(journal.overlaps.load(), 0);
  // How many ran inline depends on timing (ShortTask.TaskQueuedDuringAnInlineRunWaitsForIt
  // covers that case deterministically).
  std::printf("%d of %d short tasks ran on their launching thread\n", journal.on_launcher.load(),
              kPerThread);
  ASSERT_EQ(journal.order.size(), size_t(2 * kPerThread));
  int last_short = -1, last_queued = kPerThread - 1;
  for (int v : journal.order) {
    int& last = v < kPerThread ? last_short : last_queued;
    EXPECT_EQ(v, last + 1);
    last = v;
  }
  ASSERT_NPU_OK(npuStreamDestroy(s));
}

namespace {
struct Blocker {
  std::atomic<bool> started{false};
  std::atomic<bool> open{false};
};
void blockingTask(void* arg) {
  auto* b = static_cast<Blocker*>(arg);
  b->started.store(true);
  gatedTask(&b->open);
}
}  // namespace

TEST(ShortTask, TaskQueuedDuringAnInlineRunWaitsForIt) {
  // A short task runs inline on thread t and blocks; meanwhile this thread queues a task on the
  // same stream: the worker takes it but must not start it before the inline task finished.
  npuStream_t s = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&s));
  Blocker blocker;
  std::thread t([&] {
    npuLaunchShortTaskWithRelease(s, "blocking", blockingTask, nullptr, &blocker);
  });
  while (!blocker.started.load()) std::this_thread::yield();
  Probe p;
  ASSERT_NPU_OK(npuLaunchTask(s, "queued", probeTask, &p));
  EXPECT_EQ(npuStreamQuery(s), npuErrorNotReady);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(p.runs.load(), 0) << "a queued task started while an inline task of its stream ran";
  blocker.open.store(true);
  t.join();
  ASSERT_NPU_OK(npuStreamSynchronize(s));
  EXPECT_EQ(p.runs.load(), 1);
  ASSERT_NPU_OK(npuStreamDestroy(s));
}

TEST(ShortTask, EventRecordedAfterItIsComplete) {
  npuStream_t s = nullptr, other = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&s));
  ASSERT_NPU_OK(npuStreamCreate(&other));
  npuEvent_t ev = nullptr;
  ASSERT_NPU_OK(npuEventCreate(&ev));
  Probe p;
  ASSERT_NPU_OK(npuLaunchShortTaskWithRelease(s, "short", probeTask, probeRelease, &p));
  ASSERT_NPU_OK(npuEventRecord(ev, s));
  ASSERT_NPU_OK(npuStreamWaitEvent(other, ev, 0));
  ASSERT_NPU_OK(npuStreamSynchronize(other));
  EXPECT_EQ(npuEventQuery(ev), npuSuccess);
  EXPECT_EQ(npuStreamQuery(s), npuSuccess);
  ASSERT_NPU_OK(npuEventDestroy(ev));
  ASSERT_NPU_OK(npuStreamDestroy(s));
  ASSERT_NPU_OK(npuStreamDestroy(other));
}

TEST(ShortTask, FailureIsReportedByTheNextSynchronize) {
  npuStream_t s = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&s));
  // The launch itself succeeds, as for a queued task; the error belongs to the stream.
  ASSERT_NPU_OK(npuLaunchShortTaskWithRelease(s, "aten::short_bad", failingTask, nullptr,
                                              nullptr));
  Probe p;
  ASSERT_NPU_OK(npuLaunchShortTaskWithRelease(s, "after", probeTask, probeRelease, &p));
  EXPECT_EQ(p.runs.load(), 0);      // skipped: the stream is in its error state
  EXPECT_EQ(p.releases.load(), 1);  // but released
  EXPECT_EQ(npuStreamSynchronize(s), npuErrorLaunchFailure);
  const std::string message = npuGetLastErrorMessage();
  EXPECT_NE(message.find("task 'aten::short_bad' failed"), std::string::npos) << message;
  EXPECT_NE(message.find("short kernel found a NaN"), std::string::npos) << message;
  EXPECT_NE(message.find("1 later task(s) on the stream were skipped"), std::string::npos)
      << message;
  ASSERT_NPU_OK(npuLaunchShortTaskWithRelease(s, "again", probeTask, probeRelease, &p));
  EXPECT_EQ(p.runs.load(), 1);  // the stream works again
  ASSERT_NPU_OK(npuStreamDestroy(s));
}

TEST(ShortTask, CapturedLikeAnyTaskWhileTheStreamCaptures) {
  npuStream_t s = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&s));
  Probe p;
  ASSERT_NPU_OK(npuStreamBeginCapture(s, npuStreamCaptureModeGlobal));
  ASSERT_NPU_OK(npuLaunchShortTaskWithRelease(s, "short", probeTask, probeRelease, &p));
  npuGraph_t graph = nullptr;
  ASSERT_NPU_OK(npuStreamEndCapture(s, &graph));
  EXPECT_EQ(p.runs.load(), 0);  // recorded, not run
  size_t count = 0;
  ASSERT_NPU_OK(npuGraphGetTaskCount(graph, &count));
  EXPECT_EQ(count, 1u);
  ASSERT_NPU_OK(npuGraphLaunch(graph, s));
  ASSERT_NPU_OK(npuGraphLaunch(graph, s));
  ASSERT_NPU_OK(npuStreamSynchronize(s));
  EXPECT_EQ(p.runs.load(), 2);
  ASSERT_NPU_OK(npuGraphDestroy(graph));
  ASSERT_NPU_OK(npuStreamSynchronize(s));
  EXPECT_EQ(p.releases.load(), 1);
  ASSERT_NPU_OK(npuStreamDestroy(s));
}

TEST(ShortTask, DisabledByTheEnvironmentEveryTaskIsQueued) {
  setenv("NPU_SIM_INLINE_TASKS", "0", 1);  // this test runs in its own process
  npuStream_t s = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&s));
  Probe p;
  ASSERT_NPU_OK(npuLaunchShortTaskWithRelease(s, "short", probeTask, probeRelease, &p));
  ASSERT_NPU_OK(npuStreamSynchronize(s));
  EXPECT_EQ(p.runs.load(), 1);
  EXPECT_NE(p.ran_on, std::this_thread::get_id());
  EXPECT_EQ(npuStreamBeginHostRun(s), npuErrorNotReady);  // no host runs either
  ASSERT_NPU_OK(npuStreamDestroy(s));
}

TEST(ShortTask, BadSettingIsAClearError) {
  setenv("NPU_SIM_INLINE_TASKS", "sometimes", 1);
  int count = 0;
  EXPECT_NE(npuGetDeviceCount(&count), npuSuccess);
  const std::string message = npuGetLastErrorMessage();
  EXPECT_NE(message.find("NPU_SIM_INLINE_TASKS"), std::string::npos) << message;
  EXPECT_NE(message.find("sometimes"), std::string::npos) << message;
}

TEST(TaskSync, RunsOnTheCallerWhenIdleAndReturnsItsError) {
  npuStream_t s = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&s));
  Probe p;
  ASSERT_NPU_OK(npuLaunchTaskSync(s, "sync", probeTask, probeRelease, &p));
  EXPECT_EQ(p.runs.load(), 1);
  EXPECT_EQ(p.releases.load(), 1);
  EXPECT_EQ(p.ran_on, std::this_thread::get_id());
  EXPECT_EQ(npuLaunchTaskSync(s, "aten::sync_bad", failingTask, nullptr, nullptr),
            npuErrorLaunchFailure);
  const std::string message = npuGetLastErrorMessage();
  EXPECT_NE(message.find("task 'aten::sync_bad' failed"), std::string::npos) << message;
  ASSERT_NPU_OK(npuStreamSynchronize(s));  // the error was consumed, as by a synchronize
  EXPECT_EQ(npuLaunchTaskSync(s, "null", nullptr, nullptr, nullptr), npuErrorInvalidValue);
  ASSERT_NPU_OK(npuStreamDestroy(s));
}

TEST(TaskSync, WaitsForWorkAlreadyQueued) {
  npuStream_t s = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&s));
  std::atomic<bool> open{false};
  ASSERT_NPU_OK(npuLaunchTask(s, "gated", gatedTask, &open));
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    open.store(true);
  });
  Probe p;
  ASSERT_NPU_OK(npuLaunchTaskSync(s, "sync", probeTask, probeRelease, &p));
  EXPECT_TRUE(open.load());  // it returned only after the gated task
  EXPECT_EQ(p.runs.load(), 1);
  EXPECT_NE(p.ran_on, std::this_thread::get_id());  // on the worker, behind the gated task
  EXPECT_EQ(npuStreamQuery(s), npuSuccess);
  opener.join();
  ASSERT_NPU_OK(npuStreamDestroy(s));
}

TEST(TaskSync, RefusedWhileTheStreamCaptures) {
  npuStream_t s = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&s));
  ASSERT_NPU_OK(npuStreamBeginCapture(s, npuStreamCaptureModeGlobal));
  Probe p;
  EXPECT_EQ(npuLaunchTaskSync(s, "sync", probeTask, probeRelease, &p),
            npuErrorStreamCaptureUnsupported);
  EXPECT_EQ(p.runs.load(), 0);
  EXPECT_EQ(p.releases.load(), 0);  // not taken: the caller still owns the argument
  npuGraph_t graph = nullptr;
  npuStreamEndCapture(s, &graph);
  if (graph) npuGraphDestroy(graph);
  ASSERT_NPU_OK(npuStreamDestroy(s));
}
