#include "NPUFunctions.h"

#include <pthread.h>

#include <unistd.h>
#include <chrono>
#include <ctime>
#include <iomanip>
#include <sstream>
#include <cstdlib>
#include <atomic>
#include <mutex>
#include <string>

#include <c10/util/Exception.h>

#include "NPUException.h"
#include "npu/caching_allocator.h"
#include "npu/runtime.h"

namespace torch_npu {

const char* const kBadForkMessage =
    "Cannot re-initialize NPU in forked subprocess. To use NPU with multiprocessing, you must "
    "use the 'spawn' start method";

namespace {

std::atomic<bool> g_initialized{false};
std::atomic<bool> g_bad_fork{false};
std::mutex g_init_mutex;
// The device count, asked once at initialisation: the runtime reads ASCEND_RT_VISIBLE_DEVICES
// once, so the count cannot change afterwards, and every op reads it (stream lookup, device
// guard): asking the runtime each time cost ~450 instructions of a 1-element op's ~10.6k.
// -1 until lazyInit has succeeded.
std::atomic<c10::DeviceIndex> g_device_count{-1};

// Runs in the child after fork(): streams and their worker threads do not survive a fork, so a
// child of an initialised parent must not use the device.
void markChildAfterFork() {
  if (g_initialized.load()) g_bad_fork.store(true);
}

struct ForkHandlerRegistration {
  ForkHandlerRegistration() { pthread_atfork(nullptr, nullptr, &markChildAfterFork); }
} g_fork_handler_registration;

[[noreturn]] void throwNoDevice() {
  // Ask the runtime for its own explanation (it names ASCEND_RT_VISIBLE_DEVICES and the
  // simulator's variables), then add the visibility warning when there is one.
  const npuError_t error = npuSetDevice(0);
  std::string message = "NPU error: ";
  message += npuGetErrorName(error == npuSuccess ? npuErrorNoDevice : error);
  message += ": ";
  const char* detail = error == npuSuccess ? "" : npuGetLastErrorMessage();
  message += detail && *detail ? detail : "no NPU device is visible to this process";
  const std::string warning = visibleDevicesWarning();
  if (!warning.empty() && message.find(warning) == std::string::npos) {
    message += " (" + warning + ")";
  }
  throw c10::AcceleratorError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                              static_cast<int32_t>(npuErrorNoDevice), message);
}

c10::DeviceIndex queryDeviceCount() noexcept {
  int count = 0;
  if (npuGetDeviceCount(&count) != npuSuccess) return 0;
  return static_cast<c10::DeviceIndex>(count);
}

}  // namespace

c10::DeviceIndex deviceCount() noexcept {
  const c10::DeviceIndex cached = g_device_count.load(std::memory_order_relaxed);
  // A child forked after initialisation asks the runtime, which refuses it (0 devices).
  if (C10_LIKELY(cached >= 0) && !g_bad_fork.load(std::memory_order_relaxed)) return cached;
  return queryDeviceCount();
}

c10::DeviceIndex currentDevice() {
  int device = 0;
  NPU_CHECK(npuGetDevice(&device));
  return static_cast<c10::DeviceIndex>(device);
}

void setDevice(c10::DeviceIndex device) {
  int current = -1;
  if (npuGetDevice(&current) == npuSuccess && current == device) return;
  NPU_CHECK(npuSetDevice(device));
}

c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) {
  const c10::DeviceIndex previous = currentDevice();
  if (previous != device) NPU_CHECK(npuSetDevice(device));
  return previous;
}

c10::DeviceIndex checkedDeviceIndex(c10::DeviceIndex device) {
  if (device < 0) return currentDevice();
  const c10::DeviceIndex count = deviceCount();
  TORCH_CHECK(device < count, "Invalid device index ", static_cast<int>(device),
              ": this process sees ", static_cast<int>(count), " NPU device(s)");
  return device;
}

