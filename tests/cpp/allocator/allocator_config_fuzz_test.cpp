// A brief fuzz of the PYTORCH_NPU_ALLOC_CONF parser: random settings built from its own
// tokens plus adversarial ones. Parsing either refuses with std::invalid_argument (never
// another exception, never a crash) or gives a configuration whose fields are in their ranges
// and that rounds every size sanely. Deterministic (fixed seed).
#include <gtest/gtest.h>

#include <bit>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "../../../allocator/allocator_internal.h"
#include "npu/caching_allocator.h"

namespace npu::alloc {
namespace {

std::string randomSetting(std::mt19937& rng) {
  static const std::vector<std::string> pieces = {
      "max_split_size_mb", "garbage_collection_threshold", "expandable_segments",
      "roundup_power2_divisions", ":", ",", "[", "]", ">", "True", "False", "0", "1", "2", "4",
      "8", "20", "64", "256", "1024", "0.5", "0.99", "1.0", "-1", "1e308", "nan", "inf",
      "18446744073709551615", "18446744073709551616", "9223372036854775808", " ", "\t", "x",
      "\xff", "1048576", "4294967296"};
  std::uniform_int_distribution<int> len(0, 12), pick(0, static_cast<int>(pieces.size()) - 1);
  std::string s;
  const int n = len(rng);
  for (int i = 0; i < n; ++i) s += pieces[pick(rng)];
  return s;
}

void checkSane(const AllocatorConfig& c, const std::string& s) {
  ASSERT_GE(c.max_split_size, kLargeBuffer) << s;
  ASSERT_TRUE(c.garbage_collection_threshold == 0.0 ||
              (c.garbage_collection_threshold > 0.0 && c.garbage_collection_threshold < 1.0))
      << s;
  ASSERT_TRUE(c.roundup_power2_divisions.empty() ||
              c.roundup_power2_divisions.size() == kRoundupPower2Intervals)
      << s;
  for (size_t d : c.roundup_power2_divisions) {
    ASSERT_TRUE(d == 0 || std::has_single_bit(d)) << s;
  }
  for (size_t size : {size_t{1}, size_t{511}, size_t{1} << 20, (size_t{3} << 20) + 1,
                      size_t{1} << 36, (size_t{1} << 40) + 12345}) {
    const size_t r = roundSize(size, c);
    ASSERT_GE(r, size) << s;
    ASSERT_EQ(r % kMinBlockSize, 0u) << s;
  }
}

}  // namespace

TEST(AllocatorConfigFuzz, RefusesOrGivesASaneConfiguration) {
  std::mt19937 rng(20261203);
  int accepted = 0, refused = 0;
  for (int i = 0; i < 6000; ++i) {
    const std::string s = randomSetting(rng);
    try {
      AllocatorConfig c = AllocatorConfig::parse(s);
      ++accepted;
      checkSane(c, s);
    } catch (const std::invalid_argument& e) {
      ++refused;
      ASSERT_NE(std::string(e.what()).find("PYTORCH_NPU_ALLOC_CONF"), std::string::npos) << s;
    }
  }
  EXPECT_GT(accepted, 50);
  EXPECT_GT(refused, 50);
}

TEST(AllocatorConfigFuzz, NoMemoryCachingTakesOnlyItsSpellings) {
  for (const char* ok : {"1", "0", "true", "FALSE", " on ", "no", ""}) {
    setenv("PYTORCH_NO_NPU_MEMORY_CACHING", ok, 1);
    EXPECT_NO_THROW(AllocatorConfig::fromEnvironment()) << ok;
  }
  for (const char* bad : {"2", "disable", "yes please", "\xff"}) {
    setenv("PYTORCH_NO_NPU_MEMORY_CACHING", bad, 1);
    try {
      AllocatorConfig::fromEnvironment();
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("PYTORCH_NO_NPU_MEMORY_CACHING='"), std::string::npos);
      EXPECT_NE(std::string(e.what()).find("expected 1 (disable the caching allocator) or 0"),
                std::string::npos)
          << e.what();
    }
  }
  unsetenv("PYTORCH_NO_NPU_MEMORY_CACHING");
}

}  // namespace npu::alloc
