// Device memory, pinned host memory, virtual memory and copies.
//
// Device memory is anonymous host memory mapped with MAP_NORESERVE: pages are committed when
// first touched and given back to the OS by munmap / madvise. What makes it "device" memory is
// the table below: every allocation is registered with its device and size, capacity is
// accounted exactly, and copies validate their pointers against the table, so a bad pointer is
// an error code instead of a crash.
#include <sys/mman.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <shared_mutex>

#include "npu/log.h"
#include "runtime_internal.h"

namespace npu::rt {
namespace {

constexpr size_t kGranularity = 2u << 20;  // virtual-memory map granularity

struct Allocation {
  enum Type { kDevice, kHost, kReserved } type = kDevice;
  Device* dev = nullptr;
  size_t size = 0;
  size_t mapped_bytes = 0;
  std::vector<bool> mapped_pages;  // kReserved: which granules are mapped
};

std::shared_mutex g_table_mutex;
std::map<uintptr_t, Allocation>& table() {
  static auto* t = new std::map<uintptr_t, Allocation>();  // never destroyed (see device.cpp)
  return *t;
}

size_t pageRound(size_t n) {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
}

// The allocation containing p, or end(). Caller holds the table lock.
std::map<uintptr_t, Allocation>::iterator findContaining(const void* p) {
  auto& t = table();
  auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = t.upper_bound(addr);
  if (it == t.begin()) return t.end();
  --it;
  if (addr >= it->first + it->second.size) return t.end();
  return it;
}

// What a copy or memset endpoint is.
struct Endpoint {
  bool is_device = false;
  int device = -1;
};

// Classifies [p, p+count) and validates it when it lies in device memory.
npuError_t classify(const char* api, const char* arg, const void* p, size_t count, Endpoint* out) {
  std::shared_lock lock(g_table_mutex);
  auto it = findContaining(p);
  if (it == table().end() || it->second.type == Allocation::kHost) {
    out->is_device = false;
    return npuSuccess;
  }
  const Allocation& a = it->second;
  uintptr_t offset = reinterpret_cast<uintptr_t>(p) - it->first;
  if (count > a.size - offset) {
    return fail(npuErrorInvalidValue,
                std::string(api) + ": " + arg + " " + hex(p) + " + " + std::to_string(count) +
                    " bytes runs past the end of its device allocation (base " +
                    hex(reinterpret_cast<void*>(it->first)) + ", " + std::to_string(a.size) +
                    " bytes)");
  }
  if (a.type == Allocation::kReserved) {
    for (size_t g = offset / kGranularity; g <= (offset + count - 1) / kGranularity; ++g) {
      if (!a.mapped_pages[g]) {
        return fail(npuErrorInvalidDevicePointer,
                    std::string(api) + ": " + arg + " " + hex(p) +
                        " touches reserved virtual memory that is not mapped (npuMemMap it first)");
      }
    }
  }
  out->is_device = true;
  out->device = a.dev->index;
  return npuSuccess;
}

const char* kindName(npuMemcpyKind kind) {
  switch (kind) {
    case npuMemcpyHostToHost: return "npuMemcpyHostToHost";
    case npuMemcpyHostToDevice: return "npuMemcpyHostToDevice";
    case npuMemcpyDeviceToHost: return "npuMemcpyDeviceToHost";
    case npuMemcpyDeviceToDevice: return "npuMemcpyDeviceToDevice";
    case npuMemcpyDefault: return "npuMemcpyDefault";
  }
  return "?";
}

npuError_t checkSide(const char* api, const char* arg, const void* p, const Endpoint& e,
                     bool want_device, npuMemcpyKind kind) {
  if (e.is_device == want_device) return npuSuccess;
  std::string what = e.is_device ? "device memory of NPU " + std::to_string(e.device)
                                 : std::string("host memory");
  return fail(npuErrorInvalidMemcpyDirection, std::string(api) + ": " + arg + " " + hex(p) +
                                                  " is " + what + " but kind is " +
                                                  kindName(kind));
}

// Validates a copy and fills the task; the copy itself runs on a stream.
npuError_t prepareCopy(const char* api, void* dst, const void* src, size_t count,
                       npuMemcpyKind kind, Task* task) {
  if (count > 0 && (!dst || !src)) {
    return fail(npuErrorInvalidValue, std::string(api) + ": " + (!dst ? "dst" : "src") +
                                          " is NULL for a copy of " + std::to_string(count) +
                                          " bytes");
  }
  if (kind < npuMemcpyHostToHost || kind > npuMemcpyDefault) {
    return fail(npuErrorInvalidMemcpyDirection,
                std::string(api) + ": kind " + std::to_string(static_cast<int>(kind)) +
                    " is not an npuMemcpyKind");
  }
  Endpoint d, s;
  if (count > 0) {
    if (npuError_t e = classify(api, "dst", dst, count, &d)) return e;
    if (npuError_t e = classify(api, "src", src, count, &s)) return e;
  }
  if (kind != npuMemcpyDefault && count > 0) {
    bool want_dst = kind == npuMemcpyHostToDevice || kind == npuMemcpyDeviceToDevice;
    bool want_src = kind == npuMemcpyDeviceToHost || kind == npuMemcpyDeviceToDevice;
    if (npuError_t e = checkSide(api, "dst", dst, d, want_dst, kind)) return e;
    if (npuError_t e = checkSide(api, "src", src, s, want_src, kind)) return e;
  }
  std::snprintf(task->name, sizeof(task->name), "%s", "memcpy");
  task->kind = Task::kCopy;
  if (kind == npuMemcpyDefault) {  // the profiler reports the direction the pointers imply
    kind = static_cast<npuMemcpyKind>(
        d.is_device ? (s.is_device ? npuMemcpyDeviceToDevice : npuMemcpyHostToDevice)
                    : (s.is_device ? npuMemcpyDeviceToHost : npuMemcpyHostToHost));
  }
  task->memcpy_kind = static_cast<int8_t>(kind);
  task->payload[0] = reinterpret_cast<uintptr_t>(dst);
  task->payload[1] = reinterpret_cast<uintptr_t>(src);
  task->payload[2] = count;
  return npuSuccess;
}

npuError_t prepareMemset(const char* api, void* ptr, int value, size_t count, Task* task) {
  if (count == 0) return npuSuccess;
  if (!ptr) return fail(npuErrorInvalidValue, std::string(api) + ": ptr is NULL");
  Endpoint e;
  if (npuError_t err = classify(api, "ptr", ptr, count, &e)) return err;
  if (!e.is_device) {
    return fail(npuErrorInvalidDevicePointer,
                std::string(api) + ": ptr " + hex(ptr) + " is not device memory");
  }
  std::snprintf(task->name, sizeof(task->name), "%s", "memset");
  task->kind = Task::kMemset;
  task->payload[0] = reinterpret_cast<uintptr_t>(ptr);
  task->payload[1] = static_cast<unsigned char>(value);
  task->payload[2] = count;
  return npuSuccess;
}

void* mapAnonymous(size_t bytes, int prot) {
  void* p = mmap(nullptr, pageRound(bytes), prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) return nullptr;
  // HBM is accessed in large pages; so is our stand-in where the kernel allows it (THP in
  // "madvise" mode): kernels streaming through megabytes of it take far fewer TLB misses.
  if (bytes >= (size_t{2} << 20)) madvise(p, pageRound(bytes), MADV_HUGEPAGE);
  return p;
}

}  // namespace

bool commitCapacity(Device* dev, size_t bytes) {
  uint64_t used = dev->used_bytes->load(std::memory_order_relaxed);
  do {
    if (bytes > dev->capacity - used) {
      fail(npuErrorMemoryAllocation,
           "NPU " + std::to_string(dev->index) + " is out of memory: requested " +
               std::to_string(bytes) + " bytes, " + std::to_string(dev->capacity - used) +
               " of " + std::to_string(dev->capacity) + " bytes free");
      return false;
    }
  } while (!dev->used_bytes->compare_exchange_weak(used, used + bytes));
  return true;
}

void releaseCapacity(Device* dev, size_t bytes) { dev->used_bytes->fetch_sub(bytes); }

}  // namespace npu::rt

