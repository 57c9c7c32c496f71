// Simulated devices: configuration from the environment, the device table, the per-thread
// current device, properties and utilisation.
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "npu/env.h"
#include "npu/log.h"
#include "npu/registry.h"
#include "runtime_internal.h"

namespace npu::rt {
namespace {

constexpr int kMaxDevices = NPU_MAX_DEVICES;

// ASCEND_RT_VISIBLE_DEVICES, with the real stack's rules (env::parseDeviceList). Anything
// else makes no device visible, and the warning says why and how to fix it.
void parseVisibleDevices(const char* value, Config& cfg) {
  std::string why;
  if (env::parseDeviceList(value, cfg.physical_count, &cfg.visible, &why)) return;
  cfg.visible.clear();
  cfg.visible_warning = env::quoted("ASCEND_RT_VISIBLE_DEVICES", value) + " is invalid: " +
                        why + "; no NPU device is visible. Set it to ascending, unique ids below " +
                        std::to_string(cfg.physical_count) + ", e.g. ASCEND_RT_VISIBLE_DEVICES=0,1";
}

// The simulator's own variables: a bad value makes every runtime call fail with the message
// (init_error), since running with a silently different configuration is worse.
constexpr long long kMaxPendingLaunches = 1 << 20;
constexpr double kMinHbmGb = 1.0 / 1024;  // 1 MiB: smaller devices cannot hold a segment
constexpr double kMaxHbmGb = 1 << 20;     // 1 PiB

Config loadConfig() {
  Config cfg;
  auto reject = [&cfg](const char* name, const char* value, const std::string& expected) {
    if (cfg.init_error.empty()) cfg.init_error = env::invalid(name, value, expected);
  };
  if (const char* v = std::getenv("NPU_SIM_DEVICE_COUNT")) {
    long long n = 0;
    if (env::parseInteger(v, 1, kMaxDevices, &n)) {
      cfg.physical_count = static_cast<int>(n);
    } else {
      reject("NPU_SIM_DEVICE_COUNT", v, "an integer from 1 to " + std::to_string(kMaxDevices));
    }
  }
  if (const char* v = std::getenv("NPU_SIM_HBM_GB")) {
    double gb = 0;
    if (env::parseNumber(v, kMinHbmGb, kMaxHbmGb, &gb)) {
      cfg.hbm_bytes = static_cast<size_t>(gb * double(1ull << 30));
    } else {
      reject("NPU_SIM_HBM_GB", v,
             "a number of GiB from 0.0009765625 (1 MiB) to 1048576 (1 PiB), e.g. "
             "NPU_SIM_HBM_GB=64");
    }
  }
  if (const char* v = std::getenv("NPU_SIM_MAX_PENDING_LAUNCHES")) {
    long long n = 0;
    if (env::parseInteger(v, 1, kMaxPendingLaunches, &n)) {
      cfg.max_pending = static_cast<size_t>(n);
    } else {
      reject("NPU_SIM_MAX_PENDING_LAUNCHES", v,
             "an integer from 1 to " + std::to_string(kMaxPendingLaunches) +
                 " (tasks queued per stream before a launch waits; default 1024)");
    }
  }
  if (const char* v = std::getenv("ASCEND_LAUNCH_BLOCKING")) {
    if (!env::parseFlag(v, &cfg.launch_blocking)) {
      reject("ASCEND_LAUNCH_BLOCKING", v, "0 or 1 (1: every launch waits for its task)");
    }
  }
  if (const char* v = std::getenv("NPU_SIM_INLINE_TASKS")) {
    if (!env::parseFlag(v, &cfg.inline_tasks)) {
      reject("NPU_SIM_INLINE_TASKS", v,
             "0 or 1 (1, the default: short tasks on an idle stream run on the launching thread)");
    }
  }
  parseSchedule(&cfg);
  if (const char* v = std::getenv("NPU_SIM_SHADOW")) {
    if (!env::parseFlag(v, &cfg.shadow)) {
      reject("NPU_SIM_SHADOW", v,
             "0 or 1 (1: shadow execution, npu tensors carry no data; see docs/shadow.md)");
    }
  }
  // Read by the kernels' thread pool (kernels/thread_pool.cpp, same range); checked here too so
  // that a bad value is refused when the program starts, not at its first kernel.
  if (const char* v = std::getenv("NPU_KERNEL_THREADS")) {
    long long n = 0;
    if (!env::parseInteger(v, 1, 256, &n)) {
      reject("NPU_KERNEL_THREADS", v, "an integer from 1 to 256 (kernel threads)");
    }
  }
  if (!cfg.init_error.empty()) return cfg;
  if (const char* v = std::getenv("ASCEND_RT_VISIBLE_DEVICES")) {
    parseVisibleDevices(v, cfg);
  } else {
    for (int i = 0; i < cfg.physical_count; ++i) cfg.visible.push_back(i);
  }
  if (const char* v = std::getenv("NPU_SIM_FAULTS")) {
    std::string why;
    if (!parseFaultPlan(v, faultPlanRank(), &cfg.faults, &why)) {
      cfg.init_error = env::quoted("NPU_SIM_FAULTS", v) + " is invalid: " + why +
                       " (the grammar: docs/faults.md)";
      cfg.faults.clear();
    }
    for (const FaultSpec& f : cfg.faults) {
      if (f.device >= static_cast<int>(cfg.visible.size()) && cfg.init_error.empty()) {
        cfg.init_error = env::quoted("NPU_SIM_FAULTS", v) + " is invalid: '" + f.text +
                         "' names device " + std::to_string(f.device) + " but this process sees " +
                         std::to_string(cfg.visible.size()) +
                         " device(s) (the grammar: docs/faults.md)";
      }
    }
  }
  return cfg;
}

// The device table is built once and never freed: stream worker threads may still run while
// static destructors do at exit, so nothing they touch may be destroyed.
std::vector<Device*>* g_devices = nullptr;
std::once_flag g_devices_once;
thread_local int t_current_device = 0;
std::atomic<bool> g_used{false};    // a device was touched (streams or memory exist)
std::atomic<bool> g_forked{false};  // we are a child forked after g_used

void markForkedChild() {
  if (g_used.load()) g_forked.store(true);
}

void initDevices() {
  const Config& cfg = config();
  g_devices = new std::vector<Device*>();
  for (size_t i = 0; i < cfg.visible.size(); ++i) {
    auto* dev = new Device();
    dev->index = static_cast<int>(i);
    dev->physical_id = cfg.visible[i];
    dev->capacity = cfg.hbm_bytes;
    g_devices->push_back(dev);
  }
  pthread_atfork(nullptr, nullptr, markForkedChild);
  NPU_LOG(NPU_LOG_INFO, "RUNTIME", "%zu of %d simulated device(s) visible, %zu MiB of HBM each",
          cfg.visible.size(), cfg.physical_count, cfg.hbm_bytes >> 20);
}

std::vector<Device*>& devices() {
  std::call_once(g_devices_once, initDevices);
  return *g_devices;
}

// Set once config() has read the environment: from then on the process's devices are fixed.
std::atomic<bool> g_config_fixed{false};

}  // namespace

const Config& config() {
  static const Config cfg = [] {
    Config loaded = loadConfig();
    // Said once, when the configuration is fixed (npuPeekDeviceCount reads it afresh earlier).
    if (loaded.schedule == npuScheduleChaos) announceChaos(loaded.schedule_seed);
    if (loaded.shadow) {
      std::fprintf(stderr,
                   "[SimNPU] NPU_SIM_SHADOW=1: shadow execution: device memory is address space "
                   "only, kernels do not run, and what they would compute reads as zero (pid %d)\n",
                   static_cast<int>(::getpid()));
    }
    // A cost model installed while the environment still asked for shadow execution
    // (npuSimPeekShadow) has no clock to drive when the configuration says otherwise.
    if (!loaded.shadow) simClockDisable();
    g_config_fixed.store(true, std::memory_order_release);
    return loaded;
  }();
  return cfg;
}

uint64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int deviceCount() { return static_cast<int>(devices().size()); }

Device* device(int index) {
  auto& all = devices();
  if (index < 0 || index >= static_cast<int>(all.size())) return nullptr;
  if (!g_used.load(std::memory_order_acquire) && !g_used.exchange(true)) registryAttach(all);
  return all[index];
}

npuError_t checkUsable() {
  if (g_forked.load()) {
    return fail(npuErrorInitialization,
                "the NPU runtime was initialised in the parent process before fork(); a forked "
                "child cannot use it. Use the 'spawn' start method for multiprocessing");
  }
  if (!config().init_error.empty()) return fail(npuErrorInitialization, config().init_error);
  return npuSuccess;
}

npuError_t invalidDevice(int index) {
  int count = deviceCount();
  if (count == 0) {
    return fail(npuErrorNoDevice, config().visible_warning.empty()
                                      ? "no NPU device is visible"
                                      : config().visible_warning);
  }
  return fail(npuErrorInvalidDevice, "invalid device index " + std::to_string(index) +
                                         ": the process sees " + std::to_string(count) +
                                         " NPU device(s), valid indices are 0.." +
                                         std::to_string(count - 1));
}

npuError_t currentDevice(Device** out) {
  if (npuError_t e = checkUsable()) return e;
  Device* dev = device(t_current_device);
  if (!dev) return invalidDevice(t_current_device);
  *out = dev;
  return npuSuccess;
}

}  // namespace npu::rt

