// Helpers shared by the runtime tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "npu/runtime.h"

// Asserts a runtime call succeeded, showing the runtime's message if not.
#define ASSERT_NPU_OK(expr)                                                          \
  do {                                                                               \
    npuError_t npu_err_ = (expr);                                                    \
    ASSERT_EQ(npu_err_, npuSuccess) << #expr << ": " << npuGetErrorName(npu_err_)    \
                                    << ": " << npuGetLastErrorMessage();             \
  } while (0)

// Runs the probe program with `env` prefixed (e.g. "NPU_SIM_DEVICE_COUNT=4") and returns its
// standard output.
inline std::string runProbe(const std::string& env, const std::string& args) {
  std::string cmd = "env " + env + " " NPU_TEST_BINARY_DIR "/npu_env_probe " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  char buf[512];
  while (pipe && fgets(buf, sizeof(buf), pipe)) out += buf;
  if (pipe) pclose(pipe);
  return out;
}