using namespace npu::rt;

extern "C" {

npuError_t npuMalloc(void** ptr, size_t size) {
  if (!ptr) return fail(npuErrorInvalidValue, "npuMalloc: ptr is NULL");
  *ptr = nullptr;
  Device* dev = nullptr;
  if (npuError_t e = currentDevice(&dev)) return e;
  if (size == 0) return npuSuccess;
  if (!commitCapacity(dev, size)) return npuErrorMemoryAllocation;
  void* p = mapAnonymous(size, PROT_READ | PROT_WRITE);
  if (!p) {
    releaseCapacity(dev, size);
    return fail(npuErrorMemoryAllocation, "npuMalloc: the host could not map " +
                                              std::to_string(size) + " bytes of address space");
  }
  {
    std::unique_lock lock(g_table_mutex);
    table()[reinterpret_cast<uintptr_t>(p)] = Allocation{Allocation::kDevice, dev, size, size, {}};
  }
  NPU_LOG(NPU_LOG_INFO, "RUNTIME", "device %d: %zu bytes at %p", dev->index, size, p);
  *ptr = p;
  return npuSuccess;
}

npuError_t npuFree(void* ptr) {
  if (!ptr) return npuSuccess;
  Allocation a;
  {
    std::unique_lock lock(g_table_mutex);
    auto it = table().find(reinterpret_cast<uintptr_t>(ptr));
    if (it == table().end() || it->second.type != Allocation::kDevice) {
      auto inside = findContaining(ptr);
      if (it != table().end() && it->second.type == Allocation::kHost) {
        return fail(npuErrorInvalidDevicePointer,
                    "npuFree: " + hex(ptr) + " is pinned host memory; free it with npuFreeHost");
      }
      if (inside != table().end()) {
        return fail(npuErrorInvalidDevicePointer,
                    "npuFree: " + hex(ptr) + " points inside an allocation at " +
                        hex(reinterpret_cast<void*>(inside->first)) +
                        "; pass the pointer npuMalloc returned");
      }
      return fail(npuErrorInvalidDevicePointer,
                  "npuFree: " + hex(ptr) +
                      " is not device memory from npuMalloc (or was already freed)");
    }
    a = std::move(it->second);
    table().erase(it);
  }
  // As cudaFree, wait for queued work first: a task must never touch unmapped memory.
  waitDeviceIdle(a.dev);
  if (sanOn()) sanForget(ptr, a.size);
  munmap(ptr, pageRound(a.size));
  releaseCapacity(a.dev, a.size);
  NPU_LOG(NPU_LOG_INFO, "RUNTIME", "device %d: freed %zu bytes at %p", a.dev->index, a.size, ptr);
  return npuSuccess;
}

npuError_t npuMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  Device* dev = nullptr;
  if (npuError_t e = currentDevice(&dev)) return e;
  size_t used = dev->used_bytes->load();
  if (free_bytes) *free_bytes = dev->capacity - used;
  if (total_bytes) *total_bytes = dev->capacity;
  return npuSuccess;
}