using namespace npu::rt;

extern "C" {

npuError_t npuGetDeviceCount(int* count) {
  if (!count) return fail(npuErrorInvalidValue, "npuGetDeviceCount: count is NULL");
  *count = 0;
  if (npuError_t e = checkUsable()) return e;
  *count = deviceCount();
  if (*count == 0) return invalidDevice(0);
  return npuSuccess;
}

npuError_t npuSetDevice(int index) {
  if (npuError_t e = checkUsable()) return e;
  if (!device(index)) return invalidDevice(index);
  if (t_current_device != index) NPU_LOG(NPU_LOG_DEBUG, "RUNTIME", "current device %d", index);
  t_current_device = index;
  return npuSuccess;
}

npuError_t npuGetDevice(int* index) {
  if (!index) return fail(npuErrorInvalidValue, "npuGetDevice: device is NULL");
  *index = t_current_device;
  return npuSuccess;
}

npuError_t npuGetDeviceProperties(npuDeviceProp* prop, int index) {
  if (!prop) return fail(npuErrorInvalidValue, "npuGetDeviceProperties: prop is NULL");
  if (npuError_t e = checkUsable()) return e;
  if (index < 0 || index >= deviceCount()) return invalidDevice(index);
  const Device* dev = devices()[index];  // no registry attach: reading properties is free
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "Ascend910B2");
  std::snprintf(prop->soc_version, sizeof(prop->soc_version), "Ascend910B2");
  prop->total_memory = dev->capacity;
  prop->cube_core_num = 24;
  prop->vector_core_num = 48;
  prop->physical_id = dev->physical_id;
  prop->major = 9;  // torch_npu reports no CUDA-style capability; 9.x names the 910 family
  prop->minor = 1;
  return npuSuccess;
}

