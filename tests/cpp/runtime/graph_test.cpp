// Graph capture and replay (runtime/graph.cpp): what is recorded, replay order and ownership,
// fork/join, and the calls a capture refuses.
#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace {

// A task that appends its value to a shared log and counts its releases.
struct Log {
  std::mutex mutex;
  std::vector<int> order;
  std::atomic<int> released{0};
};
struct Entry {
  Log* log;
  int value;
};
void appendTask(void* arg) {
  auto* e = static_cast<Entry*>(arg);
  std::lock_guard<std::mutex> lock(e->log->mutex);
  e->log->order.push_back(e->value);
}
void releaseEntry(void* arg) {
  auto* e = static_cast<Entry*>(arg);
  e->log->released.fetch_add(1);
  delete e;
}
npuError_t append(npuStream_t s, Log& log, int value) {
  auto* e = new Entry{&log, value};
  npuError_t err = npuLaunchTaskWithRelease(s, "append", appendTask, releaseEntry, e);
  if (err != npuSuccess) delete e;  // not queued: still ours
  return err;
}
void failingTask(void*) { npuTaskFail("the kernel found NaN in its input"); }

std::string lastMessage() { return npuGetLastErrorMessage(); }
bool mentions(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

struct Streams {
  npuStream_t a = nullptr, b = nullptr;
  Streams() {
    npuStreamCreate(&a);
    npuStreamCreate(&b);
  }
  ~Streams() {
    npuStreamDestroy(a);
    npuStreamDestroy(b);
  }
};

}  // namespace

TEST(Graph, CaptureRecordsInsteadOfRunningAndReplaysOwnTheTasks) {
  Streams st;
  Log log;
  std::vector<unsigned char> host(64, 0);
  void* dev = nullptr;
  ASSERT_NPU_OK(npuMalloc(&dev, host.size()));
  ASSERT_NPU_OK(npuStreamBeginCapture(st.a, npuStreamCaptureModeGlobal));
  npuStreamCaptureStatus status = npuStreamCaptureStatusNone;
  ASSERT_NPU_OK(npuStreamIsCapturing(st.a, &status));
  EXPECT_EQ(status, npuStreamCaptureStatusActive);
  for (int i = 0; i < 5; ++i) ASSERT_NPU_OK(append(st.a, log, i));
  ASSERT_NPU_OK(npuMemsetAsync(dev, 7, host.size(), st.a));
  npuGraph_t graph = nullptr;
  ASSERT_NPU_OK(npuStreamEndCapture(st.a, &graph));
  ASSERT_NPU_OK(npuStreamIsCapturing(st.a, &status));
  EXPECT_EQ(status, npuStreamCaptureStatusNone);
  ASSERT_NPU_OK(npuStreamSynchronize(st.a));
  EXPECT_TRUE(log.order.empty()) << "a captured task ran at capture time";
  size_t count = 0;
  ASSERT_NPU_OK(npuGraphGetTaskCount(graph, &count));
  EXPECT_EQ(count, 6u);

  for (int replay = 0; replay < 3; ++replay) ASSERT_NPU_OK(npuGraphLaunch(graph, st.a));
  ASSERT_NPU_OK(npuStreamSynchronize(st.a));
  std::vector<int> expected;
  for (int replay = 0; replay < 3; ++replay) {
    for (int i = 0; i < 5; ++i) expected.push_back(i);
  }
  EXPECT_EQ(log.order, expected);
  ASSERT_NPU_OK(npuMemcpy(host.data(), dev, host.size(), npuMemcpyDeviceToHost));
  EXPECT_EQ(host, std::vector<unsigned char>(64, 7));
  EXPECT_EQ(log.released.load(), 0) << "the graph still owns its tasks";
  ASSERT_NPU_OK(npuGraphDestroy(graph));
  EXPECT_EQ(log.released.load(), 5);
  EXPECT_EQ(npuGraphLaunch(graph, st.a), npuErrorInvalidResourceHandle);
  ASSERT_NPU_OK(npuFree(dev));
}

