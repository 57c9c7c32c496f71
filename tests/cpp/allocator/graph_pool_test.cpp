// Graph pools: what a capture allocates stays out of everyone else's reach while its graph
// lives, because a replay writes those addresses again.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "npu/caching_allocator.h"
#include "npu/runtime.h"

namespace npu::alloc {
namespace {

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;
constexpr uint64_t kPool = 7;

std::unique_ptr<CachingAllocator> makeAllocator(const std::string& conf = "") {
  return std::make_unique<CachingAllocator>(AllocatorConfig::parse(conf));
}

npuStream_t newStream() {
  npuStream_t s = nullptr;
  EXPECT_EQ(npuStreamCreate(&s), npuSuccess);
  return s;
}

void noop(void*) {}

class GraphPool : public ::testing::TestWithParam<const char*> {};

TEST_P(GraphPool, CaptureMemoryIsNotReusedOutsideThePoolUntilReleased) {
  auto a = makeAllocator(GetParam());
  npuStream_t s = newStream();
  a->beginAllocateToPool(0, kPool, s);
  void* in_capture = a->allocate(256 * kKiB, 0, s);
  void* big = a->allocate(8 * kMiB, 0, s);
  a->free(in_capture);  // freed during the capture: a replay still writes it
  void* again = a->allocate(256 * kKiB, 0, s);
  EXPECT_EQ(again, in_capture) << "the pool reuses its own blocks during the capture";
  a->free(again);
  a->free(big);
  a->endAllocateToPool(0, kPool);

  // Same stream, same sizes, after the capture: the default pools serve them, elsewhere.
  void* eager = a->allocate(256 * kKiB, 0, s);
  void* eager_big = a->allocate(8 * kMiB, 0, s);
  EXPECT_NE(eager, in_capture);
  EXPECT_NE(eager_big, big);
  a->free(eager);
  a->free(eager_big);
  const int64_t held = a->getStats(0).reserved_bytes[kAggregate].current;
  a->emptyCache();  // the graph still holds its pool
  const int64_t after_empty = a->getStats(0).reserved_bytes[kAggregate].current;
  EXPECT_GT(after_empty, 0);
  EXPECT_LT(after_empty, held);

  a->releasePool(0, kPool);  // the graph is gone
  a->emptyCache();
  EXPECT_EQ(a->getStats(0).reserved_bytes[kAggregate].current, 0);
  EXPECT_EQ(npuStreamDestroy(s), npuSuccess);
}

TEST_P(GraphPool, ASharedPoolServesTheNextCaptureAndCountsItsUses) {
  auto a = makeAllocator(GetParam());
  npuStream_t s = newStream();
  a->beginAllocateToPool(0, kPool, s);
  void* first = a->allocate(64 * kKiB, 0, s);
  a->free(first);
  a->endAllocateToPool(0, kPool);
  a->beginAllocateToPool(0, kPool, s);  // a second graph in the same pool
  EXPECT_EQ(a->allocate(64 * kKiB, 0, s), first);
  a->free(first);
  a->endAllocateToPool(0, kPool);
  a->releasePool(0, kPool);
  a->emptyCache();
  EXPECT_GT(a->getStats(0).reserved_bytes[kAggregate].current, 0) << "one graph still holds it";
  a->releasePool(0, kPool);
  a->emptyCache();
  EXPECT_EQ(a->getStats(0).reserved_bytes[kAggregate].current, 0);
  EXPECT_EQ(npuStreamDestroy(s), npuSuccess);
}

TEST(GraphPoolCapture, StreamUsesFreedDuringACaptureDoNotBreakIt) {
  auto a = makeAllocator();
  npuStream_t s = newStream();
  npuStream_t side = newStream();
  ASSERT_EQ(npuStreamBeginCapture(s, npuStreamCaptureModeGlobal), npuSuccess);
  a->beginAllocateToPool(0, kPool, s);
  void* p = a->allocate(4 * kKiB, 0, s);
  a->recordStream(p, side);
  a->free(p);  // an event recorded on `s` now would land in the graph
  a->endAllocateToPool(0, kPool);
  npuGraph_t graph = nullptr;
  ASSERT_EQ(npuStreamEndCapture(s, &graph), npuSuccess) << npuGetLastErrorMessage();
  ASSERT_EQ(npuGraphDestroy(graph), npuSuccess);
  a->releasePool(0, kPool);
  a->emptyCache();  // waits for the deferred use on `side`, then releases everything
  EXPECT_EQ(a->getStats(0).reserved_bytes[kAggregate].current, 0);
  EXPECT_EQ(npuStreamDestroy(s), npuSuccess);
  EXPECT_EQ(npuStreamDestroy(side), npuSuccess);
}

TEST(GraphPoolCapture, AStreamThatJoinedTheCaptureAllocatesIntoItsPool) {
  auto a = makeAllocator();
  npuStream_t s = newStream();
  npuStream_t side = newStream();
  npuEvent_t fork = nullptr, join = nullptr;
  ASSERT_EQ(npuEventCreate(&fork), npuSuccess);
  ASSERT_EQ(npuEventCreate(&join), npuSuccess);
  ASSERT_EQ(npuStreamBeginCapture(s, npuStreamCaptureModeGlobal), npuSuccess);
  a->beginAllocateToPool(0, kPool, s);
  ASSERT_EQ(npuEventRecord(fork, s), npuSuccess);
  ASSERT_EQ(npuStreamWaitEvent(side, fork, 0), npuSuccess);
  void* on_side = a->allocate(4 * kKiB, 0, side);
  ASSERT_EQ(npuLaunchTaskWithRelease(side, "noop", noop, nullptr, nullptr), npuSuccess);
  ASSERT_EQ(npuEventRecord(join, side), npuSuccess);
  ASSERT_EQ(npuStreamWaitEvent(s, join, 0), npuSuccess);
  a->endAllocateToPool(0, kPool);
  npuGraph_t graph = nullptr;
  ASSERT_EQ(npuStreamEndCapture(s, &graph), npuSuccess) << npuGetLastErrorMessage();
  a->free(on_side);
  void* eager = a->allocate(4 * kKiB, 0, side);
  EXPECT_NE(eager, on_side) << "the joined stream's capture allocation came from the pool";
  a->free(eager);
  ASSERT_EQ(npuGraphDestroy(graph), npuSuccess);
  a->releasePool(0, kPool);
  ASSERT_EQ(npuEventDestroy(fork), npuSuccess);
  ASSERT_EQ(npuEventDestroy(join), npuSuccess);
}

TEST(GraphPoolCapture, MisuseIsAClearError) {
  auto a = makeAllocator();
  npuStream_t s = newStream();
  a->beginAllocateToPool(0, kPool, s);
  try {
    a->beginAllocateToPool(0, kPool + 1, s);
    FAIL() << "a second pool for the same stream was accepted";
  } catch (const AllocatorError& e) {
    EXPECT_NE(std::string(e.what()).find("already allocates into a graph pool"),
              std::string::npos) << e.what();
  }
  a->endAllocateToPool(0, kPool);
  try {
    a->releasePool(0, 12345);
    FAIL() << "releasing an unknown pool was accepted";
  } catch (const AllocatorError& e) {
    EXPECT_NE(std::string(e.what()).find("graph pool 12345"), std::string::npos) << e.what();
  }
  EXPECT_EQ(npuStreamDestroy(s), npuSuccess);
}

INSTANTIATE_TEST_SUITE_P(Segments, GraphPool,
                         ::testing::Values("", "expandable_segments:True"),
                         [](const auto& info) {
                           return std::string(info.param[0] ? "Expandable" : "Fixed");
                         });

}  // namespace
}  // namespace npu::alloc
