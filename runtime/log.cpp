// CANN's logging: the level and destination from CANN's variables, lines in its layout
// (include/npu/log.h). The level is read once and cached, since every launch asks for it.
#include "npu/log.h"

#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>

#include "npu/env.h"

namespace {

struct LogConfig {
  int level = NPU_LOG_ERROR;
  bool to_stdout = false;
  std::string dir;  // ASCEND_PROCESS_LOG_PATH or $HOME/ascend/log
};

LogConfig loadLogConfig() {
  LogConfig cfg;
  if (const char* v = std::getenv("ASCEND_GLOBAL_LOG_LEVEL"); v && *v) {
    long long level = 0;
    if (npu::env::parseInteger(v, NPU_LOG_DEBUG, NPU_LOG_NULL, &level)) {
      cfg.level = static_cast<int>(level);
    } else {
      std::fprintf(stderr, "%s; logging at 3 (error)\n",
                   npu::env::invalid("ASCEND_GLOBAL_LOG_LEVEL", v,
                                     "0 (debug), 1 (info), 2 (warning), 3 (error) or 4 (null)")
                       .c_str());
    }
  }
  if (const char* v = std::getenv("ASCEND_SLOG_PRINT_TO_STDOUT"); v && *v) {
    if (!npu::env::parseFlag(v, &cfg.to_stdout)) {
      std::fprintf(stderr, "%s; logging to files\n",
                   npu::env::invalid("ASCEND_SLOG_PRINT_TO_STDOUT", v,
                                     "1 (print log lines to stdout) or 0 (write log files)")
                       .c_str());
    }
  }
  if (const char* v = std::getenv("ASCEND_PROCESS_LOG_PATH"); v && *v) {
    cfg.dir = v;
  } else {
    const char* home = std::getenv("HOME");
    cfg.dir = std::string(home && *home ? home : "/tmp") + "/ascend/log";
  }
  return cfg;
}

const LogConfig& logConfig() {
  static const LogConfig cfg = loadLogConfig();
  return cfg;
}

const char* levelName(int level) {
  switch (level) {
    case NPU_LOG_DEBUG: return "DEBUG";
    case NPU_LOG_INFO: return "INFO";
    case NPU_LOG_WARNING: return "WARNING";
    default: return "ERROR";
  }
}

std::string processName() {
  char name[64] = "unknown";
  if (FILE* f = std::fopen("/proc/self/comm", "r")) {
    if (std::fgets(name, sizeof(name), f)) name[std::strcspn(name, "\n")] = '\0';
    std::fclose(f);
  }
  return name;
}

bool makeDirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      const std::string prefix = path.substr(0, i);
      if (::mkdir(prefix.c_str(), 0750) != 0 && errno != EEXIST) return false;
    }
  }
  return true;
}

// The destination. A forked child gets its own file (CANN's files are per process).
std::mutex g_mutex;
FILE* g_file = nullptr;
pid_t g_file_pid = 0;
std::string g_file_path;
bool g_file_failed = false;

FILE* destination(pid_t pid) {
  if (logConfig().to_stdout) return stdout;
  if (g_file && g_file_pid == pid) return g_file;
  if (g_file_failed && g_file_pid == pid) return stderr;
  g_file_pid = pid;
  g_file = nullptr;  // the parent's FILE stays the parent's
  const std::string dir = logConfig().dir + "/debug/plog";
  char stamp[80];  // room for any int the fields could hold (no -Wformat-truncation)
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm local{};
  localtime_r(&ts.tv_sec, &local);
  std::snprintf(stamp, sizeof(stamp), "%04d%02d%02d%02d%02d%02d%03ld", local.tm_year + 1900,
                local.tm_mon + 1, local.tm_mday, local.tm_hour, local.tm_min, local.tm_sec,
                ts.tv_nsec / 1000000);
  g_file_path = dir + "/plog-" + std::to_string(pid) + "_" + stamp + ".log";
  if (makeDirs(dir)) g_file = std::fopen(g_file_path.c_str(), "a");
  if (!g_file) {
    g_file_failed = true;
    std::fprintf(stderr,
                 "npu log: cannot write %s (%s); log lines go to stderr. Set "
                 "ASCEND_PROCESS_LOG_PATH to a writable folder or ASCEND_SLOG_PRINT_TO_STDOUT=1\n",
                 g_file_path.c_str(), std::strerror(errno));
    g_file_path.clear();
    return stderr;
  }
  g_file_failed = false;
  return g_file;
}

}  // namespace

extern "C" {

int npuLogGetLevel(void) { return logConfig().level; }

void npuLogWrite(int level, const char* module, const char* file, int line, const char* func,
                 const char* format, ...) {
  if (level < logConfig().level || level >= NPU_LOG_NULL) return;
  char message[2048];
  va_list args;
  va_start(args, format);
  std::vsnprintf(message, sizeof(message), format, args);
  va_end(args);

  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm local{};
  localtime_r(&ts.tv_sec, &local);
  const char* base = file ? std::strrchr(file, '/') : nullptr;
  base = base ? base + 1 : (file ? file : "?");
  static const std::string process = processName();
  const pid_t pid = ::getpid();
  const long tid = static_cast<long>(::syscall(SYS_gettid));

  std::lock_guard<std::mutex> lock(g_mutex);
  FILE* out = destination(pid);
  std::fprintf(out, "[%s] %s(%d,%s):%04d-%02d-%02d-%02d:%02d:%02d.%03ld.%03ld [%s:%d]%ld %s: %s\n",
               levelName(level), module ? module : "RUNTIME", static_cast<int>(pid),
               process.c_str(), local.tm_year + 1900, local.tm_mon + 1, local.tm_mday,
               local.tm_hour, local.tm_min, local.tm_sec, ts.tv_nsec / 1000000,
               (ts.tv_nsec / 1000) % 1000, base, line, tid, func ? func : "?", message);
  std::fflush(out);  // a line must survive the crash it may explain
}

const char* npuLogGetFilePath(void) {
  std::lock_guard<std::mutex> lock(g_mutex);
  static thread_local std::string copy;
  copy = g_file && g_file_pid == ::getpid() ? g_file_path : std::string();
  return copy.c_str();
}

}  // extern "C"