TEST(Graph, ReplayIsOrderedWithEagerWorkAndOutlivesDestroy) {
  Streams st;
  Log log;
  ASSERT_NPU_OK(npuStreamBeginCapture(st.a, npuStreamCaptureModeGlobal));
  ASSERT_NPU_OK(append(st.a, log, 2));
  ASSERT_NPU_OK(append(st.a, log, 3));
  npuGraph_t graph = nullptr;
  ASSERT_NPU_OK(npuStreamEndCapture(st.a, &graph));
  ASSERT_NPU_OK(append(st.a, log, 1));
  ASSERT_NPU_OK(npuGraphLaunch(graph, st.a));
  ASSERT_NPU_OK(npuGraphDestroy(graph));  // the queued launch keeps the tasks alive
  ASSERT_NPU_OK(append(st.a, log, 4));
  ASSERT_NPU_OK(npuStreamSynchronize(st.a));
  EXPECT_EQ(log.order, (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(log.released.load(), 4);  // 2 eager + the graph's 2
}

TEST(Graph, ForkedStreamJoinsAndMustJoinBack) {
  Streams st;
  Log log;
  npuEvent_t fork = nullptr, join = nullptr;
  ASSERT_NPU_OK(npuEventCreate(&fork));
  ASSERT_NPU_OK(npuEventCreate(&join));
  ASSERT_NPU_OK(npuStreamBeginCapture(st.a, npuStreamCaptureModeGlobal));
  ASSERT_NPU_OK(append(st.a, log, 1));
  ASSERT_NPU_OK(npuEventRecord(fork, st.a));
  ASSERT_NPU_OK(npuStreamWaitEvent(st.b, fork, 0));  // b joins the capture
  npuStreamCaptureStatus status = npuStreamCaptureStatusNone;
  ASSERT_NPU_OK(npuStreamIsCapturing(st.b, &status));
  EXPECT_EQ(status, npuStreamCaptureStatusActive);
  ASSERT_NPU_OK(append(st.b, log, 2));
  ASSERT_NPU_OK(npuEventRecord(join, st.b));
  ASSERT_NPU_OK(npuStreamWaitEvent(st.a, join, 0));
  ASSERT_NPU_OK(append(st.a, log, 3));
  npuGraph_t graph = nullptr;
  EXPECT_EQ(npuStreamEndCapture(st.b, &graph), npuErrorInvalidValue);  // not the origin
  EXPECT_TRUE(mentions(lastMessage(), "end the capture on that stream")) << lastMessage();
  ASSERT_NPU_OK(npuStreamEndCapture(st.a, &graph));
  ASSERT_NPU_OK(npuStreamIsCapturing(st.b, &status));
  EXPECT_EQ(status, npuStreamCaptureStatusNone);
  ASSERT_NPU_OK(npuGraphLaunch(graph, st.a));
  ASSERT_NPU_OK(npuStreamSynchronize(st.a));
  EXPECT_EQ(log.order, (std::vector<int>{1, 2, 3}));
  ASSERT_NPU_OK(npuGraphDestroy(graph));

  // Without the join back, ending fails and names the forked stream; nothing leaks or runs.
  ASSERT_NPU_OK(npuStreamBeginCapture(st.a, npuStreamCaptureModeGlobal));
  ASSERT_NPU_OK(npuEventRecord(fork, st.a));
  ASSERT_NPU_OK(npuStreamWaitEvent(st.b, fork, 0));
  ASSERT_NPU_OK(append(st.b, log, 9));
  EXPECT_EQ(npuStreamEndCapture(st.a, &graph), npuErrorStreamCaptureUnjoined);
  EXPECT_TRUE(mentions(lastMessage(), "1 task(s) no stream of the capture waited for"))
      << lastMessage();
  EXPECT_EQ(graph, nullptr);
  ASSERT_NPU_OK(npuStreamSynchronize(st.b));
  EXPECT_EQ(log.order, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(log.released.load(), 4);
  ASSERT_NPU_OK(npuEventDestroy(fork));
  ASSERT_NPU_OK(npuEventDestroy(join));
}

TEST(Graph, SynchronizingTheCapturingStreamInvalidatesTheCapture) {
  Streams st;
  Log log;
  ASSERT_NPU_OK(npuStreamBeginCapture(st.a, npuStreamCaptureModeRelaxed));
  ASSERT_NPU_OK(append(st.a, log, 1));
  EXPECT_EQ(npuStreamSynchronize(st.a), npuErrorStreamCaptureUnsupported);
  EXPECT_TRUE(mentions(lastMessage(), "is capturing a graph")) << lastMessage();
  EXPECT_TRUE(mentions(lastMessage(), ".item()")) << lastMessage();
  npuStreamCaptureStatus status = npuStreamCaptureStatusNone;
  ASSERT_NPU_OK(npuStreamIsCapturing(st.a, &status));
  EXPECT_EQ(status, npuStreamCaptureStatusInvalidated);
  EXPECT_EQ(append(st.a, log, 2), npuErrorStreamCaptureInvalidated);
  npuGraph_t graph = nullptr;
  EXPECT_EQ(npuStreamEndCapture(st.a, &graph), npuErrorStreamCaptureInvalidated);
  EXPECT_TRUE(mentions(lastMessage(), "invalidated by an earlier call (npuStreamSynchronize)"))
      << lastMessage();
  EXPECT_EQ(graph, nullptr);
  EXPECT_EQ(log.released.load(), 1);  // the captured task was released with the capture
  // The stream works eagerly again.
  ASSERT_NPU_OK(append(st.a, log, 3));
  ASSERT_NPU_OK(npuStreamSynchronize(st.a));
  EXPECT_EQ(log.order, (std::vector<int>{3}));
}

TEST(Graph, DeviceWideBlockingCallsFollowTheCaptureMode) {
  Streams st;
  char host[8] = {};
  void* dev = nullptr;
  ASSERT_NPU_OK(npuMalloc(&dev, sizeof(host)));
  npuGraph_t graph = nullptr;

  // Global: refused from any thread.
  ASSERT_NPU_OK(npuStreamBeginCapture(st.a, npuStreamCaptureModeGlobal));
  npuError_t other_thread = npuSuccess;
  std::thread([&] { other_thread = npuMemcpy(host, dev, sizeof(host), npuMemcpyDeviceToHost); })
      .join();
  EXPECT_EQ(other_thread, npuErrorStreamCaptureUnsupported);
  EXPECT_EQ(npuStreamEndCapture(st.a, &graph), npuErrorStreamCaptureInvalidated);
  EXPECT_TRUE(mentions(lastMessage(), "npuMemcpy")) << lastMessage();

  // ThreadLocal: refused on the capturing thread only.
  ASSERT_NPU_OK(npuStreamBeginCapture(st.a, npuStreamCaptureModeThreadLocal));
  std::thread([&] { other_thread = npuDeviceSynchronize(); }).join();
  EXPECT_EQ(other_thread, npuSuccess);
  EXPECT_EQ(npuDeviceSynchronize(), npuErrorStreamCaptureUnsupported);
  EXPECT_TRUE(mentions(lastMessage(), "thread-local capture mode")) << lastMessage();
  EXPECT_EQ(npuStreamEndCapture(st.a, &graph), npuErrorStreamCaptureInvalidated);

  // Relaxed: allowed.
  ASSERT_NPU_OK(npuStreamBeginCapture(st.a, npuStreamCaptureModeRelaxed));
  ASSERT_NPU_OK(npuDeviceSynchronize());
  ASSERT_NPU_OK(npuMemset(dev, 1, sizeof(host)));
  ASSERT_NPU_OK(npuStreamEndCapture(st.a, &graph));
  ASSERT_NPU_OK(npuGraphDestroy(graph));
  ASSERT_NPU_OK(npuFree(dev));
}

TEST(Graph, EventsRecordedInACaptureAreNumberedAtEachLaunch) {
  Streams st;
  Log log;
  npuEvent_t ev = nullptr;
  ASSERT_NPU_OK(npuEventCreate(&ev));
  ASSERT_NPU_OK(npuStreamBeginCapture(st.a, npuStreamCaptureModeGlobal));
  ASSERT_NPU_OK(append(st.a, log, 1));
  ASSERT_NPU_OK(npuEventRecord(ev, st.a));
  EXPECT_EQ(npuEventQuery(ev), npuErrorStreamCaptureUnsupported);  // its work has not run
  EXPECT_TRUE(mentions(lastMessage(), "recorded in the graph capture")) << lastMessage();
  npuGraph_t graph = nullptr;
  EXPECT_EQ(npuStreamEndCapture(st.a, &graph), npuErrorStreamCaptureInvalidated);

  ASSERT_NPU_OK(npuStreamBeginCapture(st.a, npuStreamCaptureModeGlobal));
  ASSERT_NPU_OK(append(st.a, log, 1));
  ASSERT_NPU_OK(npuEventRecord(ev, st.a));
  ASSERT_NPU_OK(npuStreamEndCapture(st.a, &graph));
  ASSERT_NPU_OK(npuEventSynchronize(ev));  // recorded nowhere yet: nothing to wait for
  ASSERT_NPU_OK(npuGraphLaunch(graph, st.a));
  // Another stream waits for the replayed record: its task runs after the graph's.
  ASSERT_NPU_OK(npuStreamWaitEvent(st.b, ev, 0));
  ASSERT_NPU_OK(append(st.b, log, 2));
  ASSERT_NPU_OK(npuStreamSynchronize(st.b));
  EXPECT_EQ(log.order, (std::vector<int>{1, 2}));
  ASSERT_NPU_OK(npuEventSynchronize(ev));
  ASSERT_NPU_OK(npuGraphDestroy(graph));
  ASSERT_NPU_OK(npuEventDestroy(ev));
}

TEST(Graph, AWaitOnAnEventFromOutsideTheCaptureIsRefused) {
  Streams st;
  npuEvent_t ev = nullptr;
  ASSERT_NPU_OK(npuEventCreate(&ev));
  ASSERT_NPU_OK(npuEventRecord(ev, st.b));
  ASSERT_NPU_OK(npuStreamBeginCapture(st.a, npuStreamCaptureModeGlobal));
  EXPECT_EQ(npuStreamWaitEvent(st.a, ev, 0), npuErrorStreamCaptureUnsupported);
  EXPECT_TRUE(mentions(lastMessage(), "was not recorded in that capture")) << lastMessage();
  npuGraph_t graph = nullptr;
  EXPECT_EQ(npuStreamEndCapture(st.a, &graph), npuErrorStreamCaptureInvalidated);
  ASSERT_NPU_OK(npuEventDestroy(ev));
}

TEST(Graph, PlainLaunchTaskIsRefusedAndLeftToTheCaller) {
  Streams st;
  ASSERT_NPU_OK(npuStreamBeginCapture(st.a, npuStreamCaptureModeGlobal));
  Log log;
  Entry entry{&log, 1};
  EXPECT_EQ(npuLaunchTask(st.a, "aten::add", appendTask, &entry),
            npuErrorStreamCaptureUnsupported);
  EXPECT_TRUE(mentions(lastMessage(), "npuLaunchTaskWithRelease")) << lastMessage();
  EXPECT_TRUE(mentions(lastMessage(), "'aten::add'")) << lastMessage();
  npuGraph_t graph = nullptr;
  EXPECT_EQ(npuStreamEndCapture(st.a, &graph), npuErrorStreamCaptureInvalidated);
  EXPECT_TRUE(log.order.empty());
}

TEST(Graph, AFailingTaskInAReplayFailsTheStreamWithItsName) {
  Streams st;
  Log log;
  ASSERT_NPU_OK(npuStreamBeginCapture(st.a, npuStreamCaptureModeGlobal));
  ASSERT_NPU_OK(append(st.a, log, 1));
  ASSERT_NPU_OK(npuLaunchTaskWithRelease(st.a, "aten::bad", failingTask, nullptr, nullptr));
  ASSERT_NPU_OK(append(st.a, log, 2));
  npuGraph_t graph = nullptr;
  ASSERT_NPU_OK(npuStreamEndCapture(st.a, &graph));
  ASSERT_NPU_OK(npuGraphLaunch(graph, st.a));
  EXPECT_EQ(npuStreamSynchronize(st.a), npuErrorLaunchFailure);
  EXPECT_TRUE(mentions(lastMessage(), "task 'aten::bad' failed")) << lastMessage();
  EXPECT_TRUE(mentions(lastMessage(), "1 later task(s) on the stream were skipped"))
      << lastMessage();
  EXPECT_EQ(log.order, (std::vector<int>{1}));
  ASSERT_NPU_OK(npuGraphDestroy(graph));
}

TEST(Graph, BadUseIsAClearError) {
  Streams st;
  EXPECT_EQ(npuStreamBeginCapture(nullptr, npuStreamCaptureModeGlobal),
            npuErrorStreamCaptureUnsupported);
  EXPECT_TRUE(mentions(lastMessage(), "default stream")) << lastMessage();
  EXPECT_EQ(npuStreamBeginCapture(st.a, static_cast<npuStreamCaptureMode>(7)),
            npuErrorInvalidValue);
  npuGraph_t graph = nullptr;
  EXPECT_EQ(npuStreamEndCapture(st.a, &graph), npuErrorInvalidValue);
  EXPECT_TRUE(mentions(lastMessage(), "is not capturing")) << lastMessage();
  ASSERT_NPU_OK(npuStreamBeginCapture(st.a, npuStreamCaptureModeGlobal));
  EXPECT_EQ(npuStreamBeginCapture(st.a, npuStreamCaptureModeGlobal),
            npuErrorStreamCaptureUnsupported);
  EXPECT_EQ(npuStreamDestroy(st.a), npuErrorStreamCaptureUnsupported);
  ASSERT_NPU_OK(npuStreamEndCapture(st.a, &graph));
  EXPECT_EQ(npuGraphLaunch(nullptr, st.a), npuErrorInvalidResourceHandle);
  ASSERT_NPU_OK(npuGraphDestroy(graph));
  EXPECT_EQ(npuGraphDestroy(graph), npuErrorInvalidResourceHandle);
}

TEST(Graph, DebugDotPrintWritesOneNodePerTaskInReplayOrder) {
  Streams st;
  Log log;
  void* dev = nullptr;
  ASSERT_NPU_OK(npuMalloc(&dev, 16));
  ASSERT_NPU_OK(npuStreamBeginCapture(st.a, npuStreamCaptureModeGlobal));
  ASSERT_NPU_OK(append(st.a, log, 1));
  ASSERT_NPU_OK(npuMemsetAsync(dev, 0, 16, st.a));
  ASSERT_NPU_OK(append(st.a, log, 2));
  npuGraph_t graph = nullptr;
  ASSERT_NPU_OK(npuStreamEndCapture(st.a, &graph));
  const std::string path = ::testing::TempDir() + "npu_graph_debug.dot";
  ASSERT_NPU_OK(npuGraphDebugDotPrint(graph, path.c_str()));
  std::FILE* in = std::fopen(path.c_str(), "r");
  ASSERT_NE(in, nullptr);
  std::string dot;
  char buffer[256];
  while (size_t n = std::fread(buffer, 1, sizeof(buffer), in)) dot.append(buffer, n);
  std::fclose(in);
  std::remove(path.c_str());
  EXPECT_TRUE(mentions(dot, "digraph npu_graph {")) << dot;
  EXPECT_TRUE(mentions(dot, "NPU graph: 3 tasks")) << dot;
  EXPECT_TRUE(mentions(dot, "t0 [label=\"0: append\\n(kernel)\"]")) << dot;
  EXPECT_TRUE(mentions(dot, "(memset)")) << dot;
  EXPECT_TRUE(mentions(dot, "t0 -> t1;") && mentions(dot, "t1 -> t2;")) << dot;
  EXPECT_FALSE(mentions(dot, "t2 -> t3")) << dot;
  EXPECT_EQ(npuGraphDebugDotPrint(graph, "/nonexistent-dir/x.dot"), npuErrorInvalidValue);
  EXPECT_TRUE(mentions(lastMessage(), "cannot write '/nonexistent-dir/x.dot'")) << lastMessage();
  ASSERT_NPU_OK(npuGraphDestroy(graph));
  EXPECT_EQ(npuGraphDebugDotPrint(graph, path.c_str()), npuErrorInvalidResourceHandle);
  ASSERT_NPU_OK(npuFree(dev));
}
