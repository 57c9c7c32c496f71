// The caching allocator over the simulated runtime. Each test builds its own CachingAllocator;
// ctest runs every test case in a fresh process, so tests that shrink the device with
// NPU_SIM_HBM_GB set it before their first runtime call (they skip when run in one process).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "npu/caching_allocator.h"
#include "npu/runtime.h"

namespace npu::alloc {
namespace {

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;

std::unique_ptr<CachingAllocator> makeAllocator(const std::string& conf = "") {
  return std::make_unique<CachingAllocator>(AllocatorConfig::parse(conf));
}

char* at(void* p, size_t offset) { return static_cast<char*>(p) + offset; }

size_t runtimeFree(int device = 0) {
  int previous = 0;
  npuGetDevice(&previous);
  npuSetDevice(device);
  size_t free_bytes = 0, total = 0;
  EXPECT_EQ(npuMemGetInfo(&free_bytes, &total), npuSuccess);
  npuSetDevice(previous);
  return free_bytes;
}

// Shrinks device HBM to 1 GiB; true if it took effect (the runtime reads it at first use).
bool useOneGiBDevice() {
  setenv("NPU_SIM_HBM_GB", "1", 1);
  npuDeviceProp prop{};
  return npuGetDeviceProperties(&prop, 0) == npuSuccess && prop.total_memory == kGiB;
}
#define REQUIRE_ONE_GIB_DEVICE()                                                  \
  if (!useOneGiBDevice()) {                                                       \
    GTEST_SKIP() << "needs NPU_SIM_HBM_GB=1 in a fresh process; run through ctest"; \
  }

void sleepTask(void* arg) {
  std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<int*>(arg)));
}

int64_t cur(const StatArray& s, StatType t = kAggregate) { return s[t].current; }

TEST(CachingAllocator, ZeroSizeIsNull) {
  auto a = makeAllocator();
  EXPECT_EQ(a->allocate(0, 0, nullptr), nullptr);
  EXPECT_EQ(a->getStats(0).allocation[kAggregate].allocated, 0);
}

TEST(CachingAllocator, RoundsTo512Bytes) {
  auto a = makeAllocator();
  void* p1 = a->allocate(1, 0, nullptr);
  EXPECT_EQ(cur(a->getStats(0).allocated_bytes), 512);
  void* p2 = a->allocate(513, 0, nullptr);
  EXPECT_EQ(cur(a->getStats(0).allocated_bytes), 512 + 1024);
  void* p3 = a->allocate(1024, 0, nullptr);
  DeviceStats s = a->getStats(0);
  EXPECT_EQ(cur(s.allocated_bytes), 512 + 1024 + 1024);
  EXPECT_EQ(cur(s.requested_bytes), 1 + 513 + 1024);
  // Blocks are packed in one small segment, one after the other.
  EXPECT_EQ(p2, at(p1, 512));
  EXPECT_EQ(p3, at(p1, 512 + 1024));
  a->free(p1);
  a->free(p2);
  a->free(p3);
}

TEST(CachingAllocator, RoundsToPowerOfTwoDivisions) {
  auto a = makeAllocator("roundup_power2_divisions:4");
  // 1.2 MiB: between 1 and 2 MiB in quarters -> 1.25 MiB, so it is a large-pool block.
  void* p = a->allocate(1200 * kKiB, 0, nullptr);
  DeviceStats s = a->getStats(0);
  EXPECT_EQ(cur(s.allocated_bytes), static_cast<int64_t>(1280 * kKiB));
  EXPECT_EQ(cur(s.allocated_bytes, kLargePool), static_cast<int64_t>(1280 * kKiB));
  a->free(p);
  // 5 MiB + 1: quarters of [4, 8) MiB -> 6 MiB. Powers of two stay as they are.
  p = a->allocate(5 * kMiB + 1, 0, nullptr);
  EXPECT_EQ(cur(a->getStats(0).allocated_bytes), static_cast<int64_t>(6 * kMiB));
  a->free(p);
  p = a->allocate(4 * kMiB, 0, nullptr);
  EXPECT_EQ(cur(a->getStats(0).allocated_bytes), static_cast<int64_t>(4 * kMiB));
  a->free(p);
  // Small sizes (<= 512 * divisions) keep plain 512-byte rounding.
  p = a->allocate(1500, 0, nullptr);
  EXPECT_EQ(cur(a->getStats(0).allocated_bytes), 1536);
  a->free(p);
}

TEST(CachingAllocator, ReusesFreedBlock) {
  auto a = makeAllocator();
  void* p = a->allocate(1000, 0, nullptr);
  a->free(p);
  void* q = a->allocate(1000, 0, nullptr);
  EXPECT_EQ(p, q);
  a->free(q);
  void* big = a->allocate(30 * kMiB, 0, nullptr);
  a->free(big);
  void* big2 = a->allocate(30 * kMiB, 0, nullptr);
  EXPECT_EQ(big, big2);
  a->free(big2);
  DeviceStats s = a->getStats(0);
  EXPECT_EQ(s.num_device_alloc, 2);  // one small and one large segment, nothing more
  EXPECT_EQ(s.segment[kAggregate].allocated, 2);
}

TEST(CachingAllocator, BlocksOfOtherStreamsAreNotReused) {
  auto a = makeAllocator();
  npuStream_t s2 = nullptr;
  ASSERT_EQ(npuStreamCreate(&s2), npuSuccess);
  void* p = a->allocate(1000, 0, nullptr);
  a->free(p);
  void* q = a->allocate(1000, 0, s2);
  EXPECT_NE(p, q);
  EXPECT_EQ(a->getStats(0).segment[kSmallPool].current, 2);
  a->free(q);
  a.reset();
  npuStreamDestroy(s2);
}