npuError_t npuMallocHost(void** ptr, size_t size) {
  if (!ptr) return fail(npuErrorInvalidValue, "npuMallocHost: ptr is NULL");
  *ptr = nullptr;
  if (npuError_t e = checkUsable()) return e;
  if (size == 0) return npuSuccess;
  void* p = mapAnonymous(size, PROT_READ | PROT_WRITE);
  if (!p) {
    return fail(npuErrorMemoryAllocation,
                "npuMallocHost: could not allocate " + std::to_string(size) + " bytes");
  }
  std::unique_lock lock(g_table_mutex);
  table()[reinterpret_cast<uintptr_t>(p)] = Allocation{Allocation::kHost, nullptr, size, 0, {}};
  *ptr = p;
  return npuSuccess;
}

npuError_t npuFreeHost(void* ptr) {
  if (!ptr) return npuSuccess;
  size_t size = 0;
  {
    std::unique_lock lock(g_table_mutex);
    auto it = table().find(reinterpret_cast<uintptr_t>(ptr));
    if (it == table().end() || it->second.type != Allocation::kHost) {
      return fail(npuErrorInvalidValue, "npuFreeHost: " + hex(ptr) +
                                            " is not pinned memory from npuMallocHost (or was "
                                            "already freed)");
    }
    size = it->second.size;
    table().erase(it);
  }
  if (sanOn()) sanForget(ptr, size);
  munmap(ptr, pageRound(size));
  return npuSuccess;
}

