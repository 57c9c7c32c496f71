#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "npu/registry.h"
#include "test_util.h"

namespace {

std::vector<npuProcessInfo> list() {
  std::vector<npuProcessInfo> out(64);
  int count = 0;
  EXPECT_EQ(npuRegistryList(out.data(), 64, &count), npuSuccess);
  out.resize(count < 64 ? count : 64);
  return out;
}

const npuProcessInfo* find(const std::vector<npuProcessInfo>& all, int pid) {
  for (const auto& p : all) {
    if (p.pid == pid) return &p;
  }
  return nullptr;
}

std::string freshDir() {
  char tmpl[] = "/tmp/npu-registry-test-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  setenv("NPU_SIM_RUNTIME_DIR", dir.c_str(), 1);
  return dir;
}

}  // namespace

TEST(Registry, ProcessPublishesItsMemoryPerPhysicalDevice) {
  freshDir();
  setenv("ASCEND_RT_VISIBLE_DEVICES", "2,3", 1);
  EXPECT_EQ(find(list(), getpid()), nullptr);  // not registered before using a device
  ASSERT_NPU_OK(npuSetDevice(1));              // logical 1 = physical 3
  void* p = nullptr;
  ASSERT_NPU_OK(npuMalloc(&p, 12345));
  auto all = list();
  const npuProcessInfo* me = find(all, getpid());
  ASSERT_NE(me, nullptr);
  EXPECT_EQ(me->memory_bytes[3], 12345u);
  EXPECT_EQ(me->memory_bytes[1], 0u);
  EXPECT_EQ(me->device_count, 8);
  ASSERT_NPU_OK(npuFree(p));
  EXPECT_EQ(find(list(), getpid())->memory_bytes[3], 0u);
}

TEST(Registry, KilledProcessIsDetectedAndRemoved) {
  std::string dir = freshDir();
  std::string cmd =
      "env NPU_SIM_RUNTIME_DIR=" + dir + " " NPU_TEST_BINARY_DIR "/npu_env_probe hold 1048576";
  pid_t child = fork();
  if (child == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), nullptr);
    _exit(127);
  }
  const npuProcessInfo* seen = nullptr;
  std::vector<npuProcessInfo> all;
  for (int i = 0; i < 500 && !seen; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    all = list();
    seen = find(all, child);
    if (seen && seen->memory_bytes[0] != 1048576u) seen = nullptr;  // not yet allocated
  }
  ASSERT_NE(seen, nullptr) << "the probe never showed up in the registry";
  EXPECT_STREQ(seen->name, "npu_env_probe");
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(find(list(), child), nullptr);
  EXPECT_NE(access((dir + "/proc-" + std::to_string(child) + ".reg").c_str(), F_OK), 0)
      << "the stale file should have been removed";
}