TEST(CachingAllocator, SplitsAndMerges) {
  auto a = makeAllocator();
  void* x = a->allocate(4 * kMiB, 0, nullptr);  // a 20 MiB segment, split
  void* y = a->allocate(4 * kMiB, 0, nullptr);  // from the remainder
  EXPECT_EQ(y, at(x, 4 * kMiB));
  DeviceStats s = a->getStats(0);
  EXPECT_EQ(cur(s.segment), 1);
  EXPECT_EQ(cur(s.reserved_bytes), static_cast<int64_t>(20 * kMiB));
  EXPECT_EQ(cur(s.inactive_split), 1);
  EXPECT_EQ(cur(s.inactive_split_bytes), static_cast<int64_t>(12 * kMiB));

  a->free(x);  // [4 free][4 used][12 free]: two inactive split blocks
  s = a->getStats(0);
  EXPECT_EQ(cur(s.inactive_split), 2);
  EXPECT_EQ(cur(s.inactive_split_bytes), static_cast<int64_t>(16 * kMiB));

  a->free(y);  // merges with both neighbours: one unsplit 20 MiB block
  s = a->getStats(0);
  EXPECT_EQ(cur(s.inactive_split), 0);
  EXPECT_EQ(cur(s.inactive_split_bytes), 0);
  std::vector<SegmentInfo> snap = a->snapshot();
  ASSERT_EQ(snap.size(), 1u);
  ASSERT_EQ(snap[0].blocks.size(), 1u);
  EXPECT_EQ(snap[0].blocks[0].size, 20 * kMiB);

  // A whole-segment request now takes the merged block.
  void* z = a->allocate(20 * kMiB, 0, nullptr);
  EXPECT_EQ(z, x);
  EXPECT_EQ(a->getStats(0).num_device_alloc, 1);
  a->free(z);
}

TEST(CachingAllocator, LargeRemainderOfOneMiBIsNotSplitOff) {
  auto a = makeAllocator();
  // 19 MiB from a 20 MiB segment leaves exactly 1 MiB: not > 1 MiB, so the block keeps it.
  void* p = a->allocate(19 * kMiB, 0, nullptr);
  EXPECT_EQ(cur(a->getStats(0).allocated_bytes), static_cast<int64_t>(20 * kMiB));
  EXPECT_EQ(cur(a->getStats(0).requested_bytes), static_cast<int64_t>(19 * kMiB));
  a->free(p);
}

