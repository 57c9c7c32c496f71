// Faults on demand (NPU_SIM_FAULTS; the grammar is in npu/runtime.h, the guide docs/faults.md)
// and the recovery calls torch_npu's stop_device / restart_device / check_uce_in_memory use.
//
// The plan is parsed with the rest of the configuration (device.cpp), so a bad plan fails the
// runtime's start naming the bad part. Triggers are counted here, per device; the component that
// sees the event ticks (launches: stream.cpp, allocations: the caching allocator, collectives:
// ccl, optimizer steps: torch_npu). A device's health is one atomic that every launch reads.
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "npu/env.h"
#include "runtime_internal.h"

namespace npu::rt {
namespace {

const char* kindName(npuSimFaultKind k) {
  switch (k) {
    case npuSimFaultDeviceLost: return "device_lost";
    case npuSimFaultHbmUce: return "hbm_uce";
    case npuSimFaultLinkDown: return "link_down";
    case npuSimFaultStraggler: return "straggler";
    case npuSimFaultOom: return "oom";
    case npuSimFaultKill: return "kill";
    default: return "none";
  }
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    const size_t at = s.find(sep, start);
    parts.push_back(trim(s.substr(start, at == std::string::npos ? std::string::npos : at - start)));
    if (at == std::string::npos) return parts;
    start = at + 1;
  }
}

// param[I], grad[I] or state[I].KEY: the tensors of the optimizer's I-th parameter.
bool validTarget(const std::string& t) {
  size_t open = t.find('[');
  if (open == std::string::npos) return false;
  const std::string head = t.substr(0, open);
  const size_t close = t.find(']', open);
  if (close == std::string::npos || close == open + 1) return false;
  for (size_t i = open + 1; i < close; ++i) {
    if (t[i] < '0' || t[i] > '9') return false;
  }
  const std::string rest = t.substr(close + 1);
  if (head == "param" || head == "grad") return rest.empty();
  return head == "state" && rest.size() > 1 && rest[0] == '.' && t.size() < 64;
}

bool parseFault(const std::string& text, FaultSpec* f, std::string* why) {
  f->text = text;
  const size_t at = text.find('@');
  if (at == std::string::npos) {
    *why = "expected KIND@TRIGGER[,OPTION...], e.g. kill@step=5,rank=1";
    return false;
  }
  const std::string kind = trim(text.substr(0, at));
  static const npuSimFaultKind kinds[] = {npuSimFaultDeviceLost, npuSimFaultHbmUce,
                                          npuSimFaultLinkDown,   npuSimFaultStraggler,
                                          npuSimFaultOom,        npuSimFaultKill};
  for (npuSimFaultKind k : kinds) {
    if (kind == kindName(k)) f->kind = k;
  }
  if (f->kind == npuSimFaultNone) {
    *why = "unknown fault '" + kind +
           "' (expected device_lost, hbm_uce, link_down, straggler, oom or kill)";
    return false;
  }
  const std::vector<std::string> fields = split(text.substr(at + 1), ',');
  bool have_factor = false, have_peer = false, have_mode = false;
  for (size_t i = 0; i < fields.size(); ++i) {
    const std::string& field = fields[i];
    const size_t eq = field.find('=');
    const std::string key = trim(field.substr(0, eq));
    const std::string value = eq == std::string::npos ? "" : trim(field.substr(eq + 1));
    if (eq == std::string::npos || value.empty()) {
      *why = "'" + field + "' is not KEY=VALUE";
      return false;
    }
    long long n = 0;
    auto count = [&](long long lo) {
      if (env::parseInteger(value.c_str(), lo, 1ll << 40, &n)) return true;
      *why = key + "=" + value + ": expected an integer of at least " + std::to_string(lo);
      return false;
    };
    if (i == 0) {  // the trigger
      static const struct { const char* name; npuSimFaultTrigger trigger; } triggers[] = {
          {"launch", npuSimOnLaunch}, {"alloc", npuSimOnAlloc}, {"collective", npuSimOnCollective},
          {"step", npuSimOnStep},     {"time", npuSimOnTime}};
      bool known = false;
      for (const auto& t : triggers) {
        if (key == t.name) {
          known = true;
          f->trigger = t.trigger;
        }
      }
      if (!known) {
        *why = "unknown trigger '" + key +
               "' (expected launch=N, alloc=N, collective=N, step=N or time=SECONDS)";
        return false;
      }
      if (f->trigger == npuSimOnTime) {
        double seconds = 0;
        if (!env::parseNumber(value.c_str(), 0.0, 1e7, &seconds)) {
          *why = "time=" + value + ": expected a number of seconds";
          return false;
        }
        f->at = static_cast<uint64_t>(seconds * 1e9);
      } else {
        if (!count(1)) return false;
        f->at = static_cast<uint64_t>(n);
      }
      continue;
    }
    if (key == "rank" || key == "device" || key == "peer" || key == "restart") {
      if (!count(0)) return false;
      (key == "rank"     ? f->rank
       : key == "device" ? f->device
       : key == "peer"   ? f->peer
                         : f->restart) = static_cast<int>(n);
      have_peer = have_peer || key == "peer";
    } else if (key == "factor") {
      if (!env::parseNumber(value.c_str(), 1.0, 1e6, &f->factor)) {
        *why = "factor=" + value + ": expected a number from 1 (kernels take factor times as long)";
        return false;
      }
      have_factor = true;
    } else if (key == "mode") {
      if (value != "error" && value != "hang") {
        *why = "mode=" + value + ": expected error or hang";
        return false;
      }
      f->hang = value == "hang";
      have_mode = true;
    } else if (key == "target") {
      if (!validTarget(value)) {
        *why = "target=" + value + ": expected param[I], grad[I] or state[I].KEY (the optimizer's "
               "I-th parameter, its gradient, or its state KEY such as exp_avg)";
        return false;
      }
      f->target = value;
    } else {
      *why = "unknown option '" + key +
             "' (expected rank, device, restart, factor, peer, mode or target)";
      return false;
    }
  }
  // What each fault can be triggered by, and the options it takes.
  const std::string kind_s = kindName(f->kind);
  auto impossible = [&](const std::string& what) {
    *why = kind_s + " " + what;
    return false;
  };
  if (f->kind == npuSimFaultOom && f->trigger != npuSimOnAlloc) {
    return impossible("happens at an allocation: use oom@alloc=N");
  }
  if (f->kind == npuSimFaultLinkDown && f->trigger != npuSimOnCollective) {
    return impossible("happens in a collective: use link_down@collective=N");
  }
  if (f->kind == npuSimFaultHbmUce) {
    // At a step it hits a tensor of the optimizer (target=); at an allocation, the memory that
    // allocation is given.
    if (f->trigger == npuSimOnStep && f->target.empty()) {
      return impossible("at a step needs target=param[I], grad[I] or state[I].KEY");
    }
    if (f->trigger == npuSimOnAlloc && !f->target.empty()) {
      return impossible("at an allocation hits that allocation's memory: it takes no target");
    }
    if (f->trigger != npuSimOnStep && f->trigger != npuSimOnAlloc) {
      return impossible("hits a tensor: use hbm_uce@step=N,target=... or hbm_uce@alloc=N");
    }
  } else if (!f->target.empty()) {
    return impossible("takes no target (only hbm_uce does)");
  }
  if (have_factor != (f->kind == npuSimFaultStraggler)) {
    return impossible(have_factor ? "takes no factor (only straggler does)"
                                  : "needs factor=F (its kernels take F times as long)");
  }
  if ((have_peer || have_mode) && f->kind != npuSimFaultLinkDown) {
    return impossible("takes no peer or mode (only link_down does)");
  }
  return true;
}

// Which faults fired (config().faults is immutable; this is its state).
std::mutex g_mutex;
std::vector<char> g_fired;
std::atomic<uint64_t> g_counts[5][NPU_MAX_DEVICES];
const uint64_t g_start_ns = nowNs();

int rankFromEnvironment() {
  const char* v = std::getenv("RANK");
  long long n = 0;
  return v && env::parseInteger(v, 0, 1 << 30, &n) ? static_cast<int>(n) : -1;
}

void storeHealth(Device* dev, int health) {  // caller holds dev->fault_mutex
  dev->health.store(health, std::memory_order_release);
  if (std::atomic<uint64_t>* mirror = dev->health_mirror.load()) mirror->store(health);
}

void setHealth(Device* dev, npuDeviceHealth health, const std::string& message) {
  std::lock_guard<std::mutex> lock(dev->fault_mutex);
  // A lost device stays lost; stop_device overrides a memory error (torch_npu then says FORCE
  // STOP); a stopped device keeps saying so until it is restarted.
  const int now = dev->health.load();
  const int rank_of[] = {0, 2, 1, 3};  // healthy, stopped, memory error, lost
  if (rank_of[health] <= rank_of[now]) return;
  dev->fault_message = message;
  storeHealth(dev, health);
}

void announce(const FaultSpec& f, int device) {
  const int rank = rankFromEnvironment();
  std::fprintf(stderr, "[SimNPU] NPU_SIM_FAULTS: '%s' fired on NPU %d%s%s (pid %d)\n",
               f.text.c_str(), device, rank >= 0 ? ", rank " : "",
               rank >= 0 ? std::to_string(rank).c_str() : "", static_cast<int>(::getpid()));
  std::fflush(stderr);
}

// Applies a fault the runtime handles itself; false when the caller must act.
bool applyHere(const FaultSpec& f, Device* dev) {
  switch (f.kind) {
    case npuSimFaultKill:
      ::raise(SIGKILL);
      return true;
    case npuSimFaultDeviceLost:
      setHealth(dev, npuDeviceLostState,
                "NPU " + std::to_string(dev->index) + " (physical " +
                    std::to_string(dev->physical_id) + ") was lost: it stopped answering "
                    "(heartbeat lost), injected by NPU_SIM_FAULTS '" + f.text + "'");
      return true;
    case npuSimFaultStraggler:
      dev->slow_factor.store(f.factor, std::memory_order_relaxed);
      return true;
    default:
      return false;
  }
}

}  // namespace

