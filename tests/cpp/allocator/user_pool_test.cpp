// User pools (torch.npu.MemPool / use_mem_pool) and the trace observer (memory history's
// segment events), against torch.cuda.MemPool's semantics.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "npu/caching_allocator.h"
#include "npu/runtime.h"

namespace npu::alloc {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr uint64_t kPool = 11;

std::unique_ptr<CachingAllocator> makeAllocator(const std::string& conf = "") {
  return std::make_unique<CachingAllocator>(AllocatorConfig::parse(conf));
}

int64_t reserved(const CachingAllocator& a) {
  return a.getStats(0).reserved_bytes[kAggregate].current;
}

uint64_t poolOf(const CachingAllocator& a, const void* ptr) {
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  for (const SegmentInfo& s : a.snapshot()) {
    if (addr >= s.address && addr < s.address + s.total_size) return s.pool_id;
  }
  ADD_FAILURE() << "no segment holds " << ptr;
  return ~uint64_t{0};
}

TEST(UserPool, ThisThreadsAllocationsGoToThePoolAndStayThere) {
  auto a = makeAllocator();
  a->createPool(0, kPool, false, false);
  EXPECT_EQ(a->poolUseCount(0, kPool), 1);
  a->beginAllocateThreadToPool(0, kPool);
  EXPECT_EQ(a->poolUseCount(0, kPool), 2);
  void* in_pool = a->allocate(3 * kMiB, 0, nullptr);
  void* other_thread = nullptr;
  std::thread([&] { other_thread = a->allocate(3 * kMiB, 0, nullptr); }).join();
  a->endAllocateThreadToPool(0, kPool);
  a->releasePool(0, kPool);
  EXPECT_EQ(a->poolUseCount(0, kPool), 1);
  EXPECT_EQ(poolOf(*a, in_pool), kPool);
  EXPECT_EQ(poolOf(*a, other_thread), 0u);

  // Freed, the block stays the pool's: an allocation outside never gets it, one inside does.
  a->free(in_pool);
  void* outside = a->allocate(3 * kMiB, 0, nullptr);
  EXPECT_NE(outside, in_pool);
  a->beginAllocateThreadToPool(0, kPool);
  void* again = a->allocate(3 * kMiB, 0, nullptr);
  a->endAllocateThreadToPool(0, kPool);
  a->releasePool(0, kPool);
  EXPECT_EQ(again, in_pool);
  a->free(again);
  a->free(outside);
  a->free(other_thread);

  // While the pool has a use, emptyCache keeps its segment; releasePoolMemory then returns it.
  a->emptyCache();
  EXPECT_EQ(reserved(*a), static_cast<int64_t>(20 * kMiB));
  a->releasePoolMemory(0, kPool);  // still used: nothing happens
  EXPECT_EQ(reserved(*a), static_cast<int64_t>(20 * kMiB));
  a->releasePool(0, kPool);
  a->releasePoolMemory(0, kPool);
  EXPECT_EQ(reserved(*a), 0);
}

TEST(UserPool, NoSplitHandsOutWholeBlocks) {
  auto a = makeAllocator();
  a->createPool(0, kPool, false, /*no_split=*/true);
  a->beginAllocateThreadToPool(0, kPool);
  void* p = a->allocate(3 * kMiB, 0, nullptr);
  a->endAllocateThreadToPool(0, kPool);
  const std::vector<SegmentInfo> segments = a->snapshot();
  ASSERT_EQ(segments.size(), 1u);
  ASSERT_EQ(segments[0].blocks.size(), 1u);
  EXPECT_EQ(segments[0].blocks[0].size, 20 * kMiB);
  a->free(p);
}

TEST(UserPool, UseOnOomLendsTheFreeBlocksOfThePool) {
  for (const bool use_on_oom : {true, false}) {
    auto a = makeAllocator();
    npuDeviceProp prop{};
    ASSERT_EQ(npuGetDeviceProperties(&prop, 0), npuSuccess);
    a->setMemoryFraction(100.0 * kMiB / static_cast<double>(prop.total_memory), 0);
    a->createPool(0, kPool, use_on_oom, false);
    a->beginAllocateThreadToPool(0, kPool);
    void* pooled = a->allocate(60 * kMiB, 0, nullptr);
    a->endAllocateThreadToPool(0, kPool);
    a->releasePool(0, kPool);
    a->free(pooled);
    if (use_on_oom) {
      void* lent = a->allocate(60 * kMiB, 0, nullptr);  // no room for a second segment
      EXPECT_EQ(lent, pooled);
      a->free(lent);
    } else {
      EXPECT_THROW(a->allocate(60 * kMiB, 0, nullptr), OutOfMemoryError);
    }
  }
}

TEST(UserPool, EndingFromAnotherThreadIsAClearError) {
  auto a = makeAllocator();
  a->createPool(0, kPool, false, false);
  a->beginAllocateThreadToPool(0, kPool);
  std::string message;
  std::thread([&] {
    try {
      a->endAllocateThreadToPool(0, kPool);
    } catch (const AllocatorError& e) {
      message = e.what();
    }
  }).join();
  EXPECT_NE(message.find("by a thread that did not begin it"), std::string::npos) << message;
  a->endAllocateThreadToPool(0, kPool);
}

// ---- the trace observer -------------------------------------------------------------------

std::vector<TraceEvent>* g_events = nullptr;
void collect(const TraceEvent& e) {
  if (g_events != nullptr) g_events->push_back(e);
}

TEST(TraceObserver, SeesSegmentsObtainedAndReturnedAndOutOfMemory) {
  std::vector<TraceEvent> events;
  g_events = &events;
  CachingAllocator::setTraceObserver(&collect);
  {
    auto a = makeAllocator();
    void* p = a->allocate(3 * kMiB, 0, nullptr);
    a->free(p);
    a->emptyCache();
    EXPECT_THROW(a->allocate(size_t{1} << 50, 0, nullptr), OutOfMemoryError);
    ASSERT_EQ(events.size(), 3u);
    EXPECT_STREQ(events[0].action, "segment_alloc");
    EXPECT_EQ(events[0].address, reinterpret_cast<uintptr_t>(p));
    EXPECT_EQ(events[0].size, 20 * kMiB);
    EXPECT_STREQ(events[1].action, "segment_free");
    EXPECT_EQ(events[1].address, events[0].address);
    EXPECT_EQ(events[1].size, 20 * kMiB);
    EXPECT_STREQ(events[2].action, "oom");
    EXPECT_EQ(events[2].size, size_t{1} << 50);
    EXPECT_GT(events[2].device_free, 0u);
  }
  events.clear();
  {
    auto a = makeAllocator("expandable_segments:True");
    void* p = a->allocate(3 * kMiB, 0, nullptr);
    a->free(p);
    a->emptyCache();
    ASSERT_EQ(events.size(), 2u);
    EXPECT_STREQ(events[0].action, "segment_map");
    EXPECT_STREQ(events[1].action, "segment_unmap");
    EXPECT_EQ(events[0].address, events[1].address);
    EXPECT_EQ(events[0].size, events[1].size);
    EXPECT_GE(events[0].size, 3 * kMiB);
  }
  CachingAllocator::setTraceObserver(nullptr);
  g_events = nullptr;
}

TEST(TraceObserver, NamesThePoolOfASegment) {
  std::vector<TraceEvent> events;
  g_events = &events;
  CachingAllocator::setTraceObserver(&collect);
  auto a = makeAllocator();
  a->createPool(0, kPool, false, false);
  a->beginAllocateThreadToPool(0, kPool);
  void* p = a->allocate(1000, 0, nullptr);
  a->endAllocateThreadToPool(0, kPool);
  CachingAllocator::setTraceObserver(nullptr);
  g_events = nullptr;
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].pool_id, kPool);
  EXPECT_EQ(events[0].size, 2 * kMiB);
  a->free(p);
}

}  // namespace
}  // namespace npu::alloc
