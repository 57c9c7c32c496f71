// PYTORCH_NPU_ALLOC_CONF parsing, PYTORCH_NO_NPU_MEMORY_CACHING and formatSize.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "npu/caching_allocator.h"

namespace npu::alloc {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// The message of the std::invalid_argument that parsing `conf` throws ("" if none).
std::string parseError(const std::string& conf) {
  try {
    AllocatorConfig::parse(conf);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(AllocatorConfig, EmptyIsDefault) {
  AllocatorConfig c = AllocatorConfig::parse("");
  EXPECT_EQ(c.max_split_size, SIZE_MAX);
  EXPECT_EQ(c.garbage_collection_threshold, 0.0);
  EXPECT_FALSE(c.expandable_segments);
  EXPECT_TRUE(c.roundup_power2_divisions.empty());
  EXPECT_FALSE(c.caching_disabled);
}

TEST(AllocatorConfig, ParsesEveryKey) {
  AllocatorConfig c = AllocatorConfig::parse(
      "max_split_size_mb:64, garbage_collection_threshold:0.6,expandable_segments:True,"
      "roundup_power2_divisions:4");
  EXPECT_EQ(c.max_split_size, 64 * kMiB);
  EXPECT_DOUBLE_EQ(c.garbage_collection_threshold, 0.6);
  EXPECT_TRUE(c.expandable_segments);
  ASSERT_EQ(c.roundup_power2_divisions.size(), 16u);
  for (size_t d : c.roundup_power2_divisions) EXPECT_EQ(d, 4u);
  EXPECT_FALSE(AllocatorConfig::parse("expandable_segments:False").expandable_segments);
  EXPECT_EQ(AllocatorConfig::parse("max_split_size_mb:20").max_split_size, 20 * kMiB);
}

TEST(AllocatorConfig, RoundupListForm) {
  // Interval i holds sizes in [2^i MiB, 2^(i+1) MiB); the first entry also covers all smaller
  // intervals and '>' every interval after the last one named.
  AllocatorConfig c =
      AllocatorConfig::parse("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]");
  ASSERT_EQ(c.roundup_power2_divisions.size(), 16u);
  for (size_t i = 0; i <= 8; ++i) EXPECT_EQ(c.roundup_power2_divisions[i], 1u) << i;
  EXPECT_EQ(c.roundup_power2_divisions[9], 2u);
  EXPECT_EQ(c.roundup_power2_divisions[10], 4u);
  for (size_t i = 11; i < 16; ++i) EXPECT_EQ(c.roundup_power2_divisions[i], 8u) << i;

  AllocatorConfig z = AllocatorConfig::parse("roundup_power2_divisions:[1:0,2:4]");
  EXPECT_EQ(z.roundup_power2_divisions[0], 0u);
  EXPECT_EQ(z.roundup_power2_divisions[1], 4u);
  EXPECT_EQ(z.roundup_power2_divisions[2], 0u);
}

TEST(AllocatorConfig, UnknownKeyNamesKeyAndAcceptedKeys) {
  EXPECT_EQ(parseError("foo:1"),
            "PYTORCH_NPU_ALLOC_CONF: unknown key 'foo'; expected one of max_split_size_mb, "
            "garbage_collection_threshold, expandable_segments, roundup_power2_divisions, "
            "base_addr_aligned_kb, page_size, segment_size_mb, large_segment_size_mb, "
            "per_process_memory_fraction, multi_stream_lazy_reclaim, "
            "pinned_use_background_threads, pin_memory_expandable_segments, pinned_mem_register, "
            "pinned_reserve_segment_size_mb, pinned_max_round_threshold_mb, "
            "pinned_max_cached_size_mb");
  // A part of a known key is not a key.
  EXPECT_NE(parseError("size_mb:20").find("unknown key 'size_mb'"), std::string::npos);
  EXPECT_NE(parseError("max_split_size_mb:64,bar:2").find("unknown key 'bar'"),
            std::string::npos);
}

TEST(AllocatorConfig, BadValuesNameKeyValueAndAcceptedForm) {
  std::string e = parseError("max_split_size_mb:10");
  EXPECT_NE(e.find("'10'"), std::string::npos) << e;
  EXPECT_NE(e.find("max_split_size_mb"), std::string::npos) << e;
  EXPECT_NE(e.find(">= 20"), std::string::npos) << e;

  e = parseError("max_split_size_mb:abc");
  EXPECT_NE(e.find("'abc'"), std::string::npos) << e;

  e = parseError("garbage_collection_threshold:1.5");
  EXPECT_NE(e.find("garbage_collection_threshold"), std::string::npos) << e;
  EXPECT_NE(e.find("between 0.0 and 1.0"), std::string::npos) << e;
  EXPECT_NE(parseError("garbage_collection_threshold:0"), "");

  e = parseError("expandable_segments:yes");
  EXPECT_NE(e.find("'yes'"), std::string::npos) << e;
  EXPECT_NE(e.find("True or False"), std::string::npos) << e;

  e = parseError("roundup_power2_divisions:3");
  EXPECT_NE(e.find("roundup_power2_divisions"), std::string::npos) << e;
  EXPECT_NE(e.find("power of two"), std::string::npos) << e;

  e = parseError("roundup_power2_divisions:[3:2]");
  EXPECT_NE(e.find("interval '3'"), std::string::npos) << e;
  e = parseError("roundup_power2_divisions:[256:3]");
  EXPECT_NE(e.find("division '3'"), std::string::npos) << e;
  e = parseError("roundup_power2_divisions:[256:2");
  EXPECT_NE(e.find("']'"), std::string::npos) << e;

  e = parseError("max_split_size_mb");
  EXPECT_NE(e.find("':'"), std::string::npos) << e;
  e = parseError("max_split_size_mb:");
  EXPECT_NE(e.find("max_split_size_mb"), std::string::npos) << e;
}

TEST(AllocatorConfig, FromEnvironment) {
  setenv("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True,max_split_size_mb:100", 1);
  setenv("PYTORCH_NO_NPU_MEMORY_CACHING", "1", 1);
  AllocatorConfig c = AllocatorConfig::fromEnvironment();
  EXPECT_TRUE(c.expandable_segments);
  EXPECT_EQ(c.max_split_size, 100 * kMiB);
  EXPECT_TRUE(c.caching_disabled);

  setenv("PYTORCH_NO_NPU_MEMORY_CACHING", "0", 1);
  EXPECT_FALSE(AllocatorConfig::fromEnvironment().caching_disabled);
  unsetenv("PYTORCH_NO_NPU_MEMORY_CACHING");
  setenv("PYTORCH_NPU_ALLOC_CONF", "nonsense:1", 1);
  EXPECT_THROW(AllocatorConfig::fromEnvironment(), std::invalid_argument);
  unsetenv("PYTORCH_NPU_ALLOC_CONF");
}

// PYTORCH_ALLOC_CONF, PyTorch's device-generic name, is read as torch_npu reads it: the same
// settings when it is the only one set, an error when both are set.
TEST(AllocatorConfig, FromEnvironmentReadsPytorchAllocConf) {
  unsetenv("PYTORCH_NPU_ALLOC_CONF");
  setenv("PYTORCH_ALLOC_CONF", "large_segment_size_mb:40,expandable_segments:True", 1);
  AllocatorConfig c = AllocatorConfig::fromEnvironment();
  EXPECT_EQ(c.large_segment_size, 40 * kMiB);
  EXPECT_TRUE(c.expandable_segments);

  setenv("PYTORCH_ALLOC_CONF", "nonsense:1", 1);
  try {
    AllocatorConfig::fromEnvironment();
    ADD_FAILURE() << "a bad PYTORCH_ALLOC_CONF parsed";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("PYTORCH_ALLOC_CONF: unknown key 'nonsense'", 0), 0u) << what;
  }

  setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True", 1);
  setenv("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True", 1);
  try {
    AllocatorConfig::fromEnvironment();
    ADD_FAILURE() << "both variables set was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("set only one of them"), std::string::npos) << e.what();
  }
  unsetenv("PYTORCH_ALLOC_CONF");
  unsetenv("PYTORCH_NPU_ALLOC_CONF");
}

// instance() reads the environment once, on first use: this test's own process (ctest runs
// every test case in a fresh one) sets it first.
TEST(AllocatorConfig, InstanceUsesEnvironment) {
  setenv("PYTORCH_NPU_ALLOC_CONF", "garbage_collection_threshold:0.8", 1);
  setenv("PYTORCH_NO_NPU_MEMORY_CACHING", "1", 1);
  const AllocatorConfig& c = CachingAllocator::instance().config();
  if (c.garbage_collection_threshold != 0.8) {
    GTEST_SKIP() << "instance() was created earlier in this process; run through ctest";
  }
  EXPECT_TRUE(c.caching_disabled);

  CachingAllocator& a = CachingAllocator::instance();
  void* p = a.allocate(1000, 0, nullptr);
  EXPECT_EQ(a.getStats(0).reserved_bytes[kAggregate].current, 1024);
  a.free(p);
  EXPECT_EQ(a.getStats(0).reserved_bytes[kAggregate].current, 0);
}

TEST(AllocatorConfig, FormatSize) {
  EXPECT_EQ(formatSize(0), "0 bytes");
  EXPECT_EQ(formatSize(512), "512 bytes");
  EXPECT_EQ(formatSize(1024), "1024 bytes");  // PyTorch switches units above, not at, 1 KiB
  EXPECT_EQ(formatSize(1536), "1.50 KiB");
  EXPECT_EQ(formatSize(2 * kMiB), "2.00 MiB");
  EXPECT_EQ(formatSize(20 * kMiB), "20.00 MiB");
  EXPECT_EQ(formatSize(1024 * kMiB), "1024.00 MiB");
  EXPECT_EQ(formatSize(1536 * kMiB), "1.50 GiB");
  EXPECT_EQ(formatSize(64ull << 30), "64.00 GiB");
}

// ---- torch_npu's other keys ------------------------------------------------------------

TEST(AllocatorConfig, TorchNpusOtherKeysWithTheirDefaults) {
  AllocatorConfig d = AllocatorConfig::parse("");
  EXPECT_EQ(d.large_segment_size, 20 * kMiB);
  EXPECT_FALSE(d.huge_pages);
  EXPECT_LT(d.per_process_memory_fraction, 0.0);
  EXPECT_EQ(d.base_addr_aligned_kb, 16u);
  AllocatorConfig c = AllocatorConfig::parse(
      "large_segment_size_mb:50,page_size:1g,per_process_memory_fraction:0.5,"
      "base_addr_aligned_kb:0,multi_stream_lazy_reclaim:True,pinned_use_background_threads:True,"
      "pin_memory_expandable_segments:True");
  EXPECT_EQ(c.large_segment_size, 50 * kMiB);
  EXPECT_TRUE(c.huge_pages);
  EXPECT_DOUBLE_EQ(c.per_process_memory_fraction, 0.5);
  EXPECT_EQ(c.base_addr_aligned_kb, 0u);
  EXPECT_TRUE(c.multi_stream_lazy_reclaim && c.pinned_use_background_threads &&
              c.pin_memory_expandable_segments);
  EXPECT_TRUE(AllocatorConfig::parse("pinned_mem_register:True").pinned_mem_register);
  AllocatorConfig pinned = AllocatorConfig::parse(
      "pinned_reserve_segment_size_mb:64,pinned_max_round_threshold_mb:8,"
      "pinned_max_cached_size_mb:512");
  EXPECT_EQ(pinned.pinned_reserve_segment_size_mb, 64u);
  EXPECT_EQ(pinned.pinned_max_round_threshold_mb, 8u);
  EXPECT_EQ(pinned.pinned_max_cached_size_mb, 512u);
  // segment_size_mb is the older spelling; large_segment_size_mb wins when both are given.
  EXPECT_EQ(AllocatorConfig::parse("segment_size_mb:40").large_segment_size, 40 * kMiB);
  EXPECT_EQ(AllocatorConfig::parse("segment_size_mb:40,large_segment_size_mb:30").large_segment_size,
            30 * kMiB);
  EXPECT_EQ(AllocatorConfig::parse("large_segment_size_mb:30,segment_size_mb:40").large_segment_size,
            30 * kMiB);
}

TEST(AllocatorConfig, TorchNpusOtherKeysRejectWhatTorchNpuRejects) {
  EXPECT_NE(parseError("base_addr_aligned_kb:17").find("[0, 16]"), std::string::npos);
  EXPECT_NE(parseError("page_size:2m").find("expected 1g"), std::string::npos);
  EXPECT_NE(parseError("segment_size_mb:19").find("[20, 512]"), std::string::npos);
  EXPECT_NE(parseError("segment_size_mb:513").find("[20, 512]"), std::string::npos);
  EXPECT_NE(parseError("large_segment_size_mb:10").find("greater than 10"), std::string::npos);
  EXPECT_NE(parseError("per_process_memory_fraction:1.5").find("[0.0, 1.0]"), std::string::npos);
  EXPECT_NE(parseError("multi_stream_lazy_reclaim:yes").find("True or False"), std::string::npos);
  EXPECT_NE(parseError("pinned_reserve_segment_size_mb:-1").find("non-negative integer"),
            std::string::npos);
  EXPECT_NE(parseError("pinned_max_cached_size_mb:0").find("positive integer"), std::string::npos);
  EXPECT_NE(parseError("max_split_size_mb:30,large_segment_size_mb:40")
                .find("must be at least large_segment_size_mb (40)"),
            std::string::npos);
  EXPECT_NE(parseError("pinned_mem_register:True,pin_memory_expandable_segments:True")
                .find("cannot be combined"),
            std::string::npos);
}

TEST(AllocatorConfig, UpdateChangesOnlyTheNamedKeysAndNothingOnError) {
  AllocatorConfig c = AllocatorConfig::parse("max_split_size_mb:64,expandable_segments:True");
  AllocatorConfig::update("expandable_segments:False,large_segment_size_mb:32", c);
  EXPECT_EQ(c.max_split_size, 64 * kMiB);
  EXPECT_FALSE(c.expandable_segments);
  EXPECT_EQ(c.large_segment_size, 32 * kMiB);
  EXPECT_THROW(AllocatorConfig::update("garbage_collection_threshold:0.5,page_size:4k", c),
               std::invalid_argument);
  EXPECT_EQ(c.garbage_collection_threshold, 0.0);  // the valid first key was not applied
  // A later setting is checked against the ones already in force.
  EXPECT_THROW(AllocatorConfig::update("large_segment_size_mb:100", c), std::invalid_argument);
  EXPECT_EQ(c.large_segment_size, 32 * kMiB);
}

}  // namespace
}  // namespace npu::alloc