TEST(CachingAllocator, SmallAndLargePoolStats) {
  auto a = makeAllocator();
  void* s1 = a->allocate(kMiB, 0, nullptr);      // small: <= 1 MiB, 2 MiB segment
  void* l1 = a->allocate(kMiB + 1, 0, nullptr);  // large: 20 MiB segment
  void* l2 = a->allocate(30 * kMiB, 0, nullptr);  // large: own 30 MiB segment
  DeviceStats s = a->getStats(0);
  EXPECT_EQ(cur(s.segment, kSmallPool), 1);
  EXPECT_EQ(cur(s.segment, kLargePool), 2);
  EXPECT_EQ(cur(s.segment), 3);
  EXPECT_EQ(cur(s.reserved_bytes, kSmallPool), static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(cur(s.reserved_bytes, kLargePool), static_cast<int64_t>(50 * kMiB));
  EXPECT_EQ(cur(s.reserved_bytes), static_cast<int64_t>(52 * kMiB));
  EXPECT_EQ(cur(s.allocated_bytes, kSmallPool), static_cast<int64_t>(kMiB));
  EXPECT_EQ(cur(s.allocated_bytes, kLargePool), static_cast<int64_t>(31 * kMiB + 512));
  EXPECT_EQ(cur(s.allocation, kSmallPool), 1);
  EXPECT_EQ(cur(s.allocation, kLargePool), 2);
  a->free(s1);
  a->free(l1);
  a->free(l2);
}

TEST(CachingAllocator, StatsByHand) {
  auto a = makeAllocator();
  void* p = a->allocate(1000, 0, nullptr);           // 1024 small
  void* q = a->allocate(3 * kMiB, 0, nullptr);       // 3 MiB large (20 MiB segment)
  a->free(p);
  void* r = a->allocate(2000, 0, nullptr);           // 2048 small, same segment
  DeviceStats s = a->getStats(0);
  const int64_t m3 = 3 * kMiB;

  EXPECT_EQ(s.allocation[kAggregate].current, 2);
  EXPECT_EQ(s.allocation[kAggregate].peak, 2);
  EXPECT_EQ(s.allocation[kAggregate].allocated, 3);
  EXPECT_EQ(s.allocation[kAggregate].freed, 1);
  EXPECT_EQ(s.allocation[kSmallPool].current, 1);
  EXPECT_EQ(s.allocation[kSmallPool].allocated, 2);
  EXPECT_EQ(s.allocation[kLargePool].allocated, 1);

  EXPECT_EQ(s.allocated_bytes[kAggregate].current, m3 + 2048);
  EXPECT_EQ(s.allocated_bytes[kAggregate].peak, m3 + 2048);
  EXPECT_EQ(s.allocated_bytes[kAggregate].allocated, 1024 + m3 + 2048);
  EXPECT_EQ(s.allocated_bytes[kAggregate].freed, 1024);
  EXPECT_EQ(s.allocated_bytes[kSmallPool].peak, 2048);

  EXPECT_EQ(s.requested_bytes[kAggregate].current, m3 + 2000);
  EXPECT_EQ(s.requested_bytes[kAggregate].allocated, 1000 + m3 + 2000);
  EXPECT_EQ(s.requested_bytes[kAggregate].freed, 1000);

  EXPECT_EQ(s.active[kAggregate].current, 2);
  EXPECT_EQ(s.active_bytes[kAggregate].current, m3 + 2048);

  EXPECT_EQ(s.segment[kAggregate].current, 2);
  EXPECT_EQ(s.reserved_bytes[kAggregate].current, static_cast<int64_t>(22 * kMiB));
  EXPECT_EQ(s.reserved_bytes[kAggregate].freed, 0);
  EXPECT_EQ(s.num_device_alloc, 2);
  EXPECT_EQ(s.num_device_free, 0);
  EXPECT_EQ(s.num_alloc_retries, 0);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_EQ(s.max_split_size, -1);  // no limit, as torch.npu.memory_stats() reports it

  // Small segment [2048 used][rest free]; large [3 MiB used][17 MiB free].
  EXPECT_EQ(s.inactive_split[kAggregate].current, 2);
  EXPECT_EQ(s.inactive_split_bytes[kAggregate].current,
            static_cast<int64_t>(2 * kMiB - 2048 + 17 * kMiB));

  a->free(q);
  a->free(r);
  s = a->getStats(0);
  EXPECT_EQ(s.allocated_bytes[kAggregate].current, 0);
  EXPECT_EQ(s.allocated_bytes[kAggregate].peak, m3 + 2048);
  EXPECT_EQ(s.allocated_bytes[kAggregate].freed, 1024 + m3 + 2048);
  EXPECT_EQ(s.requested_bytes[kAggregate].current, 0);
  EXPECT_EQ(s.active[kAggregate].current, 0);
  EXPECT_EQ(s.inactive_split[kAggregate].current, 0);
  EXPECT_EQ(s.reserved_bytes[kAggregate].current, static_cast<int64_t>(22 * kMiB));
}

TEST(CachingAllocator, ResetPeakAndAccumulatedStats) {
  auto a = makeAllocator();
  void* p = a->allocate(8 * kMiB, 0, nullptr);
  void* q = a->allocate(8 * kMiB, 0, nullptr);
  a->free(p);
  DeviceStats s = a->getStats(0);
  EXPECT_EQ(s.allocated_bytes[kAggregate].peak, static_cast<int64_t>(16 * kMiB));
  a->resetPeakStats(0);
  s = a->getStats(0);
  EXPECT_EQ(s.allocated_bytes[kAggregate].peak, static_cast<int64_t>(8 * kMiB));
  EXPECT_EQ(s.allocation[kAggregate].peak, 1);
  EXPECT_EQ(s.allocated_bytes[kAggregate].allocated, static_cast<int64_t>(16 * kMiB));
  a->resetAccumulatedStats(0);
  s = a->getStats(0);
  EXPECT_EQ(s.allocated_bytes[kAggregate].allocated, 0);
  EXPECT_EQ(s.allocated_bytes[kAggregate].freed, 0);
  EXPECT_EQ(s.allocated_bytes[kAggregate].current, static_cast<int64_t>(8 * kMiB));
  EXPECT_EQ(s.num_device_alloc, 0);
  a->free(q);
  s = a->getStats(0);
  EXPECT_EQ(s.allocated_bytes[kAggregate].freed, static_cast<int64_t>(8 * kMiB));
  EXPECT_EQ(s.allocated_bytes[kAggregate].peak, static_cast<int64_t>(8 * kMiB));
}

TEST(CachingAllocator, EmptyCacheReturnsMemoryToRuntime) {
  auto a = makeAllocator();
  const size_t free_before = runtimeFree();
  void* p = a->allocate(100 * kMiB, 0, nullptr);
  void* q = a->allocate(1000, 0, nullptr);
  void* r = a->allocate(5 * kMiB, 0, nullptr);
  a->free(p);
  a->free(q);
  EXPECT_EQ(runtimeFree(), free_before - 122 * kMiB);
  a->emptyCache();  // r's segment stays: it is in use
  DeviceStats s = a->getStats(0);
  EXPECT_EQ(cur(s.reserved_bytes), static_cast<int64_t>(20 * kMiB));
  EXPECT_EQ(runtimeFree(), free_before - 20 * kMiB);
  a->free(r);
  a->emptyCache();
  s = a->getStats(0);
  EXPECT_EQ(cur(s.reserved_bytes), 0);
  EXPECT_EQ(cur(s.segment), 0);
  EXPECT_EQ(s.num_device_free, 3);
  EXPECT_EQ(runtimeFree(), free_before);
}

// A block freed while another stream still uses it must wait for that stream's work.
TEST(CachingAllocator, RecordStreamDelaysReuseUntilStreamFinishes) {
  auto a = makeAllocator();
  npuStream_t side = nullptr;
  ASSERT_EQ(npuStreamCreate(&side), npuSuccess);
  void* p = a->allocate(kMiB, 0, nullptr);
  static int sleep_ms = 50;
  ASSERT_EQ(npuLaunchTask(side, "sleep", sleepTask, &sleep_ms), npuSuccess);
  a->recordStream(p, side);
  a->recordStream(p, nullptr);  // its own stream: no extra wait
  a->free(p);

  DeviceStats s = a->getStats(0);
  EXPECT_EQ(cur(s.allocation), 0);
  EXPECT_EQ(cur(s.active), 1);  // still in use by `side`
  void* q = a->allocate(kMiB, 0, nullptr);
  EXPECT_NE(q, p) << "handed out again while the side stream may still use it";
  EXPECT_EQ(npuStreamQuery(side), npuErrorNotReady) << "the task should still be running";

  ASSERT_EQ(npuStreamSynchronize(side), npuSuccess);
  void* r = a->allocate(kMiB, 0, nullptr);  // polls the event: p is free now
  EXPECT_EQ(r, p);
  a->free(q);
  a->free(r);
  s = a->getStats(0);
  EXPECT_EQ(cur(s.active), 0);
  a.reset();
  npuStreamDestroy(side);
}

TEST(CachingAllocator, EmptyCacheWaitsForPendingStreamUses) {
  auto a = makeAllocator();
  npuStream_t side = nullptr;
  ASSERT_EQ(npuStreamCreate(&side), npuSuccess);
  const size_t free_before = runtimeFree();
  void* p = a->allocate(30 * kMiB, 0, nullptr);
  static int sleep_ms = 50;
  ASSERT_EQ(npuLaunchTask(side, "sleep", sleepTask, &sleep_ms), npuSuccess);
  a->recordStream(p, side);
  a->free(p);
  a->emptyCache();
  EXPECT_EQ(npuStreamQuery(side), npuSuccess);
  EXPECT_EQ(cur(a->getStats(0).reserved_bytes), 0);
  EXPECT_EQ(a->getStats(0).num_sync_all_streams, 1);
  EXPECT_EQ(runtimeFree(), free_before);
  a.reset();
  npuStreamDestroy(side);
}

TEST(CachingAllocator, NoCachingReturnsEveryFreeAtOnce) {
  AllocatorConfig config;
  config.caching_disabled = true;
  CachingAllocator a(config);
  const size_t free_before = runtimeFree();
  void* p = a.allocate(1000, 0, nullptr);
  void* q = a.allocate(3 * kMiB, 0, nullptr);
  DeviceStats s = a.getStats(0);
  EXPECT_EQ(cur(s.reserved_bytes), static_cast<int64_t>(1024 + 3 * kMiB));  // exact sizes
  EXPECT_EQ(runtimeFree(), free_before - 1024 - 3 * kMiB);
  a.free(p);
  a.free(q);
  s = a.getStats(0);
  EXPECT_EQ(cur(s.reserved_bytes), 0);
  EXPECT_EQ(cur(s.segment), 0);
  EXPECT_EQ(s.num_device_free, 2);
  EXPECT_EQ(runtimeFree(), free_before);
}

TEST(CachingAllocator, NoCachingStillWaitsForStreamUses) {
  AllocatorConfig config;
  config.caching_disabled = true;
  CachingAllocator a(config);
  npuStream_t side = nullptr;
  ASSERT_EQ(npuStreamCreate(&side), npuSuccess);
  void* p = a.allocate(kMiB, 0, nullptr);
  static int sleep_ms = 50;
  ASSERT_EQ(npuLaunchTask(side, "sleep", sleepTask, &sleep_ms), npuSuccess);
  a.recordStream(p, side);
  a.free(p);
  EXPECT_EQ(cur(a.getStats(0).reserved_bytes), static_cast<int64_t>(kMiB));
  ASSERT_EQ(npuStreamSynchronize(side), npuSuccess);
  void* q = a.allocate(512, 0, nullptr);  // processes the completed event
  EXPECT_EQ(cur(a.getStats(0).reserved_bytes), 512);
  a.free(q);
  npuStreamDestroy(side);
}

TEST(CachingAllocator, MemoryFractionCapsReserved) {
  REQUIRE_ONE_GIB_DEVICE();
  auto a = makeAllocator();
  EXPECT_EQ(a->getMemoryFraction(0), 1.0);
  a->setMemoryFraction(0.25, 0);  // 256 MiB
  EXPECT_EQ(a->getMemoryFraction(0), 0.25);
  void* p = a->allocate(200 * kMiB, 0, nullptr);
  try {
    a->allocate(100 * kMiB, 0, nullptr);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("256.00 MiB allowed; "), std::string::npos) << e.what();
  }
  EXPECT_EQ(a->getStats(0).num_ooms, 1);
  void* q = a->allocate(56 * kMiB, 0, nullptr);  // exactly up to the cap
  EXPECT_EQ(cur(a->getStats(0).reserved_bytes), static_cast<int64_t>(256 * kMiB));
  a->free(p);
  a->free(q);
  EXPECT_THROW(a->setMemoryFraction(1.5, 0), std::invalid_argument);
  EXPECT_THROW(a->setMemoryFraction(-0.1, 0), std::invalid_argument);
}

