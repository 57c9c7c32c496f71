// The allocator's flat pointer -> block map, against std::unordered_map.
#include <gtest/gtest.h>

#include <random>
#include <unordered_map>
#include <vector>

// An internal header of the allocator (not on the public include path).
#include "../../../allocator/pointer_map.h"

namespace npu::alloc {
namespace {

TEST(AllocatorPointerMap, MatchesUnorderedMapUnderRandomUse) {
  PointerMap<int> map;
  std::unordered_map<uintptr_t, int*> reference;
  std::vector<int> values(1000);
  std::mt19937_64 rng(7);
  std::vector<uintptr_t> keys;
  for (int step = 0; step < 200000; ++step) {
    const bool insert = keys.empty() || (keys.size() < 5000 && rng() % 2 == 0);
    if (insert) {
      // 512-byte aligned addresses, clustered as a segment's blocks are, so probe runs collide.
      uintptr_t key = 0x7f0000000000ull + (rng() % 20000) * 512;
      if (reference.count(key)) continue;
      int* value = &values[rng() % values.size()];
      map.insert(reinterpret_cast<void*>(key), value);
      reference[key] = value;
      keys.push_back(key);
    } else {
      size_t i = rng() % keys.size();
      uintptr_t key = keys[i];
      ASSERT_EQ(map.find(reinterpret_cast<void*>(key)), reference[key]);
      ASSERT_EQ(map.erase(reinterpret_cast<void*>(key)), reference[key]);
      ASSERT_EQ(map.find(reinterpret_cast<void*>(key)), nullptr);
      ASSERT_EQ(map.erase(reinterpret_cast<void*>(key)), nullptr);
      reference.erase(key);
      keys[i] = keys.back();
      keys.pop_back();
    }
    ASSERT_EQ(map.size(), reference.size());
  }
  for (auto [key, value] : reference) EXPECT_EQ(map.find(reinterpret_cast<void*>(key)), value);
}

}  // namespace
}  // namespace npu::alloc
