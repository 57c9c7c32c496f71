// The stream sanitizer's engine at the runtime's C API: what orders two streams (event record and
// wait), what orders a stream and the host (synchronize, a successful query, blocking calls),
// byte-exact ranges, the allocator's free without record_stream, uninitialised reads, the
// runtime's own copies, and the tags' bookkeeping. Each test compares against the ordering the
// program states, with the racy and the fixed program side by side.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "npu/runtime.h"
#include "test_util.h"

namespace {

std::atomic<long> g_kept{0};
void retainTag(uint64_t) { g_kept.fetch_add(1); }
void releaseTag(uint64_t) { g_kept.fetch_sub(1); }

std::vector<npuSanReport> reports() {
  std::vector<npuSanReport> out(64);
  out.resize(npuSanTakeReports(out.data(), out.size()));
  for (const npuSanReport& r : out) {  // the reader's part of the tags' bookkeeping
    if (r.previous.tag != 0) releaseTag(r.previous.tag);
    if (r.current.tag != 0) releaseTag(r.current.tag);
  }
  return out;
}

class Sanitizer : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NPU_OK(npuSetDevice(2));
    ASSERT_NPU_OK(npuStreamCreate(&a_));
    ASSERT_NPU_OK(npuStreamCreate(&b_));
    ASSERT_NPU_OK(npuEventCreate(&event_));
    ASSERT_NPU_OK(npuMalloc(&buf_, 4096));
    npuSanSetTagHooks(retainTag, releaseTag);
    npuSanEnable(1, 1);
    reports();  // none left from another test
  }
  void TearDown() override {
    npuSanEnable(0, 0);
    EXPECT_EQ(g_kept.load(), 0) << "every tag the engine kept is released when it is turned off";
    npuEventDestroy(event_);
    npuStreamDestroy(a_);
    npuStreamDestroy(b_);
    npuFree(buf_);
  }
  char* at(size_t offset) { return static_cast<char*>(buf_) + offset; }
  int id(npuStream_t s) {
    int i = -1;
    npuStreamGetId(s, &i);
    return i;
  }

  npuStream_t a_ = nullptr, b_ = nullptr;
  npuEvent_t event_ = nullptr;
  void* buf_ = nullptr;
};

TEST_F(Sanitizer, ReadOnAnotherStreamWithoutAWaitIsARaceNamingBothAccesses) {
  EXPECT_EQ(npuSanAccess(a_, at(0), 256, 1, 11), 0);
  EXPECT_EQ(npuSanAccess(b_, at(128), 64, 0, 22), 1);
  auto r = reports();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].kind, npuSanRace);
  EXPECT_EQ(r[0].begin, reinterpret_cast<uintptr_t>(at(128)));
  EXPECT_EQ(r[0].end, reinterpret_cast<uintptr_t>(at(192)));
  EXPECT_EQ(r[0].previous.stream_id, id(a_));
  EXPECT_EQ(r[0].previous.device, 2);
  EXPECT_EQ(r[0].previous.write, 1);
  EXPECT_EQ(r[0].previous.tag, 11u);
  EXPECT_EQ(r[0].current.stream_id, id(b_));
  EXPECT_EQ(r[0].current.write, 0);
  EXPECT_EQ(r[0].current.tag, 22u);
}

TEST_F(Sanitizer, AnEventRecordAndWaitOrderTheStreams) {
  EXPECT_EQ(npuSanAccess(a_, at(0), 256, 1, 1), 0);
  ASSERT_NPU_OK(npuEventRecord(event_, a_));
  ASSERT_NPU_OK(npuStreamWaitEvent(b_, event_, 0));
  EXPECT_EQ(npuSanAccess(b_, at(0), 256, 0, 2), 0);
  // Work launched on `a` after the record is not covered by the wait.
  EXPECT_EQ(npuSanAccess(a_, at(512), 16, 1, 3), 0);
  EXPECT_EQ(npuSanAccess(b_, at(512), 16, 1, 4), 1);
  EXPECT_EQ(reports().size(), 1u);
}

TEST_F(Sanitizer, WriteAfterAnUnorderedReadIsARaceAndDisjointBytesNeverAre) {
  EXPECT_EQ(npuSanAccess(a_, at(0), 100, 0, 1), 0);
  EXPECT_EQ(npuSanAccess(b_, at(100), 100, 1, 2), 0);  // the next bytes: no conflict
  EXPECT_EQ(npuSanAccess(b_, at(0), 100, 0, 3), 0);    // two reads: no conflict
  EXPECT_EQ(npuSanAccess(b_, at(50), 10, 1, 4), 1);    // a write over a's read
  auto r = reports();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].previous.write, 0);
  EXPECT_EQ(r[0].previous.tag, 1u);
}