TEST(CachingAllocator, LargeSegmentSizeAndHugePagesSizeTheLargePool) {
  auto a = makeAllocator("large_segment_size_mb:50");
  void* p = a->allocate(3 * kMiB, 0, nullptr);  // 1..10 MiB requests share 50 MiB segments
  EXPECT_EQ(cur(a->getStats(0).reserved_bytes, kLargePool), static_cast<int64_t>(50 * kMiB));
  void* q = a->allocate(30 * kMiB, 0, nullptr);  // fits the rest of that segment
  EXPECT_EQ(cur(a->getStats(0).segment, kLargePool), 1);
  a->free(p);
  a->free(q);
  auto h = makeAllocator("page_size:1g");
  void* big = h->allocate(3 * kMiB, 0, nullptr);  // a whole GiB
  void* small = h->allocate(kKiB, 0, nullptr);     // the small pool keeps 2 MiB segments
  EXPECT_EQ(cur(h->getStats(0).reserved_bytes, kLargePool), static_cast<int64_t>(kGiB));
  EXPECT_EQ(cur(h->getStats(0).reserved_bytes, kSmallPool), static_cast<int64_t>(2 * kMiB));
  h->free(big);
  h->free(small);
}

TEST(CachingAllocator, MemoryFractionFromTheConfigAndAtRunTime) {
  REQUIRE_ONE_GIB_DEVICE();
  auto a = makeAllocator("per_process_memory_fraction:0.25");
  EXPECT_EQ(a->getMemoryFraction(0), 1.0);  // no state yet for the device
  void* p = a->allocate(200 * kMiB, 0, nullptr);
  EXPECT_EQ(a->getMemoryFraction(0), 0.25);
  EXPECT_THROW(a->allocate(100 * kMiB, 0, nullptr), OutOfMemoryError);
  a->setSettings("per_process_memory_fraction:0.5");  // the devices in use follow
  EXPECT_EQ(a->getMemoryFraction(0), 0.5);
  void* q = a->allocate(100 * kMiB, 0, nullptr);
  a->free(p);
  a->free(q);
}

