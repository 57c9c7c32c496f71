// Shadow execution (NPU_SIM_SHADOW=1), each case in a fresh process started with the variable:
// device memory is address space only, kernels do not run, other tasks do,
// large copies and memsets move nothing (the host reads zeros) and small ones carry their bytes.
#include <cstdio>
#include <string>

#include "test_util.h"

namespace {

struct Work {
  int shadow = -1, kernel_ran = -1, task_ran = -1, read_back = -1, read_head = -1;
  long rss_mb = -1;
};

Work runWork(const std::string& env, size_t bytes) {
  const std::string out = runProbe(env, "work " + std::to_string(bytes));
  Work w;
  const size_t at = out.find("shadow=");
  EXPECT_NE(at, std::string::npos) << out;
  if (at != std::string::npos) {
    std::sscanf(out.c_str() + at, "shadow=%d kernel_ran=%d task_ran=%d read_back=%d read_head=%d rss_mb=%ld",
                &w.shadow, &w.kernel_ran, &w.task_ran, &w.read_back, &w.read_head, &w.rss_mb);
  }
  return w;
}

}  // namespace

TEST(Shadow, NormalRunTouchesMemoryAndRunsKernels) {
  const Work w = runWork("NPU_SIM_SHADOW=0", size_t{64} << 20);
  EXPECT_EQ(w.shadow, 0);
  EXPECT_EQ(w.kernel_ran, 1);
  EXPECT_EQ(w.task_ran, 1);
  EXPECT_EQ(w.read_back, 14);     // 7 + 7: the memset's bytes came back
  EXPECT_EQ(w.read_head, 14);     // and the host's
  EXPECT_GE(w.rss_mb, 64);        // the 64 MiB were committed by the memset
}

TEST(Shadow, ShadowRunCostsNoHostMemoryAndSkipsOnlyKernels) {
  // 48 GiB: twice this machine's memory, accounted on a 64 GB device, never committed.
  const Work w = runWork("NPU_SIM_SHADOW=1", size_t{48} << 30);
  EXPECT_EQ(w.shadow, 1);
  EXPECT_EQ(w.kernel_ran, 0);     // a kernel is released without running
  EXPECT_EQ(w.task_ran, 1);       // other tasks (the collectives' own) still run
  EXPECT_EQ(w.read_back, 0);      // the large memset moved nothing: the placeholder, zero
  EXPECT_EQ(w.read_head, 14);     // a small copy (metadata) carries its bytes
  EXPECT_GE(w.rss_mb, 0);
  EXPECT_LT(w.rss_mb, 64);
}

TEST(Shadow, CapacityStillBinds) {
  const std::string out = runProbe("NPU_SIM_SHADOW=1", "work " + std::to_string(size_t{65} << 30));
  EXPECT_NE(out.find("error="), std::string::npos) << out;
  EXPECT_NE(out.find("out of memory"), std::string::npos) << out;
}

TEST(Shadow, BadValueIsRefusedNamingTheVariable) {
  const std::string out = runProbe("NPU_SIM_SHADOW=yes", "devices");
  EXPECT_NE(out.find("error=npuErrorInitialization"), std::string::npos) << out;
  EXPECT_NE(out.find("NPU_SIM_SHADOW='yes' is invalid"), std::string::npos) << out;
}

TEST(Shadow, PeekFollowsTheEnvironmentUntilTheRuntimeStarts) {
  const std::string out = runProbe("NPU_SIM_SHADOW=1", "peek-shadow");
  EXPECT_NE(out.find("before=1 changed=0 fixed=0 shadow=0"), std::string::npos) << out;
}
