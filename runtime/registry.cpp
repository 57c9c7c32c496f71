// The process registry (see include/npu/registry.h).
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <ctime>
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
constexpr uint32_t kVersion = 2;  // 2: health
constexpr uint64_t kMaxBytes = uint64_t{1} << 50;  // NPU_SIM_HBM_GB's limit: 1 PiB per device
constexpr time_t kCreationGraceSeconds = 5;        // a record younger than this may be half-made

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
  std::atomic<uint64_t> health[NPU_REGISTRY_MAX_DEVICES];  // npuDeviceHealth
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t));

// What readers copy out of a file (with pread: a file truncated under a reader gives a short
// read, never a SIGBUS as a mapping would).
struct RecordCopy {
  uint32_t magic;
  uint32_t version;
  int32_t pid;
  int32_t device_count;
  uint64_t start_time;
  char name[64];
  uint64_t memory[NPU_REGISTRY_MAX_DEVICES];
  uint64_t busy[NPU_REGISTRY_MAX_DEVICES];
  uint64_t health[NPU_REGISTRY_MAX_DEVICES];
};
static_assert(sizeof(RecordCopy) == sizeof(Record));
static_assert(offsetof(RecordCopy, memory) == offsetof(Record, memory));
static_assert(offsetof(RecordCopy, busy) == offsetof(Record, busy));
static_assert(offsetof(RecordCopy, health) == offsetof(Record, health));

Record* g_record = nullptr;
std::string g_record_path;
pid_t g_record_pid = 0;

thread_local std::string t_list_notes;  // npuRegistryListNotes

uint64_t processStartTime(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 > text.size()) return 0;
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

// One warning per process: the runtime works unregistered, only tools cannot see it.
void warnUnregistered(const std::string& dir, const std::string& why) {
  static std::atomic<bool> warned{false};
  if (warned.exchange(true)) return;
  const char* set = std::getenv("NPU_SIM_RUNTIME_DIR");
  std::string which = set && *set ? "NPU_SIM_RUNTIME_DIR='" + dir + "'"
                                  : "the runtime directory '" + dir +
                                        "' (the default; NPU_SIM_RUNTIME_DIR is unset)";
  std::fprintf(stderr,
               "SimNPU warning: %s is unusable: %s. This process runs unregistered: npu-smi "
               "will not list it. Fix: set NPU_SIM_RUNTIME_DIR to a writable directory on a "
               "file system with free space.\n",
               which.c_str(), why.c_str());
}

std::string errnoText(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// Creates `dir` (0700) if needed; "" when usable, else why not.
std::string prepareDir(const std::string& dir) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return errnoText("cannot create it");
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) return errnoText("cannot stat it");
  if (!S_ISDIR(st.st_mode)) return "it is not a directory";
  if (access(dir.c_str(), W_OK | X_OK) != 0) return errnoText("cannot write into it");
  return "";
}

// Why a reader skips a record it cannot trust ("" when it is sound).
std::string validate(const RecordCopy& rec, int file_pid) {
  if (rec.version != kVersion) {
    return "version " + std::to_string(rec.version) + ", expected " + std::to_string(kVersion);
  }
  if (rec.pid <= 0 || rec.pid != file_pid) {
    return "pid " + std::to_string(rec.pid) + " (must be positive and match the file name)";
  }
  if (rec.device_count < 1 || rec.device_count > NPU_REGISTRY_MAX_DEVICES) {
    return "device count " + std::to_string(rec.device_count) + " is outside 1.." +
           std::to_string(NPU_REGISTRY_MAX_DEVICES);
  }
  if (std::memchr(rec.name, '\0', sizeof(rec.name)) == nullptr) return "unterminated name";
  for (int i = 0; i < NPU_REGISTRY_MAX_DEVICES; ++i) {
    if (rec.memory[i] > kMaxBytes) {
      return "memory of device " + std::to_string(i) + " is " + std::to_string(rec.memory[i]) +
             " bytes, more than any device has";
    }
  }
  return "";
}

bool pidAlive(pid_t pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

}  // namespace

