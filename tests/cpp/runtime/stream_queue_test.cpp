// Launch back-pressure: a stream queues at most NPU_SIM_MAX_PENDING_LAUNCHES tasks; launching
// onto a full stream waits. Each test runs in its own process, so setenv before the first
// runtime call sets the bound.
#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace {

void countTask(void* arg) { static_cast<std::atomic<int>*>(arg)->fetch_add(1); }

// A task that does a little work, so that launching outruns the worker.
void busyTask(void* arg) {
  volatile double x = 1;
  for (int i = 0; i < 2000; ++i) x = x * 1.0000001 + 1e-9;
  static_cast<std::atomic<int>*>(arg)->fetch_add(1);
}

struct Gate {
  std::atomic<bool> open{false};
};
void gateTask(void* arg) {
  auto* gate = static_cast<Gate*>(arg);
  while (!gate->open.load()) std::this_thread::yield();
}

npuStreamQueueStats stats(npuStream_t s) {
  npuStreamQueueStats st{};
  EXPECT_EQ(npuStreamGetQueueStats(s, &st), npuSuccess) << npuGetLastErrorMessage();
  return st;
}

}  // namespace

TEST(StreamQueue, DefaultBoundIsCudaLike) {
  npuStreamQueueStats st = stats(nullptr);
  EXPECT_EQ(st.max_pending, 1024u);
  EXPECT_EQ(st.pending, 0u);
}

TEST(StreamQueue, DepthNeverExceedsTheBound) {
  setenv("NPU_SIM_MAX_PENDING_LAUNCHES", "64", 1);
  npuStream_t s = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&s));
  std::atomic<int> ran{0};
  constexpr int kTasks = 20000;
  for (int i = 0; i < kTasks; ++i) ASSERT_NPU_OK(npuLaunchTask(s, "busy", busyTask, &ran));
  npuStreamQueueStats st = stats(s);
  EXPECT_EQ(st.max_pending, 64u);
  EXPECT_LE(st.peak_pending, 64u);
  EXPECT_GT(st.launch_waits, 0u) << "20000 launches never found the queue full";
  EXPECT_EQ(st.overflows, 0u);
  ASSERT_NPU_OK(npuStreamSynchronize(s));
  EXPECT_EQ(ran.load(), kTasks);  // nothing dropped
  EXPECT_EQ(stats(s).pending, 0u);
  ASSERT_NPU_OK(npuStreamDestroy(s));
}

TEST(StreamQueue, ManyThreadsOnOneStreamKeepTheBoundAndTheOrderOfEach) {
  setenv("NPU_SIM_MAX_PENDING_LAUNCHES", "16", 1);
  npuStream_t s = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&s));
  std::atomic<int> ran{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 3000; ++i) npuLaunchTask(s, "busy", busyTask, &ran);
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_NPU_OK(npuStreamSynchronize(s));
  EXPECT_EQ(ran.load(), 12000);
  npuStreamQueueStats st = stats(s);
  EXPECT_LE(st.peak_pending, 16u);
  EXPECT_EQ(st.overflows, 0u);
  ASSERT_NPU_OK(npuStreamDestroy(s));
}

TEST(StreamQueue, EventRecordsMayUseTwiceTheBound) {
  // The allocator records events while holding its lock; records never wait below 2x the bound.
  setenv("NPU_SIM_MAX_PENDING_LAUNCHES", "8", 1);
  npuStream_t s = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&s));
  Gate gate;
  ASSERT_NPU_OK(npuLaunchTask(s, "gate", gateTask, &gate));
  std::atomic<int> ran{0};
  while (stats(s).pending != 0) std::this_thread::yield();  // the worker holds the gate
  for (int i = 0; i < 8; ++i) ASSERT_NPU_OK(npuLaunchTask(s, "count", countTask, &ran));
  npuEvent_t ev = nullptr;
  ASSERT_NPU_OK(npuEventCreateWithFlags(&ev, npuEventDisableTiming));
  for (int i = 0; i < 8; ++i) ASSERT_NPU_OK(npuEventRecord(ev, s));  // 16 queued, no wait
  EXPECT_EQ(stats(s).pending, 16u);
  EXPECT_EQ(stats(s).launch_waits, 0u);
  gate.open = true;
  ASSERT_NPU_OK(npuEventSynchronize(ev));
  ASSERT_NPU_OK(npuStreamSynchronize(s));
  EXPECT_EQ(ran.load(), 8);
  ASSERT_NPU_OK(npuEventDestroy(ev));
  ASSERT_NPU_OK(npuStreamDestroy(s));
}

TEST(StreamQueue, AStalledStreamLetsALaunchThroughAndCountsIt) {
  // The deadlock guard: a task that cannot finish (here: a gate only the test opens) must not
  // hang the launching thread forever. The launch waits, then goes through as an overflow.
  setenv("NPU_SIM_MAX_PENDING_LAUNCHES", "4", 1);
  npuStream_t s = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&s));
  Gate gate;
  std::atomic<int> ran{0};
  ASSERT_NPU_OK(npuLaunchTask(s, "gate", gateTask, &gate));
  while (stats(s).pending != 0) std::this_thread::yield();
  for (int i = 0; i < 5; ++i) ASSERT_NPU_OK(npuLaunchTask(s, "count", countTask, &ran));
  npuStreamQueueStats st = stats(s);
  EXPECT_EQ(st.pending, 5u);
  EXPECT_EQ(st.overflows, 1u);
  EXPECT_EQ(st.launch_waits, 1u);
  gate.open = true;
  ASSERT_NPU_OK(npuStreamSynchronize(s));
  EXPECT_EQ(ran.load(), 5);
  ASSERT_NPU_OK(npuStreamDestroy(s));
}

TEST(StreamQueue, TasksMayLaunchOntoTheirOwnFullStream) {
  // A stream worker never waits for room (it would wait for itself).
  setenv("NPU_SIM_MAX_PENDING_LAUNCHES", "2", 1);
  npuStream_t s = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&s));
  struct Ctx {
    npuStream_t s;
    std::atomic<int> ran{0};
  } ctx;
  ctx.s = s;
  auto spawner = [](void* arg) {
    auto* c = static_cast<Ctx*>(arg);
    for (int i = 0; i < 10; ++i) npuLaunchTask(c->s, "child", countTask, &c->ran);
  };
  ASSERT_NPU_OK(npuLaunchTask(s, "spawner", spawner, &ctx));
  ASSERT_NPU_OK(npuStreamSynchronize(s));
  ASSERT_NPU_OK(npuStreamSynchronize(s));
  EXPECT_EQ(ctx.ran.load(), 10);
  EXPECT_GT(stats(s).overflows, 0u);
  ASSERT_NPU_OK(npuStreamDestroy(s));
}

TEST(StreamQueueEnv, BadBoundsAreRefusedWithTheRange) {
  for (const char* value : {"0", "-3", "abc", "12x", "2000000", "''"}) {
    std::string out = runProbe(std::string("NPU_SIM_MAX_PENDING_LAUNCHES=") + value, "devices");
    EXPECT_NE(out.find("error=npuErrorInitialization"), std::string::npos) << value << out;
    EXPECT_NE(out.find("NPU_SIM_MAX_PENDING_LAUNCHES='"), std::string::npos) << out;
    EXPECT_NE(out.find("expected an integer from 1 to 1048576"), std::string::npos) << out;
  }
  std::string ok = runProbe("NPU_SIM_MAX_PENDING_LAUNCHES=' 4096 '", "devices");
  EXPECT_NE(ok.find("count=8 error=npuSuccess"), std::string::npos) << ok;
}