TEST_F(Sanitizer, TheHostSeesAStreamOnlyAfterSynchronizingOrAQueryThatSaysDone) {
  std::vector<char> host(64);
  EXPECT_EQ(npuSanAccess(a_, host.data(), 64, 1, 1), 0);  // a device-to-host copy's target
  EXPECT_EQ(npuSanAccess(NPU_SAN_HOST, host.data(), 64, 0, 2), 1);  // read before the sync
  EXPECT_EQ(reports()[0].current.stream_id, -1);
  EXPECT_EQ(npuSanAccess(a_, host.data(), 64, 1, 3), 0);
  ASSERT_NPU_OK(npuStreamSynchronize(a_));
  EXPECT_EQ(npuSanAccess(NPU_SAN_HOST, host.data(), 64, 0, 4), 0);
  EXPECT_EQ(npuSanAccess(a_, host.data(), 64, 1, 5), 0);
  ASSERT_NPU_OK(npuEventRecord(event_, a_));
  ASSERT_NPU_OK(npuEventSynchronize(event_));
  EXPECT_EQ(npuSanAccess(NPU_SAN_HOST, host.data(), 64, 1, 6), 0);
  // The host's write is seen by work launched after it.
  EXPECT_EQ(npuSanAccess(b_, host.data(), 64, 0, 7), 0);
}

TEST_F(Sanitizer, AnObserverThreadsPollsTeachTheHostNothing) {
  // A watchdog that sees a collective's event complete does not order the program's next launch.
  EXPECT_EQ(npuSanAccess(a_, at(0), 64, 1, 1), 0);
  ASSERT_NPU_OK(npuEventRecord(event_, a_));
  std::thread watchdog([this] {
    npuSanSetThreadObserver(1);
    EXPECT_EQ(npuEventSynchronize(event_), npuSuccess);
    EXPECT_EQ(npuEventQuery(event_), npuSuccess);
  });
  watchdog.join();
  EXPECT_EQ(npuSanAccess(b_, at(0), 64, 0, 2), 1);
  reports();
  ASSERT_NPU_OK(npuEventSynchronize(event_));  // the program's own thread
  EXPECT_EQ(npuSanAccess(b_, at(0), 64, 0, 3), 0);
}

TEST_F(Sanitizer, AnAllocationWithoutATagIsTheCurrentOps) {
  const uint64_t before = npuSanSetCurrentTag(77);
  npuSanAlloc(at(2048), 64, 0);
  npuSanSetCurrentTag(before);
  EXPECT_EQ(npuSanAccess(a_, at(2048), 64, 0, 1), 1);
  auto r = reports();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].kind, npuSanUninitRead);
  EXPECT_EQ(r[0].previous.tag, 77u);
}

TEST_F(Sanitizer, AGraphsAccessesAreMadeAtEachReplayOnTheReplayStream) {
  ASSERT_NPU_OK(npuStreamBeginCapture(a_, npuStreamCaptureModeGlobal));
  const uint64_t before = npuSanSetCurrentTag(5);
  ASSERT_NPU_OK(npuMemsetAsync(at(0), 1, 64, a_));  // captured: nothing is written yet
  npuSanSetCurrentTag(before);
  npuGraph_t graph = nullptr;
  ASSERT_NPU_OK(npuStreamEndCapture(a_, &graph));
  EXPECT_EQ(npuSanAccess(b_, at(0), 64, 0, 1), 0);  // no replay, no access
  ASSERT_NPU_OK(npuStreamSynchronize(b_));          // (so that the replay's write is ordered)
  ASSERT_NPU_OK(npuGraphLaunch(graph, a_));
  EXPECT_EQ(npuSanAccess(b_, at(0), 64, 0, 2), 1);  // the replay wrote it, unordered with b
  auto r = reports();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].previous.stream_id, id(a_));
  EXPECT_EQ(r[0].previous.tag, 5u);
  ASSERT_NPU_OK(npuStreamSynchronize(a_));
  EXPECT_EQ(npuSanAccess(b_, at(0), 64, 0, 3), 0);
  ASSERT_NPU_OK(npuGraphDestroy(graph));
}