TEST(CachingAllocator, SettingsChangeAtRunTime) {
  auto a = makeAllocator();
  void* p = a->allocate(9 * kMiB, 0, nullptr);
  EXPECT_EQ(cur(a->getStats(0).reserved_bytes, kLargePool), static_cast<int64_t>(20 * kMiB));
  a->setSettings("large_segment_size_mb:40");
  EXPECT_EQ(a->config().large_segment_size, 40 * kMiB);
  void* p2 = a->allocate(9 * kMiB, 0, nullptr);  // still fits the 20 MiB segment
  void* q = a->allocate(9 * kMiB, 0, nullptr);   // no room left there: a new 40 MiB segment
  EXPECT_EQ(cur(a->getStats(0).reserved_bytes, kLargePool), static_cast<int64_t>(60 * kMiB));
  a->setSettings("expandable_segments:True");
  EXPECT_TRUE(a->config().expandable_segments);
  EXPECT_EQ(a->config().large_segment_size, 40 * kMiB);  // unnamed keys keep their values
  void* r = a->allocate(100 * kMiB, 0, nullptr);  // bigger than any cached free block
  bool expandable = false;
  for (const SegmentInfo& seg : a->snapshot()) expandable = expandable || seg.is_expandable;
  EXPECT_TRUE(expandable);
  try {
    a->setSettings("expandable_segments:Maybe");
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("expected True or False"), std::string::npos);
  }
  EXPECT_TRUE(a->config().expandable_segments);
  a->free(p);
  a->free(p2);
  a->free(q);
  a->free(r);
}

TEST(CachingAllocator, OutOfMemoryMessageAndCounters) {
  REQUIRE_ONE_GIB_DEVICE();
  auto a = makeAllocator();
  void* p = a->allocate(512 * kMiB, 0, nullptr);
  void* small = a->allocate(1000, 0, nullptr);
  std::string message;
  try {
    a->allocate(600 * kMiB, 0, nullptr);
  } catch (const OutOfMemoryError& e) {
    message = e.what();
  }
  // Exactly 1 GiB prints as "1024.00 MiB": PyTorch's format_size switches units above a
  // power of 1024, not at it.
  EXPECT_EQ(message,
            "NPU out of memory. Tried to allocate 600.00 MiB (NPU 0; 1024.00 MiB total capacity; "
            "512.00 MiB already allocated; 510.00 MiB free; 514.00 MiB reserved in total by "
            "PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb "
            "to avoid fragmentation.");
  DeviceStats s = a->getStats(0);
  EXPECT_EQ(s.num_ooms, 1);
  EXPECT_EQ(s.num_alloc_retries, 1);  // it flushed the cache and tried once more
  a->free(p);
  a->free(small);
}

TEST(CachingAllocator, RetryAfterFreeingCachedBlocks) {
  REQUIRE_ONE_GIB_DEVICE();
  auto a = makeAllocator();
  void* p = a->allocate(600 * kMiB, 0, nullptr);
  a->free(p);  // cached, still reserved
  void* q = a->allocate(700 * kMiB, 0, nullptr);  // only fits once the 600 MiB are released
  DeviceStats s = a->getStats(0);
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_EQ(cur(s.reserved_bytes), static_cast<int64_t>(700 * kMiB));
  a->free(q);
}

// Out of memory while a fitting block waits for a stream: the flush waits for the stream and
// hands out that block, even though its segment is still in use and cannot be released.
TEST(CachingAllocator, RetryReusesBlockFreedByWaitingForStreams) {
  REQUIRE_ONE_GIB_DEVICE();
  auto a = makeAllocator();
  npuStream_t side = nullptr;
  ASSERT_EQ(npuStreamCreate(&side), npuSuccess);
  void* x = a->allocate(4 * kMiB, 0, nullptr);   // one 20 MiB segment: [x 4][y 4][z 12]
  void* y = a->allocate(4 * kMiB, 0, nullptr);
  void* z = a->allocate(12 * kMiB, 0, nullptr);
  static int sleep_ms = 50;
  ASSERT_EQ(npuLaunchTask(side, "sleep", sleepTask, &sleep_ms), npuSuccess);
  a->recordStream(x, side);
  a->free(x);
  void* rest = a->allocate(kGiB - 20 * kMiB, 0, nullptr);  // the device is full
  void* again = a->allocate(4 * kMiB, 0, nullptr);
  EXPECT_EQ(again, x);
  DeviceStats s = a->getStats(0);
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_EQ(s.num_sync_all_streams, 1);
  for (void* p : {again, y, z, rest}) a->free(p);
  a.reset();
  npuStreamDestroy(side);
}

TEST(CachingAllocator, ExactlyCapacitySucceedsOneByteMoreFails) {
  REQUIRE_ONE_GIB_DEVICE();
  auto a = makeAllocator();
  void* p = a->allocate(kGiB, 0, nullptr);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(runtimeFree(), 0u);
  a->free(p);
  a->emptyCache();
  EXPECT_THROW(a->allocate(kGiB + 1, 0, nullptr), OutOfMemoryError);
  EXPECT_EQ(a->getStats(0).num_ooms, 1);
  EXPECT_EQ(runtimeFree(), kGiB);
  void* again = a->allocate(kGiB, 0, nullptr);  // nothing leaked by the failure
  a->free(again);
}

TEST(CachingAllocator, ImpossibleSizeIsOutOfMemory) {
  auto a = makeAllocator();
  EXPECT_THROW(a->allocate(SIZE_MAX, 0, nullptr), OutOfMemoryError);
  EXPECT_THROW(a->allocate(SIZE_MAX / 2, 0, nullptr), OutOfMemoryError);
  EXPECT_EQ(a->getStats(0).num_ooms, 2);
  EXPECT_EQ(cur(a->getStats(0).reserved_bytes), 0);
}