bool parseFaultPlan(const char* plan, int rank, std::vector<FaultSpec>* out, std::string* why) {
  // torchrun's restart count: a restarted job does not meet the first attempt's faults again
  // unless a fault's restart= names its attempt.
  long long attempt = 0;
  if (const char* v = std::getenv("TORCHELASTIC_RESTART_COUNT")) {
    if (!env::parseInteger(v, 0, 1 << 30, &attempt)) attempt = 0;
  }
  const std::vector<std::string> faults = split(plan, ';');
  for (size_t i = 0; i < faults.size(); ++i) {
    if (faults[i].empty()) continue;  // "a;;b" and a trailing ';' are harmless
    FaultSpec f;
    std::string reason;
    if (!parseFault(faults[i], &f, &reason)) {
      *why = "fault " + std::to_string(i + 1) + " '" + faults[i] + "': " + reason;
      return false;
    }
    if ((f.rank < 0 || rank < 0 || f.rank == rank) && f.restart == attempt) out->push_back(f);
  }
  return true;
}

int faultPlanRank() { return rankFromEnvironment(); }

npuError_t deviceFault(Device* dev) {
  const int health = dev->health.load(std::memory_order_acquire);
  if (__builtin_expect(health == npuDeviceHealthy, 1)) return npuSuccess;
  std::string message;
  {
    std::lock_guard<std::mutex> lock(dev->fault_mutex);
    message = dev->fault_message;
  }
  const npuError_t code = health == npuDeviceStopped     ? npuErrorDeviceTaskAbort
                          : health == npuDeviceMemError ? npuErrorDeviceMemError
                                                         : npuErrorDeviceLost;
  return fail(code, message);
}

}  // namespace npu::rt