npuError_t npuPointerGetAttributes(npuPointerAttributes* attr, const void* ptr) {
  if (!attr) return fail(npuErrorInvalidValue, "npuPointerGetAttributes: attr is NULL");
  *attr = npuPointerAttributes{npuMemoryTypeUnregistered, -1, nullptr, 0};
  std::shared_lock lock(g_table_mutex);
  auto it = findContaining(ptr);
  if (it == table().end()) return npuSuccess;
  const Allocation& a = it->second;
  attr->type = a.type == Allocation::kHost ? npuMemoryTypeHost : npuMemoryTypeDevice;
  attr->device = a.dev ? a.dev->index : -1;
  attr->base = reinterpret_cast<void*>(it->first);
  attr->size = a.size;
  return npuSuccess;
}

size_t npuMemGetGranularity(void) { return kGranularity; }

npuError_t npuMemAddressReserve(void** ptr, size_t size) {
  if (!ptr) return fail(npuErrorInvalidValue, "npuMemAddressReserve: ptr is NULL");
  *ptr = nullptr;
  Device* dev = nullptr;
  if (npuError_t e = currentDevice(&dev)) return e;
  if (size == 0 || size % kGranularity != 0) {
    return fail(npuErrorInvalidValue, "npuMemAddressReserve: size " + std::to_string(size) +
                                          " is not a positive multiple of the granularity (" +
                                          std::to_string(kGranularity) + " bytes)");
  }
  void* p = mapAnonymous(size, PROT_NONE);
  if (!p) return fail(npuErrorMemoryAllocation, "npuMemAddressReserve: no address space left");
  std::unique_lock lock(g_table_mutex);
  Allocation a{Allocation::kReserved, dev, size, 0, std::vector<bool>(size / kGranularity)};
  table()[reinterpret_cast<uintptr_t>(p)] = std::move(a);
  *ptr = p;
  return npuSuccess;
}

// Finds the reservation holding [ptr, ptr+size), checks alignment, returns first granule.
static npuError_t findReservation(const char* api, void* ptr, size_t size, Allocation** out,
                                  size_t* first) {
  auto it = findContaining(ptr);
  if (it == table().end() || it->second.type != Allocation::kReserved) {
    return fail(npuErrorInvalidValue,
                std::string(api) + ": " + hex(ptr) + " is not in a range from npuMemAddressReserve");
  }
  size_t offset = reinterpret_cast<uintptr_t>(ptr) - it->first;
  if (offset % kGranularity || size == 0 || size % kGranularity ||
      size > it->second.size - offset) {
    return fail(npuErrorInvalidValue, std::string(api) + ": offset " + std::to_string(offset) +
                                          " and size " + std::to_string(size) +
                                          " must be multiples of the granularity (" +
                                          std::to_string(kGranularity) +
                                          ") inside the reservation");
  }
  *out = &it->second;
  *first = offset / kGranularity;
  return npuSuccess;
}

npuError_t npuMemMap(void* ptr, size_t size) {
  if (npuError_t e = checkUsable()) return e;
  std::unique_lock lock(g_table_mutex);
  Allocation* a = nullptr;
  size_t first = 0;
  if (npuError_t e = findReservation("npuMemMap", ptr, size, &a, &first)) return e;
  size_t n = size / kGranularity;
  for (size_t g = first; g < first + n; ++g) {
    if (a->mapped_pages[g]) {
      return fail(npuErrorInvalidValue, "npuMemMap: " + hex(ptr) + " is already mapped");
    }
  }
  if (!commitCapacity(a->dev, size)) return npuErrorMemoryAllocation;
  if (mprotect(ptr, size, PROT_READ | PROT_WRITE) != 0) {
    releaseCapacity(a->dev, size);
    return fail(npuErrorMemoryAllocation, "npuMemMap: the host refused to map the range");
  }
  for (size_t g = first; g < first + n; ++g) a->mapped_pages[g] = true;
  a->mapped_bytes += size;
  return npuSuccess;
}