TEST(CachingAllocator, MaxSplitSizeKeepsOversizeBlocksWhole) {
  auto a = makeAllocator("max_split_size_mb:40");
  void* big = a->allocate(50 * kMiB, 0, nullptr);
  DeviceStats s = a->getStats(0);
  EXPECT_EQ(s.oversize_allocations.current, 1);
  EXPECT_EQ(s.oversize_segments.current, 1);
  EXPECT_EQ(s.max_split_size, static_cast<int64_t>(40 * kMiB));
  a->free(big);
  // A normal request never takes an oversize block ...
  void* normal = a->allocate(30 * kMiB, 0, nullptr);
  EXPECT_NE(normal, big);
  // ... an oversize one does when it wastes less than 20 MiB, and the block is not split.
  void* over = a->allocate(45 * kMiB, 0, nullptr);
  EXPECT_EQ(over, big);
  EXPECT_EQ(cur(a->getStats(0).allocated_bytes), static_cast<int64_t>(80 * kMiB));
  a->free(over);
  void* smaller = a->allocate(41 * kMiB, 0, nullptr);  // 50 < 41 + 20: still reused
  EXPECT_EQ(smaller, big);
  a->free(smaller);
  a->free(normal);
}

TEST(CachingAllocator, OversizeBlocksReleasedBeforeGivingUp) {
  REQUIRE_ONE_GIB_DEVICE();
  auto a = makeAllocator("max_split_size_mb:100");
  void* p = a->allocate(700 * kMiB, 0, nullptr);
  a->free(p);
  // 400 MiB would waste 300 MiB of the 700 MiB block: a new segment is needed, which only fits
  // once the cached oversize block is released (without the full flush: no retry counted).
  void* q = a->allocate(400 * kMiB, 0, nullptr);
  DeviceStats s = a->getStats(0);
  EXPECT_EQ(s.num_alloc_retries, 0);
  EXPECT_EQ(cur(s.reserved_bytes), static_cast<int64_t>(400 * kMiB));
  a->free(q);
}

TEST(CachingAllocator, GarbageCollectionFreesOldestCachedBlocks) {
  REQUIRE_ONE_GIB_DEVICE();
  auto a = makeAllocator("garbage_collection_threshold:0.3");  // ~307 MiB of 1 GiB
  void* p = a->allocate(200 * kMiB, 0, nullptr);
  a->free(p);  // cached first: the oldest
  void* q = a->allocate(300 * kMiB, 0, nullptr);
  a->free(q);
  // Reserved is 500 MiB > 307 MiB: before a new segment, the older 200 MiB block goes.
  void* r = a->allocate(400 * kMiB, 0, nullptr);
  DeviceStats s = a->getStats(0);
  EXPECT_EQ(cur(s.reserved_bytes), static_cast<int64_t>(700 * kMiB));
  EXPECT_EQ(s.num_alloc_retries, 0);
  void* again = a->allocate(300 * kMiB, 0, nullptr);  // the younger block is still cached
  EXPECT_EQ(again, q);
  a->free(again);
  a->free(r);
}

// Growing requests with the previous one freed: fixed segments cannot reuse the smaller cached
// segments, an expandable segment extends the merged free space at its end instead.
size_t fragmentationPeak(const std::string& conf, size_t* reserved_after_empty) {
  auto a = makeAllocator(conf);
  void* keep = a->allocate(1000, 0, nullptr);
  void* previous = nullptr;
  for (size_t i = 1; i <= 8; ++i) {
    void* p = a->allocate(i * 11 * kMiB, 0, nullptr);
    std::memset(p, static_cast<int>(i), i * 11 * kMiB);  // the memory is really usable
    a->free(previous);
    previous = p;
  }
  a->free(previous);
  const auto peak = static_cast<size_t>(a->getStats(0).reserved_bytes[kAggregate].peak);
  a->free(keep);
  a->emptyCache();
  *reserved_after_empty = static_cast<size_t>(cur(a->getStats(0).reserved_bytes));
  return peak;
}

TEST(CachingAllocator, ExpandableSegmentsReduceFragmentation) {
  const size_t free_before = runtimeFree();
  size_t fixed_after = 1, expandable_after = 1;
  const size_t fixed = fragmentationPeak("", &fixed_after);
  const size_t expandable = fragmentationPeak("expandable_segments:True", &expandable_after);
  // Fixed: 12+22+34+44+56+66+78+88 MiB of segments + 2 MiB small. Expandable: freed requests
  // merge into free space that later, larger requests reuse or extend (about 200 MiB).
  EXPECT_EQ(fixed, 402 * kMiB);
  EXPECT_LE(expandable, fixed / 2);
  EXPECT_EQ(fixed_after, 0u);
  EXPECT_EQ(expandable_after, 0u);
  EXPECT_EQ(runtimeFree(), free_before);
}

TEST(CachingAllocator, ExpandableSegmentGrowsAndShrinks) {
  auto a = makeAllocator("expandable_segments:True");
  const size_t free_before = runtimeFree();
  void* x = a->allocate(30 * kMiB, 0, nullptr);
  void* y = a->allocate(30 * kMiB, 0, nullptr);
  EXPECT_EQ(y, at(x, 30 * kMiB));  // one range, mapped on demand
  DeviceStats s = a->getStats(0);
  EXPECT_EQ(cur(s.segment), 1);
  EXPECT_EQ(cur(s.reserved_bytes), static_cast<int64_t>(60 * kMiB));
  std::vector<SegmentInfo> snap = a->snapshot();
  ASSERT_EQ(snap.size(), 1u);
  EXPECT_TRUE(snap[0].is_expandable);
  EXPECT_EQ(snap[0].total_size, 60 * kMiB);

  a->free(y);
  a->emptyCache();  // y's pages are at the end: unmapped
  EXPECT_EQ(cur(a->getStats(0).reserved_bytes), static_cast<int64_t>(30 * kMiB));
  EXPECT_EQ(runtimeFree(), free_before - 30 * kMiB);
  void* z = a->allocate(40 * kMiB, 0, nullptr);
  EXPECT_EQ(z, y);
  a->free(x);
  a->free(z);
  a->emptyCache();
  EXPECT_EQ(cur(a->getStats(0).reserved_bytes), 0);
  EXPECT_EQ(cur(a->getStats(0).segment), 0);
  EXPECT_EQ(runtimeFree(), free_before);
  EXPECT_TRUE(a->snapshot().empty());
}