using namespace npu::rt;

extern "C" {

int npuSimFaultsArmed(void) { return config().faults.empty() ? 0 : 1; }

npuError_t npuSimFaultTick(npuSimFaultTrigger trigger, int index, npuSimFault* fault) {
  if (fault) fault->kind = npuSimFaultNone;
  const std::vector<FaultSpec>& plan = config().faults;
  if (plan.empty()) return npuSuccess;
  if (trigger < npuSimOnLaunch || trigger > npuSimOnStep) {
    return fail(npuErrorInvalidValue, "npuSimFaultTick: unknown trigger " + std::to_string(trigger));
  }
  Device* dev = device(index);
  if (!dev) return fail(npuErrorInvalidDevice, "npuSimFaultTick: invalid device " + std::to_string(index));
  const uint64_t n = g_counts[trigger][index].fetch_add(1, std::memory_order_relaxed) + 1;
  const uint64_t elapsed = trigger == npuSimOnLaunch ? nowNs() - g_start_ns : 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const FaultSpec& f = plan[i];
    if (f.device >= 0 && f.device != index) continue;
    const bool due = f.trigger == npuSimOnTime ? trigger == npuSimOnLaunch && elapsed >= f.at
                                               : f.trigger == trigger && n == f.at;
    if (!due) continue;
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      if (g_fired.empty()) g_fired.assign(plan.size(), 0);
      if (g_fired[i]) continue;
      g_fired[i] = 1;
    }
    announce(f, index);
    if (applyHere(f, dev) || !fault) continue;
    fault->kind = f.kind;
    fault->device = index;
    fault->peer = f.peer;
    fault->hang = f.hang ? 1 : 0;
    fault->factor = f.factor;
    std::snprintf(fault->target, sizeof(fault->target), "%s", f.target.c_str());
    std::snprintf(fault->text, sizeof(fault->text), "%s", f.text.c_str());
  }
  return npuSuccess;
}

