// Device-side activity records (include/npu/profiler.h).
//
// How it works:
//  - g_session is the number of the open session, 0 when none is. A launch reads it once
//    (relaxed): when it is 0 nothing else happens, so profiling off costs one load per launch.
//  - A stamped task carries its session number to the worker. The worker records the task only
//    if that session is still the current one, so a session's tasks that run after
//    npuProfilerStop are still recorded, and stale ones never leak into the next session.
//  - Records go into one process-wide buffer under a mutex: a lock per task only while
//    profiling, and a drain that sees every stream in the order the tasks finished.
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>

#include "npu/profiler.h"
#include "runtime_internal.h"

namespace npu::rt {
namespace {

constexpr size_t kMaxBufferedRecords = size_t{1} << 21;

std::atomic<uint32_t> g_session{0};     // the open session; 0 = none
std::atomic<uint32_t> g_last_session{0};  // the current (open or last closed) session
std::mutex g_buffer_mutex;
std::deque<npuActivityRecord>& buffer() {
  static auto* records = new std::deque<npuActivityRecord>();  // never destroyed: workers may
  return *records;                                            // record during exit
}
uint64_t g_dropped = 0;  // under g_buffer_mutex

thread_local uint64_t t_correlation_id = 0;

// Shadow execution's projected timeline: a session's device activities are placed at the
// session's start plus the simulated time since then, per device (written at the start, before
// the session is visible to launches).
uint64_t g_anchor_host_ns = 0;
uint64_t g_anchor_sim_ns[NPU_MAX_DEVICES] = {};

int32_t systemThreadId() {
  thread_local const auto tid = static_cast<int32_t>(syscall(SYS_gettid));
  return tid;
}

npuActivityKind activityKind(Task::Kind kind) {
  switch (kind) {
    case Task::kCopy:
      return npuActivityMemcpy;
    case Task::kMemset:
      return npuActivityMemset;
    default:
      return npuActivityKernel;
  }
}

}  // namespace

uint64_t profilerSimToHost(int device, uint64_t sim_ns) {
  const uint64_t anchor =
      device >= 0 && device < NPU_MAX_DEVICES ? g_anchor_sim_ns[device] : 0;
  // Work of a stream that lags the device's latest clock may sit just before the anchor.
  return sim_ns >= anchor ? g_anchor_host_ns + (sim_ns - anchor)
                          : g_anchor_host_ns - std::min(g_anchor_host_ns, anchor - sim_ns);
}

void profilerStampLaunch(Task& task) {
  const uint32_t session = g_session.load(std::memory_order_relaxed);
  if (session == 0) return;
  task.prof_session = session;
  task.correlation_id = t_correlation_id;
  task.launch_ns = nowNs();
  task.launch_thread = systemThreadId();
}

bool profilerWants(const Task& task) {
  return task.prof_session != 0 &&
         task.prof_session == g_last_session.load(std::memory_order_relaxed);
}

void profilerRecord(const Task& task, int device, int stream_id, uint64_t start_ns,
                    uint64_t end_ns) {
  npuActivityRecord r{};
  r.correlation_id = task.correlation_id;
  r.launch_ns = task.launch_ns;
  r.start_ns = start_ns;
  r.end_ns = end_ns;
  r.kind = activityKind(task.kind);
  r.bytes = r.kind == npuActivityKernel ? 0 : task.payload[2];
  r.device = device;
  r.stream_id = stream_id;
  r.memcpy_kind = task.kind == Task::kCopy ? task.memcpy_kind : 0;
  r.launch_thread = task.launch_thread;
  static_assert(sizeof(r.name) == sizeof(task.name));
  std::memcpy(r.name, task.name, sizeof(r.name));
  std::lock_guard<std::mutex> lock(g_buffer_mutex);
  if (task.prof_session != g_last_session.load(std::memory_order_relaxed)) return;  // raced a
  auto& records = buffer();                                                          // restart
  if (records.size() >= kMaxBufferedRecords) {
    ++g_dropped;
    return;
  }
  records.push_back(r);
}

}  // namespace npu::rt

using namespace npu::rt;

extern "C" {

npuError_t npuProfilerStart(void) {
  std::lock_guard<std::mutex> lock(g_buffer_mutex);
  if (g_session.load(std::memory_order_relaxed) != 0) {
    return fail(npuErrorNotReady, "npuProfilerStart: a profiling session is already open; stop "
                                  "it first (one profiler at a time)");
  }
  buffer().clear();
  g_dropped = 0;
  if (simClockOn()) {
    for (int i = 0; i < deviceCount() && i < NPU_MAX_DEVICES; ++i) {
      Device* dev = device(i);
      g_anchor_sim_ns[i] = dev ? deviceSimNs(dev) : 0;
    }
    g_anchor_host_ns = nowNs();
  }
  const uint32_t session = g_last_session.load(std::memory_order_relaxed) + 1;
  g_last_session.store(session, std::memory_order_relaxed);
  g_session.store(session, std::memory_order_release);
  return npuSuccess;
}

npuError_t npuProfilerStop(void) {
  if (g_session.exchange(0, std::memory_order_acq_rel) == 0) return npuSuccess;
  // Tasks of the session still queued are recorded when they run: wait for them, leaving any
  // stream error for the user's own synchronize to report.
  for (int i = 0; i < deviceCount(); ++i) {
    if (Device* dev = device(i)) waitDeviceIdle(dev);
  }
  return npuSuccess;
}

int npuProfilerIsActive(void) { return g_session.load(std::memory_order_relaxed) != 0; }

uint64_t npuProfilerSetCorrelationId(uint64_t id) {
  const uint64_t previous = t_correlation_id;
  t_correlation_id = id;
  return previous;
}

uint64_t npuProfilerGetCorrelationId(void) { return t_correlation_id; }

size_t npuProfilerDrain(npuActivityRecord* out, size_t capacity) {
  if (!out || capacity == 0) return 0;
  std::lock_guard<std::mutex> lock(g_buffer_mutex);
  auto& records = buffer();
  const size_t n = std::min(capacity, records.size());
  std::copy(records.begin(), records.begin() + static_cast<std::ptrdiff_t>(n), out);
  records.erase(records.begin(), records.begin() + static_cast<std::ptrdiff_t>(n));
  return n;
}

uint64_t npuProfilerDroppedRecords(void) {
  std::lock_guard<std::mutex> lock(g_buffer_mutex);
  return g_dropped;
}

uint64_t npuProfilerClockNs(void) { return nowNs(); }

}  // extern "C"
