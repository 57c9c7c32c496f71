// npu-smi: the device table users know from Ascend 910B servers, for the simulated NPUs.
//
// Everything shown is read live from the runtime's process registry: the HBM each process
// holds per device, and the time its streams were busy (AICore(%) is the busy share of the
// wall time over a short sampling window). Power and temperature are simulated from the
// utilisation, plausibly, since there is no sensor to read.
#include <unistd.h>

#include <chrono>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "npu/registry.h"

namespace {

constexpr int kSampleMs = 200;

struct DeviceView {
  int id = 0;
  uint64_t hbm_used = 0;
  int aicore_pct = 0;
  int health = npuDeviceHealthy;  // the worst any process reports
  std::vector<std::pair<const npuProcessInfo*, uint64_t>> procs;  // process, bytes on device
};

// Records the registry skipped, each shown once per run on stderr (the table stays parseable).
void printNotes(const char* notes) {
  static std::set<std::string> shown;
  std::istringstream lines(notes ? notes : "");
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && shown.insert(line).second) {
      std::fprintf(stderr, "npu-smi: note: %s\n", line.c_str());
    }
  }
}

std::vector<npuProcessInfo> listProcesses() {
  std::vector<npuProcessInfo> out(256);
  int count = 0;
  npuRegistryList(out.data(), static_cast<int>(out.size()), &count);
  printNotes(npuRegistryListNotes());
  out.resize(count < 256 ? count : 256);
  return out;
}

uint64_t busySum(const std::vector<npuProcessInfo>& procs, int device) {
  uint64_t sum = 0;
  for (const auto& p : procs) sum += p.busy_ns[device];
  return sum;
}

// Samples the registry twice, kSampleMs apart, to measure utilisation.
std::vector<DeviceView> sampleDevices(std::vector<npuProcessInfo>& procs, bool measure) {
  const int n = npuPhysicalDeviceCount();
  std::vector<uint64_t> busy0(n);
  std::vector<npuProcessInfo> first = listProcesses();
  for (int d = 0; d < n; ++d) busy0[d] = busySum(first, d);
  if (measure) std::this_thread::sleep_for(std::chrono::milliseconds(kSampleMs));
  procs = measure ? listProcesses() : first;
  std::vector<DeviceView> views(n);
  for (int d = 0; d < n; ++d) {
    DeviceView& v = views[d];
    v.id = d;
    uint64_t busy1 = busySum(procs, d);
    // A process that exited in between takes its busy time with it: clamp at zero.
    uint64_t delta = busy1 > busy0[d] ? busy1 - busy0[d] : 0;
    uint64_t pct = measure ? delta * 100 / (uint64_t(kSampleMs) * 1'000'000) : 0;
    v.aicore_pct = static_cast<int>(pct > 100 ? 100 : pct);
    for (const auto& p : procs) {
      v.health = std::max(v.health, p.health[d]);
      if (p.memory_bytes[d] > 0) {
        v.hbm_used += p.memory_bytes[d];
        v.procs.emplace_back(&p, p.memory_bytes[d]);
      }
    }
  }
  return views;
}

uint64_t mb(uint64_t bytes) { return bytes / (1024 * 1024); }
double powerW(int pct) { return 72.0 + 2.8 * pct; }     // idle ~72 W, ~350 W at full load
int tempC(int pct) { return 35 + pct * 30 / 100; }

const char* kRule =
    "+---------------------------+---------------+----------------------------------------------------+";
const char* kDoubleRule =
    "+===========================+===============+====================================================+";

void printHeader() {
  std::printf("%s\n", kRule);
  std::printf("| npu-smi %-17s Version: %-64s|\n", npuGetDriverVersion(), npuGetDriverVersion());
  std::printf("%s\n", kRule);
  std::printf("| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|\n");
  std::printf("| Chip                      | Bus-Id        | AICore(%%)   Memory-Usage(MB)  HBM-Usage(MB)        |\n");
  std::printf("%s\n", kDoubleRule);
}

void printDevice(const DeviceView& v) {
  const uint64_t total = npuPhysicalDeviceMemory();
  char bus[32], hbm[48], power[16];
  std::snprintf(bus, sizeof(bus), "0000:%02X:00.0", 0xC1 + v.id);
  std::snprintf(hbm, sizeof(hbm), "%llu / %llu", (unsigned long long)mb(v.hbm_used),
                (unsigned long long)mb(total));
  std::snprintf(power, sizeof(power), "%.1f", powerW(v.aicore_pct));
  // npu-smi's health words: a stopped device warns, a memory error alarms, a lost one is critical.
  static const char* const kHealth[] = {"OK", "Warning", "Alarm", "Critical"};
  std::printf("| %-5d %-19s | %-13s | %-11s %-17d %-21s|\n", v.id, "910B2", kHealth[std::clamp(v.health, 0, 3)], power,
              tempC(v.aicore_pct), "0    / 0");
  std::printf("| %-25d | %-13s | %-11d %-17s %-21s|\n", 0, bus, v.aicore_pct, "0    / 0", hbm);
  std::printf("%s\n", kDoubleRule);
}

