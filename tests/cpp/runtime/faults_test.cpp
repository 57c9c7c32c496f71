// Faults and recovery at the runtime's C API: a bad NPU_SIM_FAULTS plan fails the start naming
// the bad part (in a fresh process), and the health calls torch_npu's recovery API uses
// (npuDeviceTaskAbort, npuSimInjectMemError, npuDeviceRepair) in this one, on device 3.
#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "npu/runtime.h"
#include "test_util.h"

namespace {

constexpr int kDevice = 3;

void bump(void* arg) { static_cast<std::atomic<int>*>(arg)->fetch_add(1); }

int health() {
  int h = -1;
  EXPECT_EQ(npuDeviceGetHealth(kDevice, &h), npuSuccess);
  return h;
}

npuStream_t defaultStream() {
  npuStream_t s = nullptr;
  EXPECT_EQ(npuGetDefaultStream(kDevice, &s), npuSuccess);
  return s;
}

}  // namespace

TEST(Faults, BadPlanIsRefusedAtStartNamingThePart) {
  const std::string out = runProbe("NPU_SIM_FAULTS='kill@launch=1;straggler@launch=2'", "devices");
  EXPECT_NE(out.find("error=npuErrorInitialization"), std::string::npos) << out;
  EXPECT_NE(out.find("fault 2 'straggler@launch=2': straggler needs factor=F"), std::string::npos)
      << out;
}

TEST(Faults, AGoodPlanStartsAndDoesNothingUntilItsTrigger) {
  const std::string out = runProbe("NPU_SIM_FAULTS='kill@launch=1000000'", "devices");
  EXPECT_NE(out.find("count=8 error=npuSuccess"), std::string::npos) << out;
}

TEST(Faults, StopFailsLaunchesWithForceStopUntilRepaired) {
  std::atomic<int> ran{0};
  npuStream_t s = defaultStream();
  ASSERT_EQ(npuDeviceTaskAbort(kDevice), npuSuccess);
  EXPECT_EQ(health(), npuDeviceStopped);
  EXPECT_EQ(npuLaunchKernel(s, "k", bump, nullptr, &ran, 0), npuErrorDeviceTaskAbort);
  EXPECT_NE(std::string(npuGetLastErrorMessage()).find("FORCE STOP: NPU 3 was stopped"),
            std::string::npos);
  EXPECT_EQ(ran.load(), 0);
  ASSERT_EQ(npuDeviceRepair(kDevice), npuSuccess);
  EXPECT_EQ(health(), npuDeviceHealthy);
  EXPECT_EQ(npuLaunchKernel(s, "k", bump, nullptr, &ran, 0), npuSuccess);
  EXPECT_EQ(npuStreamSynchronize(s), npuSuccess);
  EXPECT_EQ(ran.load(), 1);
}

TEST(Faults, MemoryErrorIsRecordedFailsLaunchesAndIsRepaired) {
  void* p = nullptr;
  ASSERT_EQ(npuSetDevice(kDevice), npuSuccess);
  ASSERT_EQ(npuMalloc(&p, 4096), npuSuccess);
  ASSERT_EQ(npuSimInjectMemError(kDevice, static_cast<char*>(p) + 512, 256), npuSuccess);
  npuMemUceInfo info[4] = {};
  ASSERT_EQ(npuGetMemUceInfo(kDevice, info, 4), 1u);
  EXPECT_EQ(info[0].addr, static_cast<char*>(p) + 512);
  EXPECT_EQ(info[0].len, 256u);
  EXPECT_EQ(health(), npuDeviceMemError);
  std::atomic<int> ran{0};
  EXPECT_EQ(npuLaunchKernel(defaultStream(), "k", bump, nullptr, &ran, 0), npuErrorDeviceMemError);
  EXPECT_NE(std::string(npuGetLastErrorMessage()).find("UCE ERROR"), std::string::npos);
  // stop_device over a memory error says FORCE STOP, as torch_npu's does.
  ASSERT_EQ(npuDeviceTaskAbort(kDevice), npuSuccess);
  EXPECT_EQ(health(), npuDeviceStopped);
  ASSERT_EQ(npuDeviceRepair(kDevice), npuSuccess);
  EXPECT_EQ(npuGetMemUceInfo(kDevice, info, 4), 0u);
  EXPECT_EQ(health(), npuDeviceHealthy);
  EXPECT_EQ(npuFree(p), npuSuccess);
}
