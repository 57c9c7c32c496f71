// The process registry (see include/npu/registry.h).
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "npu/registry.h"
#include "runtime_internal.h"

namespace npu::rt {
namespace {

constexpr uint32_t kMagic = 0x4e505552;  // "NPUR"
constexpr uint32_t kVersion = 1;

// The file layout. Counters are lock-free 64-bit atomics, which are address-free, so the
// writer's stores and the readers' loads through their own mappings are well defined.
struct Record {
  uint32_t magic;
  uint32_t version;
  int32_t pid;
  int32_t device_count;
  uint64_t start_time;  // /proc/<pid>/stat field 22: tells a live pid from a reused one
  char name[64];
  std::atomic<uint64_t> memory[NPU_REGISTRY_MAX_DEVICES];
  std::atomic<uint64_t> busy[NPU_REGISTRY_MAX_DEVICES];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);

Record* g_record = nullptr;
std::string g_record_path;
pid_t g_record_pid = 0;

uint64_t processStartTime(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && (fields >> field); ++i) {
    if (i == 22) return std::strtoull(field.c_str(), nullptr, 10);
  }
  return 0;
}

std::string processName() {
  std::ifstream in("/proc/self/comm");
  std::string name;
  std::getline(in, name);
  return name.empty() ? "unknown" : name;
}

void removeRecord() {
  if (g_record && getpid() == g_record_pid) unlink(g_record_path.c_str());  // not in a fork child
}

bool ensureDir(const std::string& dir) {
  if (mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST) return true;
  return false;
}

}  // namespace

void registryAttach(std::vector<Device*>& devices) {
  std::string dir = npuRegistryDir();
  if (!ensureDir(dir)) return;  // tools will not see us; the runtime works all the same
  g_record_pid = getpid();
  g_record_path = dir + "/proc-" + std::to_string(g_record_pid) + ".reg";
  int fd = open(g_record_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return;
  if (ftruncate(fd, sizeof(Record)) != 0) {
    close(fd);
    unlink(g_record_path.c_str());
    return;
  }
  void* p = mmap(nullptr, sizeof(Record), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    unlink(g_record_path.c_str());
    return;
  }
  auto* rec = static_cast<Record*>(p);
  rec->version = kVersion;
  rec->pid = g_record_pid;
  rec->device_count = config().physical_count;
  rec->start_time = processStartTime(g_record_pid);
  std::snprintf(rec->name, sizeof(rec->name), "%s", processName().c_str());
  for (Device* dev : devices) {
    rec->memory[dev->physical_id].store(dev->used_bytes->load());
    rec->busy[dev->physical_id].store(dev->busy_ns->load());
    dev->used_bytes = &rec->memory[dev->physical_id];
    dev->busy_ns = &rec->busy[dev->physical_id];
  }
  __atomic_store_n(&rec->magic, kMagic, __ATOMIC_RELEASE);  // readers skip half-written files
  g_record = rec;
  std::atexit(removeRecord);
}

}  // namespace npu::rt

using namespace npu::rt;

extern "C" {

const char* npuRegistryDir(void) {
  static const std::string dir = [] {
    if (const char* d = std::getenv("NPU_SIM_RUNTIME_DIR"); d && *d) return std::string(d);
    return "/tmp/simnpu-" + std::to_string(getuid());
  }();
  return dir.c_str();
}

npuError_t npuRegistryList(npuProcessInfo* out, int capacity, int* count) {
  if (!count) return fail(npuErrorInvalidValue, "npuRegistryList: count is NULL");
  if (capacity > 0 && !out) return fail(npuErrorInvalidValue, "npuRegistryList: out is NULL");
  *count = 0;
  std::string dir = npuRegistryDir();
  DIR* d = opendir(dir.c_str());
  if (!d) return npuSuccess;  // nobody has registered yet
  while (dirent* entry = readdir(d)) {
    int pid = 0;
    if (std::sscanf(entry->d_name, "proc-%d.reg", &pid) != 1) continue;
    std::string path = dir + "/" + entry->d_name;
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    void* p = mmap(nullptr, sizeof(Record), PROT_READ, MAP_SHARED, fd, 0);
    struct stat st {};
    bool complete = fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= sizeof(Record);
    close(fd);
    if (p == MAP_FAILED) continue;
    const auto* rec = static_cast<const Record*>(p);
    if (!complete || __atomic_load_n(&rec->magic, __ATOMIC_ACQUIRE) != kMagic) {
      munmap(p, sizeof(Record));
      continue;  // being created right now
    }
    bool alive = (kill(rec->pid, 0) == 0 || errno == EPERM) &&
                 processStartTime(rec->pid) == rec->start_time;
    if (!alive) {
      munmap(p, sizeof(Record));
      unlink(path.c_str());  // left by a process that died without cleaning up (kill -9)
      continue;
    }
    if (*count < capacity) {
      npuProcessInfo& info = out[*count];
      std::memset(&info, 0, sizeof(info));
      info.pid = rec->pid;
      std::snprintf(info.name, sizeof(info.name), "%s", rec->name);
      info.device_count = rec->device_count;
      for (int i = 0; i < NPU_REGISTRY_MAX_DEVICES; ++i) {
        info.memory_bytes[i] = rec->memory[i].load(std::memory_order_relaxed);
        info.busy_ns[i] = rec->busy[i].load(std::memory_order_relaxed);
      }
    }
    ++*count;
    munmap(p, sizeof(Record));
  }
  closedir(d);
  return npuSuccess;
}

}  // extern "C"