TEST(CachingAllocator, ExpandableSegmentOutOfMemory) {
  REQUIRE_ONE_GIB_DEVICE();
  auto a = makeAllocator("expandable_segments:True");
  void* p = a->allocate(900 * kMiB, 0, nullptr);
  EXPECT_THROW(a->allocate(200 * kMiB, 0, nullptr), OutOfMemoryError);
  a->free(p);
  void* q = a->allocate(1000 * kMiB, 0, nullptr);  // reuses and extends the freed range
  EXPECT_EQ(q, p);
  a->free(q);
}

TEST(CachingAllocator, ConcurrentAllocateAndFree) {
  auto a = makeAllocator();
  constexpr int kThreads = 2;
  constexpr int kIterations = 20000;
  std::vector<std::thread> threads;
  std::vector<int> errors(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(1234 + t);
      const size_t sizes[] = {100, 512, 4000, 70000, 900 * 1024, 3 * kMiB, 12 * kMiB};
      std::vector<std::pair<char*, size_t>> live;
      const char mark = static_cast<char>('A' + t);
      for (int i = 0; i < kIterations; ++i) {
        if (live.size() < 16 && (live.empty() || rng() % 2 == 0)) {
          size_t size = sizes[rng() % std::size(sizes)];
          auto* p = static_cast<char*>(a->allocate(size, 0, nullptr));
          p[0] = mark;
          p[size - 1] = mark;
          live.emplace_back(p, size);
        } else {
          size_t k = rng() % live.size();
          auto [p, size] = live[k];
          if (p[0] != mark || p[size - 1] != mark) ++errors[t];  // someone else wrote here
          a->free(p);
          live[k] = live.back();
          live.pop_back();
        }
      }
      for (auto [p, size] : live) a->free(p);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], 0) << "thread " << t;
  DeviceStats s = a->getStats(0);
  EXPECT_EQ(cur(s.allocation), 0);
  EXPECT_EQ(cur(s.allocated_bytes), 0);
  EXPECT_EQ(cur(s.active), 0);
  EXPECT_EQ(cur(s.requested_bytes), 0);
  EXPECT_EQ(s.allocation[kAggregate].allocated, s.allocation[kAggregate].freed);
  EXPECT_EQ(s.allocation[kAggregate].allocated,
            s.allocation[kSmallPool].allocated + s.allocation[kLargePool].allocated);
  EXPECT_GE(s.allocation[kAggregate].allocated, kThreads * kIterations / 2);
  EXPECT_EQ(cur(s.inactive_split), 0);  // everything merged back into whole segments
  a->emptyCache();
  EXPECT_EQ(cur(a->getStats(0).reserved_bytes), 0);
}

// Two threads allocate, use blocks on a side stream and free them while a third empties the
// cache; afterwards every byte is accounted for and back with the runtime.
void stressWithStreamsAndEmptyCache(const std::string& conf) {
  auto a = makeAllocator(conf);
  const size_t free_before = runtimeFree();
  npuStream_t side = nullptr;
  ASSERT_EQ(npuStreamCreate(&side), npuSuccess);
  std::atomic<bool> done{false};
  std::thread cleaner([&] {
    while (!done.load()) {
      a->emptyCache();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < 2; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937 rng(99 + t);
      static int no_sleep = 0;
      const size_t sizes[] = {700, 5000, 300 * 1024, 2 * kMiB, 11 * kMiB};
      std::vector<void*> live;
      for (int i = 0; i < 3000; ++i) {
        if (live.size() < 8 && (live.empty() || rng() % 2 == 0)) {
          void* p = a->allocate(sizes[rng() % std::size(sizes)], 0, nullptr);
          if (rng() % 4 == 0) {
            npuLaunchTask(side, "touch", sleepTask, &no_sleep);
            a->recordStream(p, side);
          }
          live.push_back(p);
        } else {
          size_t k = rng() % live.size();
          a->free(live[k]);
          live[k] = live.back();
          live.pop_back();
        }
      }
      for (void* p : live) a->free(p);
    });
  }
  for (auto& w : workers) w.join();
  done.store(true);
  cleaner.join();
  ASSERT_EQ(npuStreamSynchronize(side), npuSuccess);
  a->emptyCache();
  DeviceStats s = a->getStats(0);
  EXPECT_EQ(cur(s.allocation), 0);
  EXPECT_EQ(cur(s.active), 0);
  EXPECT_EQ(cur(s.allocated_bytes), 0);
  EXPECT_EQ(cur(s.reserved_bytes), 0);
  EXPECT_EQ(cur(s.segment), 0);
  EXPECT_EQ(s.allocation[kAggregate].allocated, s.allocation[kAggregate].freed);
  EXPECT_EQ(runtimeFree(), free_before);
  a.reset();
  npuStreamDestroy(side);
}

TEST(CachingAllocator, ConcurrentWithStreamsAndEmptyCache) { stressWithStreamsAndEmptyCache(""); }