TEST_F(Sanitizer, HostAccessesOfBytesNoStreamTouchedAreNotTracked) {
  std::vector<char> host(64);
  EXPECT_EQ(npuSanAccess(NPU_SAN_HOST, host.data(), 64, 1, 1), 0);
  EXPECT_EQ(g_kept.load(), 0);
  EXPECT_EQ(npuSanAccess(a_, host.data(), 64, 0, 2), 0);
}

TEST_F(Sanitizer, AFreeWhileAnotherStreamMayReadNeedsRecordStream) {
  EXPECT_EQ(npuSanAccess(a_, at(0), 256, 1, 1), 0);
  ASSERT_NPU_OK(npuEventRecord(event_, a_));
  ASSERT_NPU_OK(npuStreamWaitEvent(b_, event_, 0));
  EXPECT_EQ(npuSanAccess(b_, at(0), 256, 0, 2), 0);
  EXPECT_EQ(npuSanFree(at(0), 256, a_, nullptr, 0, 3), 1);
  auto r = reports();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].kind, npuSanFreeInUse);
  EXPECT_EQ(r[0].previous.stream_id, id(b_));
  EXPECT_EQ(r[0].current.stream_id, id(a_));
  EXPECT_EQ(r[0].current.tag, 3u);
  // The same with record_stream(b): the allocator waits for b before reuse.
  EXPECT_EQ(npuSanAccess(a_, at(0), 256, 1, 4), 0);  // the block's history ended at the free
  ASSERT_NPU_OK(npuEventRecord(event_, a_));
  ASSERT_NPU_OK(npuStreamWaitEvent(b_, event_, 0));
  EXPECT_EQ(npuSanAccess(b_, at(0), 256, 0, 5), 0);
  npuStream_t recorded[] = {b_};
  EXPECT_EQ(npuSanFree(at(0), 256, a_, recorded, 1, 6), 0);
  // Or with b joined back into a before the free.
  EXPECT_EQ(npuSanAccess(b_, at(0), 256, 0, 7), 0);
  ASSERT_NPU_OK(npuEventRecord(event_, b_));
  ASSERT_NPU_OK(npuStreamWaitEvent(a_, event_, 0));
  EXPECT_EQ(npuSanFree(at(0), 256, a_, nullptr, 0, 8), 0);
}

TEST_F(Sanitizer, AReadOfAllocatedBytesNothingWroteIsReportedOnce) {
  npuSanAlloc(at(1024), 512, 9);
  EXPECT_EQ(npuSanAccess(a_, at(1024), 256, 1, 1), 0);  // the first half is written
  EXPECT_EQ(npuSanAccess(a_, at(1024), 256, 0, 2), 0);
  EXPECT_EQ(npuSanAccess(a_, at(1024), 512, 0, 3), 1);  // the second half is not
  auto r = reports();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].kind, npuSanUninitRead);
  EXPECT_EQ(r[0].begin, reinterpret_cast<uintptr_t>(at(1280)));
  EXPECT_EQ(r[0].previous.tag, 9u);
  EXPECT_EQ(npuSanAccess(a_, at(1024), 512, 0, 4), 0);  // once per allocation's bytes
}

TEST_F(Sanitizer, TheRuntimesOwnCopiesAndMemsetsAreAccesses) {
  void* other = nullptr;
  ASSERT_NPU_OK(npuMalloc(&other, 256));
  const uint64_t before = npuSanSetCurrentTag(42);
  ASSERT_NPU_OK(npuMemsetAsync(other, 0, 256, a_));
  ASSERT_NPU_OK(npuMemcpyAsync(buf_, other, 256, npuMemcpyDeviceToDevice, a_));
  npuSanSetCurrentTag(before);
  EXPECT_EQ(npuSanAccess(b_, buf_, 4, 0, 1), 1);  // b reads the copy's target unordered
  auto r = reports();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].previous.tag, 42u);
  ASSERT_NPU_OK(npuStreamSynchronize(a_));
  EXPECT_EQ(npuSanAccess(b_, other, 4, 1, 2), 0);  // the host saw a finish, then launched b
  npuSanEnable(0, 0);
  ASSERT_NPU_OK(npuFree(other));
}

TEST(SanitizerOff, CostsNothingAndRecordsNothing) {
  npuSanEnable(0, 0);
  char bytes[16];
  EXPECT_EQ(npuSanEnabled(), 0);
  EXPECT_EQ(npuSanAccess(nullptr, bytes, 16, 1, 1), 0);
  EXPECT_EQ(npuSanAccess(nullptr, bytes, 16, 0, 2), 0);
  EXPECT_EQ(npuSanTakeReports(nullptr, 0), 0u);
}

}  // namespace