void lazyInit() {
  if (C10_LIKELY(g_initialized.load(std::memory_order_acquire))) {
    TORCH_CHECK(!g_bad_fork.load(std::memory_order_relaxed), kBadForkMessage);
    return;
  }
  std::lock_guard<std::mutex> lock(g_init_mutex);
  TORCH_CHECK(!g_bad_fork.load(), kBadForkMessage);
  if (g_initialized.load()) return;
  const c10::DeviceIndex count = queryDeviceCount();
  if (count == 0) throwNoDevice();
  try {
    // Parses PYTORCH_NPU_ALLOC_CONF now, so that a bad value is reported at initialisation.
    (void)npu::alloc::CachingAllocator::instance();
  } catch (const std::exception& e) {
    TORCH_CHECK(false, e.what());
  }
  g_device_count.store(count, std::memory_order_relaxed);
  g_initialized.store(true, std::memory_order_release);
}

bool isInitialized() noexcept { return g_initialized.load(std::memory_order_acquire); }

bool isInBadFork() noexcept { return g_bad_fork.load(); }

std::string visibleDevicesWarning() {
  const char* warning = npuGetVisibleDevicesWarning();
  return warning ? std::string(warning) : std::string();
}

DeviceSwitch::DeviceSwitch(c10::DeviceIndex device) : previous_(currentDevice()), current_(device) {
  if (device != previous_) NPU_CHECK(npuSetDevice(device));
}

DeviceSwitch::~DeviceSwitch() {
  if (current_ != previous_) (void)npuSetDevice(previous_);
}

std::string errorTimestamp() {
  const auto now = std::chrono::system_clock::now();
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  localtime_r(&seconds, &tm);
  std::ostringstream out;
  out << std::put_time(&tm, "%Y-%m-%d-%H:%M:%S") << '.' << std::setw(3) << std::setfill('0')
      << (micros / 1000) % 1000 << '.' << std::setw(3) << std::setfill('0') << micros % 1000;
  return out.str();
}

namespace detail {

void throwNpuError(npuError_t error, const char* expr, const char* file, int line) {
  const char* detail = npuGetLastErrorMessage();
  const c10::SourceLocation at{expr, file, static_cast<uint32_t>(line)};
  if (error == npuErrorDeviceTaskAbort || error == npuErrorDeviceMemError ||
      error == npuErrorDeviceLost) {
    // A faulty device (NPU_SIM_FAULTS, stop_device): torch_npu's shape, "NPU function error:
    // FORCE STOP / UCE ERROR ..., error code is <CANN code>" and the PTA suffix.
    const int acl = error == npuErrorDeviceTaskAbort ? 107022
                    : error == npuErrorDeviceMemError ? 507053
                                                      : 507010;
    int device = -1;
    (void)npuGetDevice(&device);
    const char* rank = std::getenv("RANK");
    throw c10::AcceleratorError(
        at, static_cast<int32_t>(error),
        c10::str(file, ":", line, " NPU function error: ", detail, ", error code is ", acl,
                 "\n[ERROR] ", errorTimestamp(), " (PID:", getpid(), ", Device:", device,
                 ", RankID:", rank ? rank : "-1", ") ERR00100 PTA call acl api failed."));
  }
  std::string message = std::string("NPU error: ") + npuGetErrorName(error) + ": " +
                        (detail && *detail ? detail : npuGetErrorString(error));
  if (error == npuErrorMemoryAllocation) throw c10::OutOfMemoryError(at, message);
  throw c10::AcceleratorError(at, static_cast<int32_t>(error), message);
}

}  // namespace detail
namespace {
std::atomic<int> g_sync_debug_mode{0};
}  // namespace

int syncDebugMode() noexcept { return g_sync_debug_mode.load(std::memory_order_relaxed); }

void setSyncDebugMode(int mode) {
  TORCH_CHECK(mode >= 0 && mode <= 2, "invalid value of debug_mode ", mode,
              ", expected one of 0 / 'default', 1 / 'warn', 2 / 'error'");
  g_sync_debug_mode.store(mode, std::memory_order_relaxed);
}

void warnOrErrorOnSync() {
  const int mode = syncDebugMode();
  TORCH_CHECK(mode != 2, "called a synchronizing NPU operation");
  if (mode == 1) TORCH_WARN("called a synchronizing NPU operation");
}

}  // namespace torch_npu
