// CANN's logging (include/npu/log.h): level, destination and line layout from CANN's
// variables. Each test runs in its own process (the configuration is read once), and sets the
// variables before the first line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "npu/log.h"
#include "npu/runtime.h"

namespace {

// [LEVEL] MODULE(pid,name):YYYY-MM-DD-hh:mm:ss.mmm.uuu [file:line]tid func: message
const std::regex kLine(
    R"(\[(DEBUG|INFO|WARNING|ERROR)\] ([A-Z]+)\((\d+),[^)]+\):\d{4}-\d{2}-\d{2}-\d{2}:\d{2}:\d{2}\.\d{3}\.\d{3} \[([a-z_]+\.cpp):\d+\]\d+ (\w+): (.*))");

std::string tempDir(const char* tag) {
  auto dir = std::filesystem::temp_directory_path() /
             (std::string("npu-log-test-") + tag + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

}  // namespace

TEST(Log, LinesGoToStdoutInCannsLayoutAtTheChosenLevel) {
  setenv("ASCEND_GLOBAL_LOG_LEVEL", "1", 1);
  setenv("ASCEND_SLOG_PRINT_TO_STDOUT", "1", 1);
  testing::internal::CaptureStdout();
  NPU_LOG(NPU_LOG_DEBUG, "RUNTIME", "dropped %d", 1);  // below info
  NPU_LOG(NPU_LOG_INFO, "RUNTIME", "kept %d", 2);
  EXPECT_NE(npuSetDevice(999), npuSuccess);  // an error the runtime reports itself
  void* p = nullptr;
  ASSERT_EQ(npuSetDevice(0), npuSuccess);
  ASSERT_EQ(npuMalloc(&p, 4096), npuSuccess);
  ASSERT_EQ(npuFree(p), npuSuccess);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(out.find("dropped"), std::string::npos) << out;
  std::istringstream lines(out);
  std::string line;
  int matched = 0;
  bool kept = false, error = false, malloc_line = false;
  while (std::getline(lines, line)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, kLine)) << line;
    ++matched;
    EXPECT_EQ(std::stoi(m[3]), static_cast<int>(::getpid()));
    kept |= m[1] == "INFO" && m[5] == "TestBody" && m[6] == "kept 2";
    error |= m[1] == "ERROR" && m[2] == "RUNTIME" &&
             m[6].str().find("npuErrorInvalidDevice") != std::string::npos;
    malloc_line |= m[1] == "INFO" && m[4] == "memory.cpp" &&
                   m[6].str().find("4096 bytes") != std::string::npos;
  }
  EXPECT_TRUE(kept && error && malloc_line) << out;
  EXPECT_GE(matched, 4);
  EXPECT_STREQ(npuLogGetFilePath(), "");
}

TEST(Log, DefaultDestinationIsAPlogFileOfThisProcess) {
  const std::string dir = tempDir("file");
  setenv("ASCEND_PROCESS_LOG_PATH", dir.c_str(), 1);
  unsetenv("ASCEND_SLOG_PRINT_TO_STDOUT");
  unsetenv("ASCEND_GLOBAL_LOG_LEVEL");  // default: errors only
  EXPECT_EQ(npuLogGetLevel(), NPU_LOG_ERROR);
  NPU_LOG(NPU_LOG_WARNING, "RUNTIME", "below the default level");
  EXPECT_STREQ(npuLogGetFilePath(), "");  // nothing written: no file yet
  EXPECT_NE(npuSetDevice(999), npuSuccess);
  const std::string path = npuLogGetFilePath();
  const std::string prefix = dir + "/debug/plog/plog-" + std::to_string(::getpid()) + "_";
  ASSERT_EQ(path.rfind(prefix, 0), 0u) << path;
  EXPECT_EQ(path.substr(path.size() - 4), ".log");
  std::ifstream f(path);
  std::string line;
  ASSERT_TRUE(std::getline(f, line));
  std::smatch m;
  ASSERT_TRUE(std::regex_match(line, m, kLine)) << line;
  EXPECT_EQ(m[1], "ERROR");
  EXPECT_NE(line.find("invalid device index 999"), std::string::npos) << line;
  EXPECT_FALSE(std::getline(f, line)) << "only the error: " << line;
  std::filesystem::remove_all(dir);
}

TEST(Log, LevelFourTurnsLoggingOff) {
  const std::string dir = tempDir("off");
  setenv("ASCEND_PROCESS_LOG_PATH", dir.c_str(), 1);
  setenv("ASCEND_GLOBAL_LOG_LEVEL", "4", 1);
  EXPECT_NE(npuSetDevice(999), npuSuccess);
  NPU_LOG(NPU_LOG_ERROR, "RUNTIME", "not written");
  EXPECT_STREQ(npuLogGetFilePath(), "");
  EXPECT_FALSE(std::filesystem::exists(dir));
}

TEST(Log, BadLevelIsNamedAndTheDefaultUsed) {
  setenv("ASCEND_GLOBAL_LOG_LEVEL", "verbose", 1);
  setenv("ASCEND_SLOG_PRINT_TO_STDOUT", "1", 1);
  testing::internal::CaptureStderr();
  EXPECT_EQ(npuLogGetLevel(), NPU_LOG_ERROR);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("ASCEND_GLOBAL_LOG_LEVEL='verbose' is invalid: expected 0 (debug)"),
            std::string::npos)
      << err;
}