void registryAttach(std::vector<Device*>& devices) {
  std::string dir = npuRegistryDir();
  if (std::string why = prepareDir(dir); !why.empty()) {
    warnUnregistered(dir, why);
    return;
  }
  g_record_pid = getpid();
  g_record_path = dir + "/proc-" + std::to_string(g_record_pid) + ".reg";
  // A file of the same name is left by an earlier process with our pid (killed): replace it,
  // and never follow a link or open a FIFO planted there.
  unlink(g_record_path.c_str());
  int fd = open(g_record_path.c_str(),
                O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
  if (fd < 0) {
    warnUnregistered(dir, errnoText(("cannot create " + g_record_path).c_str()));
    return;
  }
  // Reserve the blocks now: a sparse file on a full tmpfs would kill us with SIGBUS at the
  // first counter update through the mapping.
  if (int err = posix_fallocate(fd, 0, sizeof(Record)); err != 0) {
    close(fd);
    unlink(g_record_path.c_str());
    errno = err;
    warnUnregistered(dir, errnoText(("cannot reserve " + std::to_string(sizeof(Record)) +
                                     " bytes for " + g_record_path)
                                        .c_str()));
    return;
  }
  void* p = mmap(nullptr, sizeof(Record), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    unlink(g_record_path.c_str());
    warnUnregistered(dir, errnoText(("cannot map " + g_record_path).c_str()));
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
    rec->health[dev->physical_id].store(static_cast<uint64_t>(dev->health.load()));
    dev->health_mirror.store(&rec->health[dev->physical_id]);
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
  t_list_notes.clear();
  if (!count) return fail(npuErrorInvalidValue, "npuRegistryList: count is NULL");
  if (capacity > 0 && !out) return fail(npuErrorInvalidValue, "npuRegistryList: out is NULL");
  *count = 0;
  std::string dir = npuRegistryDir();
  DIR* d = opendir(dir.c_str());
  if (!d) return npuSuccess;  // nobody has registered yet
  auto note = [](const std::string& path, const std::string& why) {
    t_list_notes += "skipped " + path + ": " + why + "\n";
  };
  while (dirent* entry = readdir(d)) {
    int pid = 0;
    char tail = 0;
    if (std::sscanf(entry->d_name, "proc-%d.re%c", &pid, &tail) != 2 || tail != 'g' ||
        std::string(entry->d_name) != "proc-" + std::to_string(pid) + ".reg") {
      continue;
    }
    std::string path = dir + "/" + entry->d_name;
    // Non-blocking and no links: a FIFO or a device planted under a record's name must not
    // hang us, nor a link send us elsewhere.
    int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      note(path, errno == ELOOP ? std::string("a symbolic link, not a record")
                                : errnoText("cannot open it"));
      continue;
    }
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      close(fd);
      note(path, "not a regular file");
      continue;
    }
    const bool young = time(nullptr) - st.st_mtime < kCreationGraceSeconds;
    alignas(8) RecordCopy rec;
    const ssize_t got = st.st_size == static_cast<off_t>(sizeof(Record))
                            ? pread(fd, &rec, sizeof(rec), 0)
                            : -1;
    // A record written by another SimNPU version (its size differs with the layout) is named
    // as such, not taken for a half-made one: both installs may run side by side.
    uint32_t header[2] = {0, 0};
    if (got < 0 && st.st_size >= static_cast<off_t>(sizeof(header)) &&
        pread(fd, header, sizeof(header), 0) == static_cast<ssize_t>(sizeof(header)) &&
        header[0] == kMagic && header[1] != kVersion) {
      close(fd);
      note(path, "version " + std::to_string(header[1]) + ", expected " +
                     std::to_string(kVersion) + " (written by another SimNPU version)");
      continue;
    }
    close(fd);
    const bool complete = got == static_cast<ssize_t>(sizeof(rec)) && rec.magic == kMagic;
    if (!complete) {
      if (young) continue;  // being created right now
      if (pid > 0 && !pidAlive(pid)) {
        unlink(path.c_str());  // a dead process's half-made record
        continue;
      }
      note(path, "not a complete record (" + std::to_string(st.st_size) + " bytes, a record is " +
                     std::to_string(sizeof(Record)) + ")");
      continue;
    }
    if (std::string why = validate(rec, pid); !why.empty()) {
      note(path, why);
      continue;
    }
    bool alive = pidAlive(rec.pid) && processStartTime(rec.pid) == rec.start_time;
    if (!alive) {
      unlink(path.c_str());  // left by a process that died without cleaning up (kill -9)
      continue;
    }
    if (*count < capacity) {
      npuProcessInfo& info = out[*count];
      std::memset(&info, 0, sizeof(info));
      info.pid = rec.pid;
      std::snprintf(info.name, sizeof(info.name), "%s", rec.name);
      info.device_count = rec.device_count;
      for (int i = 0; i < NPU_REGISTRY_MAX_DEVICES; ++i) {
        info.memory_bytes[i] = rec.memory[i];
        info.busy_ns[i] = rec.busy[i];
        info.health[i] = static_cast<int>(rec.health[i]);
      }
    }
    ++*count;
  }
  closedir(d);
  return npuSuccess;
}

const char* npuRegistryListNotes(void) { return t_list_notes.c_str(); }

}  // extern "C"
