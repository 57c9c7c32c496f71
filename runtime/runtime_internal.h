// Internal structures shared by the runtime's translation units. Not installed.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sched.h>

#include "npu/runtime.h"

// Opaque handle types of the C API are these structs.
struct npuStream_st;
struct npuEvent_st;

namespace npu::rt {

// ---- configuration (environment, read once) --------------------------------------------------
// One fault of the NPU_SIM_FAULTS plan (npu/runtime.h gives the grammar).
struct FaultSpec {
  std::string text;  // as written
  npuSimFaultKind kind = npuSimFaultNone;
  npuSimFaultTrigger trigger = npuSimOnLaunch;
  uint64_t at = 0;   // the count, or seconds for time=
  int rank = -1, device = -1, peer = -1;
  int restart = 0;   // the torchrun attempt it belongs to (TORCHELASTIC_RESTART_COUNT)
  bool hang = false;
  double factor = 2.0;
  std::string target;
};
// Parses `plan`; on error returns false with *why naming the bad part. Keeps the faults whose
// rank= matches `rank` (-1: RANK unset, keeps every fault).
bool parseFaultPlan(const char* plan, int rank, std::vector<FaultSpec>* out, std::string* why);
int faultPlanRank();  // RANK, or -1 when unset
struct Device;
// npuSuccess on a healthy device; otherwise the error its health gives (message set).
npuError_t deviceFault(Device* dev);

struct Config {
  int physical_count = 8;           // NPU_SIM_DEVICE_COUNT
  size_t hbm_bytes = 64ull << 30;   // NPU_SIM_HBM_GB
  std::vector<int> visible;         // logical index -> physical id (ASCEND_RT_VISIBLE_DEVICES)
  std::string visible_warning;      // non-empty when ASCEND_RT_VISIBLE_DEVICES was rejected
  std::string init_error;           // non-empty when the simulator's own variables are bad
  bool launch_blocking = false;     // ASCEND_LAUNCH_BLOCKING=1
  size_t max_pending = 1024;        // NPU_SIM_MAX_PENDING_LAUNCHES: queued tasks per stream
  bool inline_tasks = true;         // NPU_SIM_INLINE_TASKS: short tasks may run on the caller
  npuSchedule schedule = npuScheduleNormal;  // NPU_SIM_SCHEDULE (schedule.cpp)
  uint64_t schedule_seed = 0;                // chaos: the seed of the delays
  bool shadow = false;              // NPU_SIM_SHADOW=1: shadow execution (see runtime.h)
  std::vector<FaultSpec> faults;    // NPU_SIM_FAULTS, this process's part (faults.cpp)
};
const Config& config();

// "0x7f..." for messages that name a pointer or handle.
std::string hex(const void* p);

// ---- errors ----------------------------------------------------------------------------------
// Records `error` with `message` as this thread's last error and returns it, so call sites read
// `return fail(npuErrorInvalidValue, "...")`.
npuError_t fail(npuError_t error, std::string message);
// A failure that happened inside a task: kept for npuGetLastError of any thread.
void setAsyncError(npuError_t error, const std::string& message);

// ---- devices ---------------------------------------------------------------------------------
struct Device {
  int index = 0;        // logical, after ASCEND_RT_VISIBLE_DEVICES
  int physical_id = 0;
  size_t capacity = 0;  // bytes of HBM
  // Committed device memory in bytes, and stream busy time; both point into this process's
  // registry record (so npu-smi reads them live) or into local storage if there is none.
  std::atomic<uint64_t>* used_bytes = &local_used_bytes;
  std::atomic<uint64_t>* busy_ns = &local_busy_ns;
  std::atomic<uint64_t> local_used_bytes{0};
  std::atomic<uint64_t> local_busy_ns{0};
  // Shadow execution's simulated clock: when the device's compute units are next free. Ops
  // charged on different streams share them (one at a time); copies and collectives, which
  // other engines move, do not.
  std::atomic<uint64_t> sim_compute_free_ns{0};

  std::mutex streams_mutex;
  npuStream_st* default_stream = nullptr;  // created on first use
  std::atomic<int> next_stream_id{1};      // npuStreamGetId of the next non-default stream
  std::vector<npuStream_st*> streams;      // every live stream of the device, default included

