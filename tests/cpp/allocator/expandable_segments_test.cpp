// Expandable segments give back free pages anywhere in their range, not only at the end: on
// emptyCache and before an allocation gives up. The case: 510 MiB free but cached in
// the small pool's range, behind one live tensor, and a 60 MiB allocation failed even after
// emptyCache. Each test runs in its own process (ctest), so the device size is set first.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "npu/caching_allocator.h"
#include "npu/runtime.h"

namespace npu::alloc {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

std::unique_ptr<CachingAllocator> makeAllocator(const std::string& conf) {
  return std::make_unique<CachingAllocator>(AllocatorConfig::parse(conf));
}

// Shrinks device HBM to `mib` MiB; true if it took effect (the runtime reads it at first use).
bool useDeviceOf(size_t mib) {
  setenv("NPU_SIM_HBM_GB", std::to_string(static_cast<double>(mib) / 1024).c_str(), 1);
  npuDeviceProp prop{};
  return npuGetDeviceProperties(&prop, 0) == npuSuccess && prop.total_memory == mib * kMiB;
}
#define REQUIRE_DEVICE_OF(mib)                                                       \
  if (!useDeviceOf(mib)) {                                                           \
    GTEST_SKIP() << "needs NPU_SIM_HBM_GB set in a fresh process; run through ctest"; \
  }

size_t runtimeFree() {
  size_t free_bytes = 0, total = 0;
  EXPECT_EQ(npuMemGetInfo(&free_bytes, &total), npuSuccess);
  return free_bytes;
}

int64_t reserved(CachingAllocator& a) { return a.getStats(0).reserved_bytes[kAggregate].current; }

bool filledWith(const void* p, size_t n, unsigned char value) {
  const auto* c = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    if (c[i] != value) return false;
  }
  return true;
}

// 510 tensors of 1 MiB (the small pool), all freed but the last: 509 MiB free but cached.
void* cacheSmallPoolBehindOneTensor(CachingAllocator& a) {
  std::vector<void*> small;
  for (int i = 0; i < 510; ++i) small.push_back(a.allocate(kMiB, 0, nullptr));
  void* last = small.back();
  small.pop_back();
  std::memset(last, 0x5a, kMiB);
  for (void* p : small) a.free(p);
  EXPECT_EQ(reserved(a), static_cast<int64_t>(510 * kMiB));
  return last;
}

}  // namespace

TEST(ExpandableSegments, MemoryCachedInTheMiddleServesAnotherPoolUnderPressure) {
  REQUIRE_DEVICE_OF(512);
  const size_t free_before = runtimeFree();
  auto a = makeAllocator("expandable_segments:True");
  void* last = cacheSmallPoolBehindOneTensor(*a);
  // No emptyCache: the out-of-memory path unmaps the free pages before it gives up.
  void* big = nullptr;
  ASSERT_NO_THROW(big = a->allocate(60 * kMiB, 0, nullptr));
  std::memset(big, 0x33, 60 * kMiB);  // really usable
  EXPECT_TRUE(filledWith(last, kMiB, 0x5a)) << "the live tensor kept its data";
  DeviceStats s = a->getStats(0);
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_ooms, 0);
  // Only the page the live tensor shares with free blocks stays mapped in the small range.
  EXPECT_EQ(reserved(*a), static_cast<int64_t>(2 * kMiB + 60 * kMiB));
  a->free(big);
  a->free(last);
  a->emptyCache();
  EXPECT_EQ(reserved(*a), 0);
  EXPECT_EQ(a->getStats(0).segment[kAggregate].current, 0);
  EXPECT_EQ(runtimeFree(), free_before);
}