TEST(CachingAllocator, ConcurrentExpandableWithStreamsAndEmptyCache) {
  stressWithStreamsAndEmptyCache("expandable_segments:True");
}

TEST(CachingAllocator, FreeNullIsNoOpAndDoubleFreeThrows) {
  auto a = makeAllocator();
  a->free(nullptr);
  void* p = a->allocate(4096, 0, nullptr);
  a->free(p);
  try {
    a->free(p);
    FAIL() << "expected AllocatorError";
  } catch (const AllocatorError& e) {
    const std::string prefix =
        "free of a pointer this allocator did not allocate (or already freed): 0x";
    EXPECT_EQ(std::string(e.what()).substr(0, prefix.size()), prefix) << e.what();
  }
  int local = 0;
  EXPECT_THROW(a->free(&local), AllocatorError);
  EXPECT_THROW(a->recordStream(&local, nullptr), AllocatorError);
  EXPECT_EQ(cur(a->getStats(0).allocation), 0);
}

TEST(CachingAllocator, InvalidDeviceThrows) {
  auto a = makeAllocator();
  int count = 0;
  ASSERT_EQ(npuGetDeviceCount(&count), npuSuccess);
  EXPECT_THROW(a->allocate(16, count, nullptr), AllocatorError);
  EXPECT_THROW(a->allocate(16, -1, nullptr), AllocatorError);
  EXPECT_THROW(a->getStats(count), AllocatorError);
}

TEST(CachingAllocator, SnapshotContents) {
  auto a = makeAllocator();
  npuStream_t stream = nullptr;
  ASSERT_EQ(npuGetDefaultStream(0, &stream), npuSuccess);
  void* s1 = a->allocate(1000, 0, nullptr);
  void* s2 = a->allocate(3000, 0, nullptr);
  void* l1 = a->allocate(5 * kMiB, 0, nullptr);
  a->free(s1);
  std::vector<SegmentInfo> snap = a->snapshot();
  ASSERT_EQ(snap.size(), 2u);
  const SegmentInfo& small = snap[0].is_large ? snap[1] : snap[0];
  const SegmentInfo& large = snap[0].is_large ? snap[0] : snap[1];

  EXPECT_EQ(small.device, 0);
  EXPECT_EQ(small.address, reinterpret_cast<uintptr_t>(s1));
  EXPECT_EQ(small.total_size, 2 * kMiB);
  EXPECT_FALSE(small.is_large);
  EXPECT_FALSE(small.is_expandable);
  EXPECT_EQ(small.stream, stream);
  EXPECT_EQ(small.allocated_size, 3072u);
  EXPECT_EQ(small.active_size, 3072u);
  EXPECT_EQ(small.requested_size, 3000u);
  ASSERT_EQ(small.blocks.size(), 3u);
  EXPECT_EQ(small.blocks[0].size, 1024u);
  EXPECT_FALSE(small.blocks[0].allocated);
  EXPECT_FALSE(small.blocks[0].active);
  EXPECT_EQ(small.blocks[1].size, 3072u);
  EXPECT_TRUE(small.blocks[1].allocated);
  EXPECT_EQ(small.blocks[1].requested_size, 3000u);
  EXPECT_EQ(small.blocks[2].size, 2 * kMiB - 4096);
  EXPECT_FALSE(small.blocks[2].allocated);

  EXPECT_EQ(large.address, reinterpret_cast<uintptr_t>(l1));
  EXPECT_EQ(large.total_size, 20 * kMiB);
  EXPECT_TRUE(large.is_large);
  ASSERT_EQ(large.blocks.size(), 2u);
  EXPECT_EQ(large.blocks[0].size, 5 * kMiB);
  EXPECT_TRUE(large.blocks[0].allocated);
  EXPECT_EQ(large.blocks[1].size, 15 * kMiB);
  a->free(s2);
  a->free(l1);
}

TEST(CachingAllocator, FindAllocation) {
  auto a = makeAllocator();
  void* p = a->allocate(10000, 0, nullptr);
  int device = -1;
  void* base = nullptr;
  size_t size = 0;
  ASSERT_TRUE(a->findAllocation(p, &device, &base, &size));
  EXPECT_EQ(device, 0);
  EXPECT_EQ(base, p);
  EXPECT_EQ(size, 10000u);
  ASSERT_TRUE(a->findAllocation(at(p, 5000), &device, &base, &size));
  EXPECT_EQ(base, p);
  int local = 0;
  EXPECT_FALSE(a->findAllocation(&local, &device, &base, &size));
  a->free(p);
  EXPECT_FALSE(a->findAllocation(p, &device, &base, &size));
  EXPECT_FALSE(a->findAllocation(at(p, 5000), &device, &base, &size));
}

TEST(CachingAllocator, SecondDeviceHasItsOwnState) {
  int count = 0;
  ASSERT_EQ(npuGetDeviceCount(&count), npuSuccess);
  if (count < 2) GTEST_SKIP() << "needs two devices";
  auto a = makeAllocator();
  ASSERT_EQ(npuSetDevice(0), npuSuccess);
  void* p = a->allocate(3 * kMiB, 1, nullptr);
  int current = -1;
  npuGetDevice(&current);
  EXPECT_EQ(current, 0) << "the caller's current device must not change";
  npuPointerAttributes attr{};
  ASSERT_EQ(npuPointerGetAttributes(&attr, p), npuSuccess);
  EXPECT_EQ(attr.device, 1);
  EXPECT_EQ(cur(a->getStats(1).allocation), 1);
  EXPECT_EQ(cur(a->getStats(0).allocation), 0);
  int device = -1;
  ASSERT_TRUE(a->findAllocation(p, &device, nullptr, nullptr));
  EXPECT_EQ(device, 1);
  a->free(p);
  EXPECT_EQ(cur(a->getStats(1).allocation), 0);
}

}  // namespace
}  // namespace npu::alloc
