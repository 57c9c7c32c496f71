// Every environment variable the runtime reads is validated: a bad value is refused with a
// message naming the variable, the value and the allowed range (each case in a fresh process).
#include <string>

#include "test_util.h"

namespace {

struct Case {
  const char* env;       // as the shell sees it
  const char* expected;  // a piece of the message
};

void expectRefused(const Case& c) {
  std::string out = runProbe(c.env, "devices");
  EXPECT_NE(out.find("error=npuErrorInitialization"), std::string::npos) << c.env << "\n" << out;
  EXPECT_NE(out.find(c.expected), std::string::npos) << c.env << "\n" << out;
}

}  // namespace

TEST(EnvValidation, KernelThreads) {
  for (const char* value : {"0", "-3", "abc", "4x", "257"}) {
    expectRefused({(std::string("NPU_KERNEL_THREADS=") + value).c_str(),
                   (std::string("NPU_KERNEL_THREADS='") + value +
                    "' is invalid: expected an integer from 1 to 256")
                       .c_str()});
  }
  std::string ok = runProbe("NPU_KERNEL_THREADS=2", "devices");
  EXPECT_NE(ok.find("count=8 error=npuSuccess"), std::string::npos) << ok;
}

TEST(EnvValidation, LaunchBlocking) {
  expectRefused({"ASCEND_LAUNCH_BLOCKING=yes",
                 "ASCEND_LAUNCH_BLOCKING='yes' is invalid: expected 0 or 1"});
  expectRefused({"ASCEND_LAUNCH_BLOCKING=2", "ASCEND_LAUNCH_BLOCKING='2' is invalid"});
  for (const char* ok : {"ASCEND_LAUNCH_BLOCKING=0", "ASCEND_LAUNCH_BLOCKING=1"}) {
    std::string out = runProbe(ok, "devices");
    EXPECT_NE(out.find("count=8 error=npuSuccess"), std::string::npos) << ok << "\n" << out;
  }
}

TEST(EnvValidation, HbmSizeNamesTheLimits) {
  // 1e-10 GiB would be a 0-byte device; 1e9 GiB is past the limit, which the message names.
  for (const char* value : {"1e-10", "0", "-1", "1e9", "inf", "nan", "0x40", "64GB", ""}) {
    expectRefused({(std::string("NPU_SIM_HBM_GB='") + value + "'").c_str(),
                   "from 0.0009765625 (1 MiB) to 1048576 (1 PiB)"});
  }
  std::string out = runProbe("NPU_SIM_HBM_GB=0.5", "devices");
  EXPECT_NE(out.find("memory=536870912"), std::string::npos) << out;
}

TEST(EnvValidation, DeviceCountNamesTheRange) {
  for (const char* value : {"0", "65", "-1", "8.5", "eight"}) {
    expectRefused({(std::string("NPU_SIM_DEVICE_COUNT=") + value).c_str(),
                   "expected an integer from 1 to 64"});
  }
}

TEST(EnvValidation, ABinaryValueIsShownEscaped) {
  std::string out = runProbe("NPU_SIM_DEVICE_COUNT=\"$(printf 'a\\033b')\"", "devices");
  EXPECT_NE(out.find("NPU_SIM_DEVICE_COUNT='a\\x1bb' is invalid"), std::string::npos) << out;
}