TEST(ExpandableSegments, EmptyCacheUnmapsFreePagesAnywhere) {
  REQUIRE_DEVICE_OF(512);
  const size_t free_before = runtimeFree();
  auto a = makeAllocator("expandable_segments:True");
  void* last = cacheSmallPoolBehindOneTensor(*a);
  a->emptyCache();
  EXPECT_EQ(reserved(*a), static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(runtimeFree(), free_before - 2 * kMiB);
  EXPECT_TRUE(filledWith(last, kMiB, 0x5a));
  void* big = a->allocate(400 * kMiB, 0, nullptr);
  std::memset(big, 0x11, 400 * kMiB);
  EXPECT_EQ(a->getStats(0).num_alloc_retries, 0);  // no pressure left to relieve
  // The small pool's unmapped range is mapped again on demand, and its memory works.
  std::vector<void*> again;
  for (int i = 0; i < 40; ++i) {
    void* p = a->allocate(kMiB, 0, nullptr);
    std::memset(p, i, kMiB);
    again.push_back(p);
  }
  for (int i = 0; i < 40; ++i) EXPECT_TRUE(filledWith(again[i], kMiB, static_cast<unsigned char>(i)));
  for (void* p : again) a->free(p);
  a->free(big);
  a->free(last);
  a->emptyCache();
  EXPECT_EQ(reserved(*a), 0);
  EXPECT_EQ(runtimeFree(), free_before);
}

TEST(ExpandableSegments, AHoleBetweenTwoLiveTensorsIsUnmappedAndReused) {
  auto a = makeAllocator("expandable_segments:True");
  void* x = a->allocate(20 * kMiB, 0, nullptr);
  void* hole = a->allocate(40 * kMiB, 0, nullptr);
  void* y = a->allocate(20 * kMiB, 0, nullptr);
  std::memset(x, 1, 20 * kMiB);
  std::memset(y, 2, 20 * kMiB);
  EXPECT_EQ(reserved(*a), static_cast<int64_t>(80 * kMiB));
  a->free(hole);
  a->emptyCache();
  EXPECT_EQ(reserved(*a), static_cast<int64_t>(40 * kMiB));
  EXPECT_TRUE(filledWith(x, 20 * kMiB, 1));
  EXPECT_TRUE(filledWith(y, 20 * kMiB, 2));
  void* again = a->allocate(30 * kMiB, 0, nullptr);
  EXPECT_EQ(again, hole);  // best fit: the hole, mapped again
  EXPECT_EQ(reserved(*a), static_cast<int64_t>(70 * kMiB));
  std::memset(again, 3, 30 * kMiB);
  EXPECT_TRUE(filledWith(y, 20 * kMiB, 2));
  a->free(again);
  a->free(x);
  a->free(y);
  a->emptyCache();
  EXPECT_EQ(reserved(*a), 0);
  EXPECT_TRUE(a->snapshot().empty());
}

TEST(ExpandableSegments, MemoryCachedByAnotherStreamServesThisOne) {
  REQUIRE_DEVICE_OF(512);
  auto a = makeAllocator("expandable_segments:True");
  npuStream_t side = nullptr;
  ASSERT_EQ(npuStreamCreate(&side), npuSuccess);
  std::vector<void*> on_side;
  for (int i = 0; i < 4; ++i) on_side.push_back(a->allocate(100 * kMiB, 0, side));
  for (int i = 0; i < 3; ++i) a->free(on_side[i]);  // 300 MiB cached for `side`, behind one
  void* mine = nullptr;
  ASSERT_NO_THROW(mine = a->allocate(300 * kMiB, 0, nullptr));
  std::memset(mine, 7, 300 * kMiB);
  a->free(mine);
  a->free(on_side[3]);
  a->emptyCache();
  EXPECT_EQ(reserved(*a), 0);
  ASSERT_EQ(npuStreamDestroy(side), npuSuccess);
}

// The segment's address range is 1.125x the device (as CUDA's and torch_npu's): a hole left
// by a freed tensor costs no memory once unmapped, but it does use address space, so with a
// range of exactly the device size a fragmented segment could not place a tensor the device
// still has room for. Physical memory stays capped at the device size.
TEST(ExpandableSegments, FragmentedSegmentMapsPastTheDeviceSizeInItsAddressSpace) {
  REQUIRE_DEVICE_OF(512);
  const size_t free_before = runtimeFree();
  auto a = makeAllocator("expandable_segments:True");
  void* x = a->allocate(100 * kMiB, 0, nullptr);
  void* hole = a->allocate(60 * kMiB, 0, nullptr);
  void* y = a->allocate(200 * kMiB, 0, nullptr);
  std::memset(x, 1, 100 * kMiB);
  std::memset(y, 2, 200 * kMiB);
  a->free(hole);  // 300 MiB live, a 60 MiB hole: the range's end is at 360 MiB
  // 200 MiB more fits the device (500 of 512 MiB) but not the hole, so the range must reach
  // 560 MiB, past the device size (a 512 MiB range has only 152 MiB left after the hole).
  void* big = nullptr;
  ASSERT_NO_THROW(big = a->allocate(200 * kMiB, 0, nullptr));
  EXPECT_GE(static_cast<const char*>(big) + 200 * kMiB,
            static_cast<const char*>(x) + 512 * kMiB)
      << "the tensor lies past the device size in the segment's range";
  std::memset(big, 3, 200 * kMiB);
  EXPECT_TRUE(filledWith(x, 100 * kMiB, 1));
  EXPECT_TRUE(filledWith(y, 200 * kMiB, 2));
  // Only what is live is mapped: physical memory never goes past the device.
  EXPECT_EQ(reserved(*a), static_cast<int64_t>(500 * kMiB));
  EXPECT_EQ(runtimeFree(), free_before - 500 * kMiB);
  // 50 MiB fits the hole's address space but not the 12 MiB of memory left: out of memory,
  // with the allocator's message.
  try {
    a->allocate(50 * kMiB, 0, nullptr);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("NPU out of memory. Tried to allocate 50.00 MiB"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(a->getStats(0).num_ooms, 1);
  EXPECT_LE(reserved(*a), static_cast<int64_t>(512 * kMiB));
  a->free(big);
  a->free(x);
  a->free(y);
  a->emptyCache();
  EXPECT_EQ(reserved(*a), 0);
  EXPECT_EQ(runtimeFree(), free_before);
}

TEST(ExpandableSegments, StillOutOfMemoryWhenTheMemoryIsReallyInUse) {
  REQUIRE_DEVICE_OF(512);
  auto a = makeAllocator("expandable_segments:True");
  void* p = a->allocate(480 * kMiB, 0, nullptr);
  EXPECT_THROW(a->allocate(60 * kMiB, 0, nullptr), OutOfMemoryError);
  EXPECT_EQ(a->getStats(0).num_ooms, 1);
  a->free(p);
  void* q = a->allocate(500 * kMiB, 0, nullptr);
  a->free(q);
}

}  // namespace npu::alloc
