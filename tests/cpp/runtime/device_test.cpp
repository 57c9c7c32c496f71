#include <string>
#include <thread>

#include "test_util.h"

TEST(Device, DefaultsAreEightAscendDevicesOf64GiB) {
  int count = 0;
  ASSERT_NPU_OK(npuGetDeviceCount(&count));
  EXPECT_EQ(count, 8);
  npuDeviceProp prop;
  ASSERT_NPU_OK(npuGetDeviceProperties(&prop, 7));
  EXPECT_STREQ(prop.name, "Ascend910B2");
  EXPECT_EQ(prop.total_memory, 64ull << 30);
  EXPECT_GT(prop.cube_core_num, 0);
  EXPECT_GT(prop.vector_core_num, prop.cube_core_num);
  EXPECT_EQ(prop.physical_id, 7);
}

TEST(Device, InvalidIndexIsAClearError) {
  EXPECT_EQ(npuSetDevice(8), npuErrorInvalidDevice);
  EXPECT_NE(std::string(npuGetLastErrorMessage()).find("invalid device index 8"), std::string::npos)
      << npuGetLastErrorMessage();
  EXPECT_EQ(npuSetDevice(-1), npuErrorInvalidDevice);
  npuDeviceProp prop;
  EXPECT_EQ(npuGetDeviceProperties(&prop, 100), npuErrorInvalidDevice);
  EXPECT_EQ(npuGetDeviceProperties(nullptr, 0), npuErrorInvalidValue);
  EXPECT_EQ(npuGetLastError(), npuErrorInvalidValue);  // the last one, then cleared
  EXPECT_EQ(npuGetLastError(), npuSuccess);
}

TEST(Device, CurrentDeviceIsPerThread) {
  ASSERT_NPU_OK(npuSetDevice(3));
  int seen_by_other = -1;
  std::thread([&] { npuGetDevice(&seen_by_other); }).join();
  int mine = -1;
  ASSERT_NPU_OK(npuGetDevice(&mine));
  EXPECT_EQ(mine, 3);
  EXPECT_EQ(seen_by_other, 0);
}

TEST(DeviceEnv, DeviceCountAndHbmSize) {
  std::string out = runProbe("NPU_SIM_DEVICE_COUNT=3 NPU_SIM_HBM_GB=2", "devices");
  EXPECT_NE(out.find("count=3 error=npuSuccess"), std::string::npos) << out;
  EXPECT_NE(out.find("memory=2147483648"), std::string::npos) << out;
}

TEST(DeviceEnv, VisibleDevicesRenumber) {
  std::string out = runProbe("ASCEND_RT_VISIBLE_DEVICES=2,5", "devices");
  EXPECT_NE(out.find("count=2 "), std::string::npos) << out;
  EXPECT_NE(out.find("device 0 physical=2"), std::string::npos) << out;
  EXPECT_NE(out.find("device 1 physical=5"), std::string::npos) << out;
  EXPECT_NE(out.find("warning=\n"), std::string::npos) << out;
}

TEST(DeviceEnv, InvalidVisibleDevicesHideAllAndNameTheValue) {
  struct Case {
    const char* value;
    const char* why;
  } cases[] = {{"3,1", "ascending and unique"},
               {"1,1", "ascending and unique"},
               {"0,9", "out of range"},
               {"0,x", "'x' is not a device id"}};
  for (const Case& c : cases) {
    std::string out = runProbe(std::string("ASCEND_RT_VISIBLE_DEVICES=") + c.value, "devices");
    EXPECT_NE(out.find("count=0 error=npuErrorNoDevice"), std::string::npos) << out;
    EXPECT_NE(out.find(std::string("ASCEND_RT_VISIBLE_DEVICES='") + c.value + "' is invalid"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find(c.why), std::string::npos) << out;
  }
}

TEST(DeviceEnv, BadSimulatorSettingsAreReported) {
  std::string out = runProbe("NPU_SIM_DEVICE_COUNT=lots", "devices");
  EXPECT_NE(out.find("error=npuErrorInitialization"), std::string::npos) << out;
  EXPECT_NE(out.find("NPU_SIM_DEVICE_COUNT='lots' is invalid"), std::string::npos) << out;
}