npuError_t npuDeviceGetUtilization(int index, int* percent) {
  if (!percent) return fail(npuErrorInvalidValue, "npuDeviceGetUtilization: percent is NULL");
  if (npuError_t e = checkUsable()) return e;
  if (index < 0 || index >= deviceCount()) return invalidDevice(index);
  Device* dev = devices()[index];
  std::lock_guard<std::mutex> lock(dev->util_mutex);
  uint64_t wall = nowNs(), busy = dev->busy_ns->load(std::memory_order_relaxed);
  uint64_t dwall = wall - dev->util_last_wall_ns, dbusy = busy - dev->util_last_busy_ns;
  bool have_sample = dev->util_last_wall_ns != 0;
  if (have_sample && dwall < 1'000'000ull) {  // windows under 1 ms repeat the last answer
    *percent = dev->util_last_percent;
    return npuSuccess;
  }
  if (have_sample) {
    uint64_t pct = dbusy * 100 / dwall;
    dev->util_last_percent = static_cast<int>(pct > 100 ? 100 : pct);
  }
  dev->util_last_wall_ns = wall;
  dev->util_last_busy_ns = busy;
  *percent = dev->util_last_percent;
  return npuSuccess;
}

npuError_t npuDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (least) *least = 0;
  if (greatest) *greatest = -1;
  return npuSuccess;
}

const char* npuGetVisibleDevicesWarning(void) { return config().visible_warning.c_str(); }

npuError_t npuPeekDeviceCount(int* count, char* why, size_t why_size) {
  if (!count) return fail(npuErrorInvalidValue, "npuPeekDeviceCount: count is NULL");
  if (why && why_size) why[0] = '\0';
  if (g_config_fixed.load(std::memory_order_acquire)) {
    *count = checkUsable() == npuSuccess ? deviceCount() : 0;
    if (*count == 0 && why && why_size) {
      const std::string& reason =
          config().init_error.empty() ? config().visible_warning : config().init_error;
      std::snprintf(why, why_size, "%s", reason.c_str());
    }
    return npuSuccess;
  }
  // Not started yet: read the environment as it is now, without fixing anything, so that a
  // program may still change ASCEND_RT_VISIBLE_DEVICES before its first device call.
  const Config fresh = loadConfig();
  *count = fresh.init_error.empty() ? static_cast<int>(fresh.visible.size()) : 0;
  if (*count == 0 && why && why_size) {
    const std::string& reason = fresh.init_error.empty() ? fresh.visible_warning : fresh.init_error;
    std::snprintf(why, why_size, "%s", reason.c_str());
  }
  return npuSuccess;
}

int npuSimPeekShadow(void) {
  if (g_config_fixed.load(std::memory_order_acquire)) return config().shadow ? 1 : 0;
  return loadConfig().shadow ? 1 : 0;
}

int npuPhysicalDeviceCount(void) { return config().physical_count; }
size_t npuPhysicalDeviceMemory(void) { return config().hbm_bytes; }

}  // extern "C"