npuError_t npuMemUnmap(void* ptr, size_t size) {
  if (npuError_t e = checkUsable()) return e;
  Device* dev = nullptr;
  {
    std::shared_lock lock(g_table_mutex);
    Allocation* a = nullptr;
    size_t first = 0;
    if (npuError_t e = findReservation("npuMemUnmap", ptr, size, &a, &first)) return e;
    for (size_t g = first; g < first + size / kGranularity; ++g) {
      if (!a->mapped_pages[g]) {
        return fail(npuErrorInvalidValue, "npuMemUnmap: part of " + hex(ptr) + " is not mapped");
      }
    }
    dev = a->dev;
  }
  waitDeviceIdle(dev);
  std::unique_lock lock(g_table_mutex);
  Allocation* a = nullptr;
  size_t first = 0;
  if (npuError_t e = findReservation("npuMemUnmap", ptr, size, &a, &first)) return e;
  if (sanOn()) sanForget(ptr, size);
  madvise(ptr, size, MADV_DONTNEED);  // give the pages back to the OS
  mprotect(ptr, size, PROT_NONE);
  for (size_t g = first; g < first + size / kGranularity; ++g) a->mapped_pages[g] = false;
  a->mapped_bytes -= size;
  releaseCapacity(a->dev, size);
  return npuSuccess;
}

npuError_t npuMemAddressFree(void* ptr) {
  if (!ptr) return npuSuccess;
  Allocation a;
  {
    std::unique_lock lock(g_table_mutex);
    auto it = table().find(reinterpret_cast<uintptr_t>(ptr));
    if (it == table().end() || it->second.type != Allocation::kReserved) {
      return fail(npuErrorInvalidValue, "npuMemAddressFree: " + hex(ptr) +
                                            " is not a range from npuMemAddressReserve");
    }
    a = std::move(it->second);
    table().erase(it);
  }
  waitDeviceIdle(a.dev);
  if (sanOn()) sanForget(ptr, a.size);
  munmap(ptr, a.size);
  releaseCapacity(a.dev, a.mapped_bytes);
  return npuSuccess;
}

npuError_t npuMemcpyAsync(void* dst, const void* src, size_t count, npuMemcpyKind kind,
                          npuStream_t stream) {
  npuStream_st* s = nullptr;
  if (npuError_t e = resolveStream(stream, &s)) return e;
  Task task;
  if (npuError_t e = prepareCopy("npuMemcpyAsync", dst, src, count, kind, &task)) return e;
  if (count == 0) return npuSuccess;
  if (sanOn()) {  // in a capture, the engine keeps them for the graph's replays
    npuSanAccess(s, src, count, 0, sanCurrentTag());
    npuSanAccess(s, dst, count, 1, sanCurrentTag());
  }
  return enqueue(s, task);
}

npuError_t npuMemcpy(void* dst, const void* src, size_t count, npuMemcpyKind kind) {
  npuStream_st* s = nullptr;
  if (npuError_t e = resolveStream(nullptr, &s)) return e;
  Task task;
  if (npuError_t e = prepareCopy("npuMemcpy", dst, src, count, kind, &task)) return e;
  if (count == 0) return npuSuccess;
  return enqueueAndWait("npuMemcpy", s, task);  // ordered after earlier work on the default stream
}

npuError_t npuMemsetAsync(void* ptr, int value, size_t count, npuStream_t stream) {
  npuStream_st* s = nullptr;
  if (npuError_t e = resolveStream(stream, &s)) return e;
  Task task;
  if (npuError_t e = prepareMemset("npuMemsetAsync", ptr, value, count, &task)) return e;
  if (count == 0) return npuSuccess;
  if (sanOn()) {  // in a capture, the engine keeps them for the graph's replays
    npuSanAccess(s, ptr, count, 1, sanCurrentTag());
  }
  return enqueue(s, task);
}

npuError_t npuSimScrubAsync(void* ptr, size_t count, npuStream_t stream) {
  if (!config().shadow) return npuSuccess;
  npuStream_st* s = nullptr;
  if (npuError_t e = resolveStream(stream, &s)) return e;
  Task task;
  if (npuError_t e = prepareMemset("npuSimScrubAsync", ptr, 0, count, &task)) return e;
  if (count == 0) return npuSuccess;
  task.untimed = true;
  return enqueueShort(s, task);
}

npuError_t npuMemset(void* ptr, int value, size_t count) {
  npuStream_st* s = nullptr;
  if (npuError_t e = resolveStream(nullptr, &s)) return e;
  Task task;
  if (npuError_t e = prepareMemset("npuMemset", ptr, value, count, &task)) return e;
  if (count == 0) return npuSuccess;
  return enqueueAndWait("npuMemset", s, task);
}

}  // extern "C"
