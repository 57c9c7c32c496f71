// AscendCL's runtime API over the simulator: codes and messages as CANN's, data through
// devices, streams and events equal to what went in. Each test case runs in its own process.
#include <gtest/gtest.h>

#include <acl/acl.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "npu/runtime.h"

#include "acl_test_util.h"

namespace {

std::string message() { return aclGetRecentErrMsg(); }
bool mentions(const std::string& what) { return message().find(what) != std::string::npos; }

class Acl : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_ACL_OK(aclInit(nullptr)); }
  void TearDown() override { aclFinalize(); }
};

TEST(AclInit, CallsBeforeInitAndAfterFinalizeAreRefused) {
  int32_t device = -1;
  EXPECT_EQ(aclrtGetDevice(&device), ACL_ERROR_UNINITIALIZE);
  EXPECT_TRUE(mentions("call aclInit first")) << message();
  ASSERT_ACL_OK(aclInit(nullptr));
  EXPECT_EQ(aclInit(nullptr), ACL_ERROR_REPEAT_INITIALIZE);
  ASSERT_ACL_OK(aclrtGetDevice(&device));
  EXPECT_EQ(device, 0);
  ASSERT_ACL_OK(aclFinalize());
  EXPECT_EQ(aclrtSetDevice(0), ACL_ERROR_UNINITIALIZE);
  ASSERT_ACL_OK(aclInit(""));  // initialising again after finalize works
  ASSERT_ACL_OK(aclFinalize());
}

TEST(AclInit, TheConfigFileMustExistAndBeAJsonObject) {
  EXPECT_EQ(aclInit("/nonexistent/acl.json"), ACL_ERROR_INVALID_FILE);
  EXPECT_TRUE(mentions("/nonexistent/acl.json")) << message();
  const std::string path = ::testing::TempDir() + "acl_config.json";
  std::ofstream(path) << "dump: yes";
  EXPECT_EQ(aclInit(path.c_str()), ACL_ERROR_PARSE_FILE);
  std::ofstream(path) << "{\"dump\": {}}\n";
  ASSERT_ACL_OK(aclInit(path.c_str()));
  ASSERT_ACL_OK(aclFinalize());
  std::remove(path.c_str());
}

TEST_F(Acl, DevicesMatchTheRuntimeAndBadIdsNameTheRange) {
  uint32_t count = 0;
  ASSERT_ACL_OK(aclrtGetDeviceCount(&count));
  int runtime_count = 0;
  ASSERT_EQ(npuGetDeviceCount(&runtime_count), npuSuccess);
  EXPECT_EQ(count, static_cast<uint32_t>(runtime_count));
  ASSERT_ACL_OK(aclrtSetDevice(static_cast<int32_t>(count) - 1));
  int32_t device = -1;
  ASSERT_ACL_OK(aclrtGetDevice(&device));
  EXPECT_EQ(device, static_cast<int32_t>(count) - 1);
  EXPECT_EQ(aclrtSetDevice(static_cast<int32_t>(count)), ACL_ERROR_RT_INVALID_DEVICEID);
  EXPECT_FALSE(message().empty());
  aclrtRunMode mode = ACL_DEVICE;
  ASSERT_ACL_OK(aclrtGetRunMode(&mode));
  EXPECT_EQ(mode, ACL_HOST);
  npuDeviceProp prop{};
  ASSERT_EQ(npuGetDeviceProperties(&prop, 0), npuSuccess);
  EXPECT_STREQ(aclrtGetSocName(), prop.soc_version);
  size_t free_bytes = 0, total = 0;
  ASSERT_ACL_OK(aclrtGetMemInfo(ACL_HBM_MEM, &free_bytes, &total));
  EXPECT_EQ(total, prop.total_memory);
  EXPECT_LE(free_bytes, total);
}

TEST_F(Acl, ContextsSelectTheirDevice) {
  aclrtContext ctx = nullptr;
  ASSERT_ACL_OK(aclrtCreateContext(&ctx, 3));
  int32_t device = -1;
  ASSERT_ACL_OK(aclrtGetDevice(&device));
  EXPECT_EQ(device, 3);
  ASSERT_ACL_OK(aclrtSetDevice(1));
  ASSERT_ACL_OK(aclrtSetCurrentContext(ctx));
  ASSERT_ACL_OK(aclrtGetDevice(&device));
  EXPECT_EQ(device, 3);
  aclrtContext current = nullptr;
  ASSERT_ACL_OK(aclrtGetCurrentContext(&current));
  EXPECT_EQ(current, ctx);
  ASSERT_ACL_OK(aclrtDestroyContext(ctx));
  EXPECT_EQ(aclrtDestroyContext(ctx), ACL_ERROR_RT_INVALID_HANDLE);
}