  // Faults (faults.cpp): npuDeviceHealth, why, and what they left behind. `health` is read on
  // every launch; the rest under fault_mutex.
  std::atomic<int> health{npuDeviceHealthy};
  std::atomic<std::atomic<uint64_t>*> health_mirror{nullptr};  // the registry's copy (npu-smi)
  std::atomic<double> slow_factor{1.0};  // straggler: kernels take this many times as long
  std::mutex fault_mutex;
  std::string fault_message;              // the error text of the current health
  std::vector<npuMemUceInfo> uce;         // recorded memory errors, until repaired

  std::mutex util_mutex;  // utilization sampling
  uint64_t util_last_wall_ns = 0;
  uint64_t util_last_busy_ns = 0;
  int util_last_percent = 0;
};

// Devices visible to this process; nullptr for an invalid index. Initialises lazily.
Device* device(int index);
int deviceCount();
// The calling thread's current device, validated; sets the last error when there is none.
npuError_t currentDevice(Device** out);
// The error for a bad device index: names the index and the valid range (or why none is).
npuError_t invalidDevice(int index);
uint64_t nowNs();  // steady clock

// Checks that the simulator may be used in this process (not a child forked after use).
npuError_t checkUsable();

// ---- memory ----------------------------------------------------------------------------------
// Reserves `bytes` of device capacity; false (and the last error set) if it doesn't fit.
bool commitCapacity(Device* dev, size_t bytes);
void releaseCapacity(Device* dev, size_t bytes);

// ---- the schedule (schedule.cpp) ---------------------------------------------------------------
// Parses NPU_SIM_SCHEDULE into cfg (a bad value sets cfg->init_error); chaos turns off the
// runtime's shortcuts that run work on the launching thread.
void parseSchedule(Config* cfg);
// Prints the chaos seed (once, when the configuration is fixed).
void announceChaos(uint64_t seed);
// Scheduling points of the runtime itself; each waits only under chaos.
enum ScheduleSite : uint32_t { kSiteTask = 1, kSiteCollective = 2 };
void schedulePoint(uint32_t site, uint64_t key);
inline bool chaos() { return config().schedule == npuScheduleChaos; }

// ---- streams and events ----------------------------------------------------------------------
// How a thread waits a moment before it sleeps (stream workers between tasks, event waits,
// stream synchronizes): a few pause instructions for a partner that is about to deliver, then
// sched_yield until about kSpinNs have passed. Yielding, not pausing, keeps the wait cheap when
// threads outnumber cores (several ranks on one host, each with its stream workers): the core
// goes to a runnable thread, often the very one being waited for, while on an idle core a yield
// returns within a microsecond, so a hand-off stays fast. Returns whether ready() became true.
constexpr uint64_t kSpinNs = 100 * 1000;
template <class Ready>
bool spinThenYield(Ready&& ready) {
  for (int i = 0; i < 128; ++i) {
    if (ready()) return true;
    __builtin_ia32_pause();
  }
  const uint64_t until = nowNs() + kSpinNs;
  do {
    if (ready()) return true;
    sched_yield();
  } while (nowNs() < until);
  return ready();
}
struct Task {
  enum Kind : uint8_t { kWork, kRecord, kWait, kCopy, kMemset, kGraph, kCharge };
  Kind kind = kWork;
  uintptr_t payload[3] = {};     // kCopy: dst, src, count; kMemset: ptr, value, count;
                                 // kCharge: modeled ns, host issue ns
  npuTaskFn fn = nullptr;
  void* arg = nullptr;           // kGraph: the launch (graph.cpp)
  npuTaskRelease release = nullptr;  // run once after the task ran or was skipped
  bool replayable = false;       // kWork launched with npuLaunchTaskWithRelease: may be captured
  bool kernel = false;           // kWork launched with npuLaunchKernel: shadow mode skips fn
  bool untimed = false;          // npuSimScrubAsync: no simulated time, no profiler record
  npuEvent_st* event = nullptr;  // kRecord / kWait
  uint64_t event_seq = 0;        // record number to mark / wait for
  // Profiling (see profiler.cpp): set at launch when a session is open, 0 otherwise.
  uint32_t prof_session = 0;
  int8_t memcpy_kind = 0;        // kCopy: the resolved direction, for the profiler record
  uint64_t correlation_id = 0;
  uint64_t launch_ns = 0;
  int32_t launch_thread = 0;
  uint32_t launcher = 0;         // the launching thread's tag: who is told of a failure
  char name[56] = {};
};

// Resolves NULL to the current device's default stream; validates the handle.
npuError_t resolveStream(npuStream_t in, npuStream_st** out);
// Enqueues a task (a copy of `task`); honours ASCEND_LAUNCH_BLOCKING.
npuError_t enqueue(npuStream_st* stream, const Task& task);
// A short task (npuLaunchShortTaskWithRelease's path): on the caller when the stream is idle.
npuError_t enqueueShort(npuStream_st* stream, Task& task);
npuError_t defaultStream(Device* dev, npuStream_st** out);
// Enqueues and waits for the task; returns its own error (consumed from the stream). `api`
// names the blocking call (it is refused while a capture forbids synchronizing calls).
npuError_t enqueueAndWait(const char* api, npuStream_st* stream, const Task& task);
// Runs one task on the calling stream worker (failure state, profiling); graph.cpp runs a
// graph's tasks through it.
void runTask(npuStream_st* s, Task& task);
Device* streamDevice(npuStream_st* s);
// Whether `s` has finished its task number `position`; waiting until it has.
bool streamReached(npuStream_st* s, uint64_t position);
void waitForStreamPosition(npuStream_st* s, uint64_t position);
bool streamIsDefault(npuStream_st* s);
// An event record on `s` when it is idle (nothing queued or running): completes `event` at once
// and returns true; false (nothing done) when the record must be queued.
bool completeRecordIfIdle(npuStream_st* s, npuEvent_st* event);
// Waits until every stream of `dev` is idle, without consuming their errors (used before
// memory is unmapped, so that no queued task can touch it afterwards).
void waitDeviceIdle(Device* dev);
// Forgets the errors of every stream of `dev` (npuDeviceRepair: they belong to the fault).
void clearStreamErrors(Device* dev);

// Events are reference counted: the user's handle and every queued task that names the event.
void eventRetain(npuEvent_st* event);
void eventRelease(npuEvent_st* event);
// Run by the stream worker. `error` is the recording stream's error ("" when healthy): the
// record then carries it to whoever waits for the event. `stream` and `position`: where the
// record stands in its stream (a host waiting for the event also waits for the stream to count
// it as done); null for a record replayed inside a graph.
// `sim_ns`: the recording stream's simulated clock (shadow execution), for npuEventElapsedTime.
void eventComplete(npuEvent_st* event, uint64_t seq, const std::string& error,
                   npuStream_st* stream = nullptr, uint64_t position = 0, uint64_t sim_ns = 0);
// Waits until record `seq` of `event` is complete and its stream has counted it (a stream
// worker's wait task, npuEventSynchronize); returns the error the record carries ("" if none).
// *sim_ns (when given) receives the record's simulated time.
std::string eventWait(npuEvent_st* event, uint64_t seq, uint64_t* sim_ns = nullptr);

// The next record number of `event` (a graph launch numbers the records it replays).
uint64_t eventNextRecord(npuEvent_st* event);

// ---- the simulated clock (simclock.cpp; the streams' clocks live in stream.cpp) -------------
// True once a cost model is installed (shadow execution only).
bool simClockOn();
void simClockDisable();  // config(): the fixed configuration is not shadow execution
const npuSimCostModel& simCostModel();
// Modeled time of a copy (resolved npuMemcpyKind) or memset (kind < 0) of `bytes`.
uint64_t simTransferNs(int memcpy_kind, size_t bytes);
uint64_t streamSimNs(npuStream_st* s);
// Moves the stream's clock to at least `ns` (a wait, a collective's end).
void streamSimAtLeast(npuStream_st* s, uint64_t ns);
// The latest clock of the device's streams.
uint64_t deviceSimNs(Device* dev);
// Moves a simulated clock forward to `ns` (never back): a stream's, the host's.
inline void simClockAtLeast(std::atomic<uint64_t>& clock, uint64_t ns) {
  uint64_t now = clock.load(std::memory_order_relaxed);
  while (now < ns && !clock.compare_exchange_weak(now, ns, std::memory_order_relaxed)) {
  }
}
// The host's clock (host_dispatch_us): an op's issue time (the clock moved on by one dispatch;
// 0 when the host is not modeled), and a host wait that ended at `ns` on the device.
uint64_t simHostIssue();
void simHostAtLeast(uint64_t ns);
// The profiler's time of simulated time `sim_ns` on `device`: the session's start plus the
// simulated time since then (profiler.cpp).
uint64_t profilerSimToHost(int device, uint64_t sim_ns);

// ---- graphs (graph.cpp) ----------------------------------------------------------------------
// A capture in progress. Streams point to the one they record into; a launch reads that pointer
// once (acquire), so streams that never capture pay one load per launch.
struct Capture;
std::atomic<Capture*>& streamCapture(npuStream_st* s);
// A task launched onto a capturing stream (work, copy, memset): appended to the graph.
npuError_t captureAppend(Capture* c, npuStream_st* s, const Task& task);
// npuEventRecord onto a capturing stream.
npuError_t captureRecord(Capture* c, npuStream_st* s, npuEvent_st* event);
// npuStreamWaitEvent: true when the capture machinery handled it (joined a stream to a capture,
// or refused the wait), with the result in *result.
bool captureWait(npuStream_st* s, npuEvent_st* event, npuError_t* result);
// Refusals of synchronizing calls during a capture; each invalidates the capture it breaks.
npuError_t captureCheckDeviceCall(const char* api, Device* dev);  // device-wide blocking calls
npuError_t captureCheckStreamSync(const char* api, npuStream_st* s);
npuError_t captureCheckEventSync(const char* api, npuEvent_st* event);
// The worker side of a graph launch (Task::kGraph).
void runGraphLaunch(npuStream_st* s, Task& task);

// ---- profiling ------------------------------------------------------------------------------
// Stamps `task` with the open session, the thread's correlation id and the launch time; a no-op
// (one relaxed load) when no session is open.
void profilerStampLaunch(Task& task);
// True when `task` was stamped by the session that is still the current one.
bool profilerWants(const Task& task);
// Appends the record of a task that ran from start_ns to end_ns on `stream_id` of `device`.
void profilerRecord(const Task& task, int device, int stream_id, uint64_t start_ns,
                    uint64_t end_ns);

// ---- the sanitizer's engine (sanitizer.cpp) ---------------------------------------------
// The runtime's ordering calls tell the engine what they order; each call site checks sanOn()
// (one relaxed load) first.
extern std::atomic<bool> g_san_on;
inline bool sanOn() { return g_san_on.load(std::memory_order_relaxed); }
void sanEventRecord(npuEvent_st* event, npuStream_st* s);  // npuEventRecord
void sanStreamWait(npuStream_st* s, npuEvent_st* event);   // npuStreamWaitEvent
void sanHostJoinEvent(npuEvent_st* event);  // the host saw the event's record complete
void sanHostJoinStream(npuStream_st* s);    // the host saw the stream's work complete
void sanHostJoinDevice(Device* dev);        // ... every stream of the device

// The host saw work complete (a synchronize, a blocking call, a successful query): what follows
// on the host is ordered after it for the sanitizer, and the simulated host clock (shadow
// execution) moves to the device time it waited for. Every host wait goes through one of these.
inline void hostJoinedStream(npuStream_st* s) {
  if (sanOn()) sanHostJoinStream(s);
  if (simClockOn()) simHostAtLeast(streamSimNs(s));
}
inline void hostJoinedDevice(Device* dev) {
  if (sanOn()) sanHostJoinDevice(dev);
  if (simClockOn()) simHostAtLeast(deviceSimNs(dev));
}
inline void hostJoinedEvent(npuEvent_st* event, uint64_t sim_ns) {
  if (sanOn()) sanHostJoinEvent(event);
  if (simClockOn()) simHostAtLeast(sim_ns);
}
// Memory the runtime unmaps (npuFree, npuFreeHost, npuMemUnmap, npuMemAddressFree): its
// history ends, since the OS may hand the addresses to anyone next.
void sanForget(const void* ptr, size_t bytes);
uint64_t sanCurrentTag();
// NPU graphs: accesses made on a capturing stream are kept with the graph (graph.cpp's
// captureGraphOf names it) and made on the replay stream at each npuGraphLaunch.
npuGraph_st* captureGraphOf(npuStream_st* s);  // the graph `s` is capturing into, or nullptr
void sanGraphLaunch(npuGraph_st* graph, npuStream_st* s);
void sanGraphForget(npuGraph_st* graph);  // a failed capture, a destroyed graph  // this thread's tag for the runtime's own accesses (copies, memsets)

// ---- registry --------------------------------------------------------------------------------
// Publishes this process in the registry (idempotent) and points each device's counters into
// its record.
void registryAttach(std::vector<Device*>& devices);

}  // namespace npu::rt