npuError_t npuDeviceGetHealth(int index, int* health) {
  if (!health) return fail(npuErrorInvalidValue, "npuDeviceGetHealth: health is NULL");
  Device* dev = device(index);
  if (!dev) return fail(npuErrorInvalidDevice, "npuDeviceGetHealth: invalid device " + std::to_string(index));
  *health = dev->health.load(std::memory_order_acquire);
  return npuSuccess;
}

npuError_t npuDeviceTaskAbort(int index) {
  Device* dev = device(index);
  if (!dev) return fail(npuErrorInvalidDevice, "npuDeviceTaskAbort: invalid device " + std::to_string(index));
  setHealth(dev, npuDeviceStopped,
            "FORCE STOP: NPU " + std::to_string(index) +
                " was stopped (torch_npu.npu.stop_device); torch_npu.npu.restart_device(" +
                std::to_string(index) + ") makes it work again");
  // The tasks already queued fail with FORCE STOP (stream.cpp checks the health per task).
  return npuSuccess;
}

npuError_t npuDeviceRepair(int index) {
  Device* dev = device(index);
  if (!dev) return fail(npuErrorInvalidDevice, "npuDeviceRepair: invalid device " + std::to_string(index));
  if (dev->health.load() == npuDeviceLostState) {
    std::lock_guard<std::mutex> lock(dev->fault_mutex);
    return fail(npuErrorDeviceLost, dev->fault_message +
                                        "; a lost device cannot be restarted in this process: "
                                        "restart the job (torchrun --max-restarts) without it");
  }
  // Let the stopped tasks drain (they fail fast), then start clean.
  waitDeviceIdle(dev);
  {
    std::lock_guard<std::mutex> lock(dev->fault_mutex);
    dev->uce.clear();  // aclrtMemUceRepair: the memory can be used again
    dev->fault_message.clear();
    storeHealth(dev, npuDeviceHealthy);
  }
  clearStreamErrors(dev);
  return npuSuccess;
}

npuError_t npuSimInjectMemError(int index, const void* ptr, size_t bytes) {
  Device* dev = device(index);
  if (!dev) return fail(npuErrorInvalidDevice, "npuSimInjectMemError: invalid device " + std::to_string(index));
  if (!ptr || bytes == 0) return fail(npuErrorInvalidValue, "npuSimInjectMemError: empty range");
  {
    std::lock_guard<std::mutex> lock(dev->fault_mutex);
    dev->uce.push_back({const_cast<void*>(ptr), bytes});
  }
  char range[96];
  std::snprintf(range, sizeof(range), "[%p, +%zu bytes)", ptr, bytes);
  setHealth(dev, npuDeviceMemError,
            "UCE ERROR: an uncorrectable HBM error on NPU " + std::to_string(index) + " at " +
                range + "; torch_npu.npu.check_uce_in_memory(" + std::to_string(index) +
                ") tells which memory it hit, restart_device repairs it");
  return npuSuccess;
}

size_t npuGetMemUceInfo(int index, npuMemUceInfo* out, size_t max) {
  Device* dev = device(index);
  if (!dev) return 0;
  std::lock_guard<std::mutex> lock(dev->fault_mutex);
  for (size_t i = 0; i < dev->uce.size() && i < max && out; ++i) out[i] = dev->uce[i];
  return dev->uce.size();
}

}  // extern "C"