void printProcesses(const std::vector<DeviceView>& views) {
  std::printf("%s\n", kRule);
  std::printf("| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |\n");
  std::printf("%s\n", kDoubleRule);
  for (const DeviceView& v : views) {
    if (v.procs.empty()) {
      char line[96];
      std::snprintf(line, sizeof(line), "No running processes found in NPU %d", v.id);
      std::printf("| %-95s|\n", line);
    } else {
      for (const auto& [p, bytes] : v.procs) {
        std::printf("| %-7d %-17d | %-13d | %-24s | %-24llu|\n", v.id, 0, p->pid, p->name,
                    (unsigned long long)mb(bytes));
      }
    }
    std::printf("%s\n", kDoubleRule);
  }
}

int usage(const char* why) {
  if (why) std::fprintf(stderr, "npu-smi: %s\n", why);
  std::fprintf(stderr,
               "Usage: npu-smi info [-l | -i ID]\n"
               "       npu-smi info watch [-i ID] [-d SECONDS] [-n COUNT]\n"
               "  info            the device table and the processes using each device\n"
               "  info -l         list the devices\n"
               "  info -i ID      one device (ID from 0 to %d)\n"
               "  info watch      one line per device every SECONDS (default 1), COUNT times\n"
               "                  (default: until interrupted)\n",
               npuPhysicalDeviceCount() - 1);
  return 2;
}

bool parseId(const char* text, int* id) {
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (!*text || *end || v < 0 || v >= npuPhysicalDeviceCount()) return false;
  *id = static_cast<int>(v);
  return true;
}

int info(int only) {
  std::vector<npuProcessInfo> procs;
  std::vector<DeviceView> views = sampleDevices(procs, true);
  if (only >= 0) views = {views[only]};
  printHeader();
  for (const auto& v : views) printDevice(v);
  printProcesses(views);
  return 0;
}

int list() {
  std::printf("        Total Count                    : %d\n\n", npuPhysicalDeviceCount());
  for (int d = 0; d < npuPhysicalDeviceCount(); ++d) {
    std::printf("        NPU ID                         : %d\n", d);
    std::printf("        Product Name                   : Atlas 800T A2 (simulated)\n");
    std::printf("        Serial Number                  : SIMNPU%06d\n", d);
    std::printf("        Chip Count                     : 1\n\n");
  }
  return 0;
}

int watch(int only, double delay, long count) {
  std::printf("%-12s %-12s %-8s %-8s %-11s %-10s %-10s\n", "NpuID(Idx)", "ChipId(Idx)", "Pwr(W)",
              "Temp(C)", "AI Core(%)", "HBM(MB)", "HBM(%)");
  for (long i = 0; count < 0 || i < count; ++i) {
    std::vector<npuProcessInfo> procs;
    auto views = sampleDevices(procs, true);
    for (const auto& v : views) {
      if (only >= 0 && v.id != only) continue;
      uint64_t pct = v.hbm_used * 100 / npuPhysicalDeviceMemory();
      std::printf("%-12d %-12d %-8.1f %-8d %-11d %-10llu %-10llu\n", v.id, 0,
                  powerW(v.aicore_pct), tempC(v.aicore_pct), v.aicore_pct,
                  (unsigned long long)mb(v.hbm_used), (unsigned long long)pct);
    }
    std::fflush(stdout);
    if (count < 0 || i + 1 < count) {
      double rest = delay * 1000 - kSampleMs;
      if (rest > 0) std::this_thread::sleep_for(std::chrono::milliseconds(long(rest)));
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage(nullptr);
  if (std::strcmp(argv[1], "info") != 0) {
    return usage((std::string("unknown command '") + argv[1] + "'").c_str());
  }
  bool is_watch = argc >= 3 && std::strcmp(argv[2], "watch") == 0;
  int only = -1;
  bool list_mode = false;
  double delay = 1.0;
  long count = -1;
  for (int i = is_watch ? 3 : 2; i < argc; ++i) {
    std::string opt = argv[i];
    bool has_value = i + 1 < argc;
    if (opt == "-l" && !is_watch) {
      list_mode = true;
    } else if (opt == "-i" && has_value) {
      if (!parseId(argv[++i], &only)) {
        return usage((std::string("invalid device id '") + argv[i] + "'").c_str());
      }
    } else if (opt == "-d" && is_watch && has_value) {
      delay = std::atof(argv[++i]);
      if (delay < 0.2) return usage("-d takes a number of seconds, at least 0.2");
    } else if (opt == "-n" && is_watch && has_value) {
      count = std::atol(argv[++i]);
      if (count <= 0) return usage("-n takes a positive count");
    } else {
      return usage((std::string("unknown option '") + opt + "'").c_str());
    }
  }
  if (is_watch) return watch(only, delay, count);
  if (list_mode) return list();
  return info(only);
}