TEST_F(Acl, MemoryRoundTripsThroughStreamsAndEventsOrderThem) {
  ASSERT_ACL_OK(aclrtSetDevice(0));
  const size_t n = 4096;
  std::vector<int32_t> in(n), out(n, -1);
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<int32_t>(i * 7 - 3);
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_ACL_OK(aclrtMalloc(&a, n * 4, ACL_MEM_MALLOC_HUGE_FIRST));
  ASSERT_ACL_OK(aclrtMalloc(&b, n * 4, ACL_MEM_MALLOC_NORMAL_ONLY));
  aclrtStream s1 = nullptr, s2 = nullptr;
  ASSERT_ACL_OK(aclrtCreateStream(&s1));
  ASSERT_ACL_OK(aclrtCreateStream(&s2));
  aclrtEvent copied = nullptr, start = nullptr;
  ASSERT_ACL_OK(aclrtCreateEvent(&copied));
  ASSERT_ACL_OK(aclrtCreateEvent(&start));
  ASSERT_ACL_OK(aclrtRecordEvent(start, s1));
  ASSERT_ACL_OK(aclrtMemcpyAsync(a, n * 4, in.data(), n * 4, ACL_MEMCPY_HOST_TO_DEVICE, s1));
  ASSERT_ACL_OK(aclrtRecordEvent(copied, s1));
  ASSERT_ACL_OK(aclrtStreamWaitEvent(s2, copied));  // s2's copy waits for s1's
  ASSERT_ACL_OK(aclrtMemcpyAsync(b, n * 4, a, n * 4, ACL_MEMCPY_DEVICE_TO_DEVICE, s2));
  ASSERT_ACL_OK(aclrtSynchronizeStream(s2));
  ASSERT_ACL_OK(aclrtMemcpy(out.data(), n * 4, b, n * 4, ACL_MEMCPY_DEVICE_TO_HOST));
  EXPECT_EQ(out, in);
  aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
  ASSERT_ACL_OK(aclrtQueryEventStatus(copied, &status));
  EXPECT_EQ(status, ACL_EVENT_RECORDED_STATUS_COMPLETE);
  float ms = -1.0f;
  ASSERT_ACL_OK(aclrtEventElapsedTime(&ms, start, copied));
  EXPECT_GE(ms, 0.0f);

  ASSERT_ACL_OK(aclrtMemsetAsync(b, n * 4, 0xAB, n * 4, s2));
  ASSERT_ACL_OK(aclrtSynchronizeStream(s2));
  std::vector<unsigned char> bytes(n * 4);
  ASSERT_ACL_OK(aclrtMemcpy(bytes.data(), bytes.size(), b, n * 4, ACL_MEMCPY_DEVICE_TO_HOST));
  EXPECT_EQ(bytes, std::vector<unsigned char>(n * 4, 0xAB));

  ASSERT_ACL_OK(aclrtDestroyEvent(copied));
  ASSERT_ACL_OK(aclrtDestroyEvent(start));
  ASSERT_ACL_OK(aclrtDestroyStream(s1));
  ASSERT_ACL_OK(aclrtDestroyStream(s2));
  ASSERT_ACL_OK(aclrtFree(a));
  ASSERT_ACL_OK(aclrtFree(b));
}

TEST_F(Acl, BadArgumentsGetAscendClCodesAndSayWhatWasWrong) {
  ASSERT_ACL_OK(aclrtSetDevice(0));
  void* dev = nullptr;
  ASSERT_ACL_OK(aclrtMalloc(&dev, 64, ACL_MEM_MALLOC_HUGE_FIRST));
  char host[128] = {};
  EXPECT_EQ(aclrtMemcpy(dev, 64, host, 128, ACL_MEMCPY_HOST_TO_DEVICE),
            ACL_ERROR_RT_PARAM_INVALID);
  EXPECT_TRUE(mentions("count 128 bytes is larger than destMax 64")) << message();
  EXPECT_EQ(aclrtMemcpy(dev, 64, host, 16, static_cast<aclrtMemcpyKind>(9)),
            ACL_ERROR_INVALID_PARAM);
  EXPECT_TRUE(mentions("kind 9")) << message();
  EXPECT_EQ(aclrtMalloc(&dev, 0, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(aclrtMalloc(nullptr, 16, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(aclrtMemset(dev, 8, 0, 16), ACL_ERROR_INVALID_PARAM);
  EXPECT_TRUE(mentions("larger than maxCount 8")) << message();
  EXPECT_EQ(aclrtFree(host), ACL_ERROR_RT_PARAM_INVALID);  // not device memory
  EXPECT_FALSE(message().empty());
  ASSERT_ACL_OK(aclrtFree(dev));
  void* huge = nullptr;
  EXPECT_EQ(aclrtMalloc(&huge, size_t{1} << 50, ACL_MEM_MALLOC_HUGE_FIRST),
            ACL_ERROR_RT_MEMORY_ALLOCATION);
  aclrtStream destroyed = nullptr;
  ASSERT_ACL_OK(aclrtCreateStream(&destroyed));
  ASSERT_ACL_OK(aclrtDestroyStream(destroyed));
  EXPECT_EQ(aclrtSynchronizeStream(destroyed), ACL_ERROR_RT_INVALID_HANDLE);
  int32_t major = 0, minor = -1, patch = -1;
  ASSERT_ACL_OK(aclrtGetVersion(&major, &minor, &patch));
  EXPECT_EQ(major, ACL_MAJOR_VERSION);
}

}  // namespace
