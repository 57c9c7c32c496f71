// Streams: a FIFO of tasks run in order by one worker thread each.
//
// How it works:
//  - enqueue appends under the stream's mutex and wakes the worker only if it sleeps; the worker
//    spins, then yields, for about 100 us after each task before sleeping (spinThenYield), so
//    back-to-back launches (the common case: an op loop) cost no wake-up and start within a
//    microsecond or two.
//  - submitted/completed are task sequence numbers; synchronize waits until completed reaches
//    the value submitted had when it was called, so other threads may keep launching meanwhile.
//  - Short tasks (npuLaunchShortTaskWithRelease) and blocking calls (npuMemcpy, npuMemset,
//    npuLaunchTaskSync) run on the launching thread when the stream is idle: handing a 1-element
//    kernel to the worker costs more than running it, a blocking caller waits anyway, and on a
//    busy machine the spinning worker competes with the launcher for a core. The launcher reserves
//    the stream's next sequence number under the mutex, with nothing queued or running, and
//    marks the stream `inline_running`; a task queued meanwhile by another thread is popped by
//    the worker but started only after the inline task completed, so the order holds.
//  - Back-pressure: a stream queues at most config().max_pending tasks (as CUDA blocks the host
//    at about a thousand pending launches). A launch onto a full queue waits until the worker
//    has drained it to 7/8 of the bound, so the launcher sleeps and wakes once per few hundred
//    tasks, not once per task. Event records and waits may use twice the bound (the allocator
//    records events while it holds its lock). Stream workers never wait (a task launching onto
//    a full stream would wait for itself), and a launch that has waited kStallMs without the
//    stream finishing a single task goes through anyway: a task that waits for a lock the
//    launching thread holds must not deadlock the process. Either is counted as an overflow.
//  - Errors belong to their stream. A failing task puts the stream into an error state: later
//    work tasks are skipped (their inputs may be garbage) while event records and waits still
//    run, so nobody waiting on an event hangs; a record made in the error state carries the
//    error to the event, and a stream that waits for such an event takes the error on too.
//    The error is reported, with the task's name, by every synchronize / query that covers the
//    stream while it is in the error state:
//      * npuStreamSynchronize / npuStreamQuery / a blocking copy or memset of the stream itself
//        (the stream's own synchronize): reports the error and clears it; tasks launched
//        afterwards run again.
//      * npuDeviceSynchronize: reports it too, and clears it only once every thread that
//        launched the failed or a skipped task has been told (by this or an earlier report).
//        So a thread that synchronizes the whole device cannot take the error away from the
//        thread whose work was lost, while a single-threaded program (device synchronize, then
//        more work) finds its stream usable again, as before.
//      * npuEventSynchronize / npuEventQuery of an event recorded after the failure: report it,
//        never clear it (the allocator polls events internally).
//    npuGetLastError reports it too (once, process-wide).
//  - Hand-offs between threads are what a short task costs here (a wake-up of a parked worker
//    is tens to hundreds of microseconds on a busy host), so two paths skip them while keeping
//    the stream's order exactly:
//      * an event record on an idle stream (nothing queued, nothing running) completes at
//        once on the recording thread, and a wait for an event that is complete queues nothing
//        (event.cpp); both are what the worker would have done next;
//      * a host run (npuStreamBeginHostRun): while the stream is idle, the launches the owning
//        thread makes onto it run on that thread, at once, as the stream's tasks (errors,
//        profiling and completion counts as on the worker). The worker takes no task meanwhile;
//        a launch from another thread queues and runs after the host run ends, and a launch by
//        the owner behind such a queued task ends the host run, so FIFO order always holds.
#include <immintrin.h>

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <exception>

#include "npu/log.h"
#include "runtime_internal.h"

struct npuStream_st {
  static constexpr uint32_t kAlive = 0x5354524d;  // "STRM"
  static constexpr uint32_t kDead = 0xdeadbeef;
  std::atomic<uint32_t> magic{kAlive};
  npu::rt::Device* dev = nullptr;
  int priority = 0;
  bool is_default = false;
  int id = 0;  // npuStreamGetId: 0 for the default stream, then creation order per device

  std::mutex mutex;
  std::condition_variable work_cv;   // worker waits for tasks
  std::condition_variable done_cv;   // hosts wait for completion
  std::condition_variable space_cv;  // launchers wait for room in the queue
  std::deque<npu::rt::Task> queue;
  std::atomic<uint64_t> queued{0};     // tasks in the queue (lets the worker spin without a lock)
  std::atomic<uint64_t> submitted{0};  // sequence number of the last task enqueued
  std::atomic<uint64_t> completed{0};  // sequence number of the last task finished
  bool worker_sleeping = false;
  std::atomic<bool> inline_running{false};  // a short task runs on its launching thread
  // Hosts blocked in waitFor; atomic so the worker checks it without taking the mutex after
  // every task (seq_cst with `completed`: a waiter either sees the new count or is seen).
  std::atomic<int> host_waiters{0};
  bool stopping = false;
  // The thread running this stream's tasks itself (npuStreamBeginHostRun), or 0; under mutex.
  // The worker takes no task while it is set.
  uint32_t host_runner = 0;

  // Back-pressure, under mutex.
  int launch_waiters = 0;     // launchers blocked on a full queue
  size_t peak_pending = 0;    // SIZE: the most tasks queued at once
  uint64_t launch_waits = 0;  // COUNT: launches that had to wait for room
  uint64_t overflows = 0;     // COUNT: launches queued beyond the bound (see the top)

  // Error state, under mutex.
  bool failed = false;
  std::string error_message;
  uint64_t skipped = 0;
  std::vector<uint32_t> untold;  // threads whose failed or skipped task is not reported to them

  std::atomic<npu::rt::Capture*> capture{nullptr};  // the graph capture it records into

  // Shadow execution's simulated clock (npu/runtime.h), ns; moved by the tasks it runs.
  std::atomic<uint64_t> sim_ns{0};

  std::thread worker;
};

namespace npu::rt {
namespace {

thread_local npuStream_st* t_running_stream = nullptr;  // set on worker threads
thread_local std::string* t_task_failure = nullptr;     // where npuTaskFail writes

constexpr auto kStall = std::chrono::milliseconds(250);

// A small number naming the calling thread (never reused, unlike OS thread ids).
uint32_t threadTag() {
  static std::atomic<uint32_t> next{1};
  thread_local const uint32_t tag = next.fetch_add(1, std::memory_order_relaxed);
  return tag;
}

void addUntold(npuStream_st* s, uint32_t tag) {  // caller holds s->mutex
  if (std::find(s->untold.begin(), s->untold.end(), tag) == s->untold.end()) {
    s->untold.push_back(tag);
  }
}

void recordFailureMessage(npuStream_st* s, uint32_t launcher, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(s->mutex);
    if (!s->failed) {
      s->failed = true;
      s->error_message = message;
    }
    addUntold(s, launcher);
  }
  setAsyncError(npuErrorLaunchFailure, message);
}

void recordFailure(npuStream_st* s, const Task& task, const std::string& what) {
  recordFailureMessage(s, task.launcher,
                       "task '" + std::string(task.name) + "' failed on NPU " +
                           std::to_string(s->dev->index) + " (stream " + hex(s) + "): " + what);
}

// The stream's error as an event record made now carries it ("" when healthy).
std::string errorForEvent(npuStream_st* s) {
  std::lock_guard<std::mutex> lock(s->mutex);
  return s->failed ? s->error_message : std::string();
}

// Shadow execution (npu/runtime.h): a task's effect without the data. Kernels do not run; copies
// and memsets up to NPU_SIM_SHADOW_CARRY_BYTES do (metadata), larger ones move nothing, except
// that a large copy to the host writes the placeholder, zeros. Other work (the collectives' own
// tasks) runs. [*sim_start, *sim_end] receives the task's span on the simulated clock (equal
// ends for a task that took no modeled time).
void runShadowed(npuStream_st* s, Task& task, uint64_t* sim_start, uint64_t* sim_end) {
  const size_t bytes = task.payload[2];
  *sim_start = streamSimNs(s);
  if (task.kind == Task::kCharge) {
    // The op starts when its stream and the device's compute units are free and the host has
    // issued it.
    std::atomic<uint64_t>& free = s->dev->sim_compute_free_ns;
    uint64_t busy = free.load(std::memory_order_relaxed), start = 0, end = 0;
    do {
      start = std::max({busy, *sim_start, static_cast<uint64_t>(task.payload[1])});
      end = start + static_cast<uint64_t>(static_cast<double>(task.payload[0]) *
                                          s->dev->slow_factor.load(std::memory_order_relaxed));
    } while (!free.compare_exchange_weak(busy, end, std::memory_order_relaxed));
    streamSimAtLeast(s, end);
    *sim_start = start;
    *sim_end = end;
    return;
  }
  if (simClockOn() && !task.untimed && (task.kind == Task::kCopy || task.kind == Task::kMemset)) {
    s->sim_ns.fetch_add(simTransferNs(task.kind == Task::kCopy ? task.memcpy_kind : -1, bytes),
                        std::memory_order_relaxed);
  }
  if (task.kind == Task::kCopy) {
    void* dst = reinterpret_cast<void*>(task.payload[0]);
    if (bytes <= NPU_SIM_SHADOW_CARRY_BYTES || task.memcpy_kind == npuMemcpyHostToHost) {
      std::memmove(dst, reinterpret_cast<const void*>(task.payload[1]), bytes);
    } else if (task.memcpy_kind == npuMemcpyDeviceToHost) {
      std::memset(dst, 0, bytes);
    }
  } else if (task.kind == Task::kMemset) {
    if (bytes <= NPU_SIM_SHADOW_CARRY_BYTES) {
      std::memset(reinterpret_cast<void*>(task.payload[0]), static_cast<int>(task.payload[1]),
                  bytes);
    }
  } else if (!task.kernel) {
    task.fn(task.arg);
  }
  *sim_end = streamSimNs(s);
}

}  // namespace

void runTask(npuStream_st* s, Task& task) {
  switch (task.kind) {
    case Task::kRecord:
      eventComplete(task.event, task.event_seq, errorForEvent(s), nullptr, 0, streamSimNs(s));
      eventRelease(task.event);
      return;
    case Task::kWait: {
      uint64_t sim = 0;
      std::string upstream = eventWait(task.event, task.event_seq, &sim);
      streamSimAtLeast(s, sim);
      eventRelease(task.event);
      if (!upstream.empty()) {
        recordFailureMessage(s, task.launcher,
                             "stream " + hex(s) + " on NPU " + std::to_string(s->dev->index) +
                                 " waited for an event recorded after a failure: " + upstream);
      }
      return;
    }
    case Task::kGraph:
      runGraphLaunch(s, task);
      return;
    default:
      break;
  }
  bool failed;
  {
    std::lock_guard<std::mutex> lock(s->mutex);
    failed = s->failed;
    if (failed) {
      ++s->skipped;
      addUntold(s, task.launcher);
    }
  }
  if (failed) return;
  if (__builtin_expect(s->dev->health.load(std::memory_order_acquire) != npuDeviceHealthy, 0)) {
    // A stopped, faulty or lost device runs nothing: the task fails with the device's error.
    std::string why;
    {
      std::lock_guard<std::mutex> lock(s->dev->fault_mutex);
      why = s->dev->fault_message;
    }
    if (!why.empty()) {
      recordFailure(s, task, why);
      return;
    }
  }
  const uint64_t t0 = nowNs();
  uint64_t sim0 = 0, sim1 = 0;
  std::string failure;
  t_task_failure = &failure;
  try {
    if (__builtin_expect(config().shadow, 0)) {
      runShadowed(s, task, &sim0, &sim1);
    } else if (task.kind == Task::kCopy) {
      std::memmove(reinterpret_cast<void*>(task.payload[0]),
                   reinterpret_cast<const void*>(task.payload[1]), task.payload[2]);
    } else if (task.kind == Task::kMemset) {
      std::memset(reinterpret_cast<void*>(task.payload[0]), static_cast<int>(task.payload[1]),
                  task.payload[2]);
    } else {
      task.fn(task.arg);
    }
  } catch (const std::exception& e) {
    if (failure.empty()) failure = e.what();
  } catch (...) {
    if (failure.empty()) failure = "unknown exception";
  }
  t_task_failure = nullptr;
  uint64_t t1 = nowNs();
  const double slow = s->dev->slow_factor.load(std::memory_order_relaxed);
  if (__builtin_expect(slow > 1.0, 0) && task.kernel && !config().shadow) {
    // NPU_SIM_FAULTS straggler: the kernel takes `slow` times as long.
    std::this_thread::sleep_for(std::chrono::nanoseconds(
        static_cast<uint64_t>(static_cast<double>(t1 - t0) * (slow - 1.0))));
    t1 = nowNs();
  }
  s->dev->busy_ns->fetch_add(t1 - t0, std::memory_order_relaxed);
  if (!task.untimed && profilerWants(task)) {
    if (!simClockOn()) {
      profilerRecord(task, s->dev->index, s->id, t0, t1);
    } else if (!task.kernel) {
      // The projected timeline: an op's device activity is its charge (its kernels take no
      // modeled time of their own), copies and collectives their modeled spans.
      profilerRecord(task, s->dev->index, s->id, profilerSimToHost(s->dev->index, sim0),
                     profilerSimToHost(s->dev->index, sim1));
    }
  }
  if (!failure.empty()) recordFailure(s, task, failure);
}

namespace {

// Queue depth at which blocked launchers are woken: 7/8 of the bound.
size_t resumeDepth() {
  const size_t bound = config().max_pending;
  return bound - std::max<size_t>(1, bound / 8);
}

void markCompleted(npuStream_st* s) {
  s->completed.fetch_add(1, std::memory_order_seq_cst);
  if (s->host_waiters.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(s->mutex);
    s->done_cv.notify_all();
  }
}

// Runs one task taken from the stream (by its worker, or by the owner of a host run) and counts
// it as done.
void runAndComplete(npuStream_st* s, Task& task) {
  if (task.kind == Task::kRecord) {
    // The event completes before the stream counts the record as done, so a host that
    // synchronized the stream finds the event complete. The event also keeps the record's
    // position in the stream: a host that synchronizes (or queries) the event is answered only
    // once the stream has reached it, and so finds the stream idle when nothing came after.
    const std::string error = errorForEvent(s);
    eventComplete(task.event, task.event_seq, error, s,
                  s->completed.load(std::memory_order_relaxed) + 1, streamSimNs(s));
    markCompleted(s);
    eventRelease(task.event);
    return;
  }
  runTask(s, task);
  if (task.release) task.release(task.arg);
  markCompleted(s);
}

void workerLoop(npuStream_st* s) {
  t_running_stream = s;
  const size_t resume = resumeDepth();
  for (;;) {
    spinThenYield([s] { return s->queued.load(std::memory_order_acquire) != 0; });
    Task task;
    {
      std::unique_lock<std::mutex> lock(s->mutex);
      while (s->queue.empty() || s->host_runner != 0) {
        if (s->stopping && s->queue.empty()) return;
        s->worker_sleeping = true;
        s->work_cv.wait(lock);
        s->worker_sleeping = false;
      }
      task = s->queue.front();
      s->queue.pop_front();
      s->queued.fetch_sub(1, std::memory_order_relaxed);
      if (s->launch_waiters > 0 && s->queue.size() <= resume) s->space_cv.notify_all();
    }
    // Queued while a short task ran on its launcher: it comes after that task (see the top).
    // Waited for as every wait here is, spinning briefly then yielding: the task being waited
    // for may be a whole model run that needs this core.
    while (!spinThenYield([s] { return !s->inline_running.load(std::memory_order_acquire); })) {
    }
    if (chaos()) {  // NPU_SIM_SCHEDULE=chaos: a delay drawn for this task of this stream
      schedulePoint(kSiteTask, (uint64_t(s->dev->index) << 56) ^ (uint64_t(s->id) << 40) ^
                                   (s->completed.load(std::memory_order_relaxed) + 1));
    }
    runAndComplete(s, task);
  }
}

npuStream_st* createStream(Device* dev, int priority, bool is_default) {
  auto* s = new npuStream_st();
  s->dev = dev;
  s->priority = priority;
  s->is_default = is_default;
  s->id = is_default ? 0 : dev->next_stream_id.fetch_add(1, std::memory_order_relaxed);
  s->worker = std::thread(workerLoop, s);
  // Named so that debuggers, top -H and an abort's diagnostics tell which stream it serves.
  char name[16];
  std::snprintf(name, sizeof(name), "npu%d_s%d", dev->index, s->id);
  pthread_setname_np(s->worker.native_handle(), name);
  std::lock_guard<std::mutex> lock(dev->streams_mutex);
  dev->streams.push_back(s);
  return s;
}

// Waits until `s` has finished task number `target`.
void waitFor(npuStream_st* s, uint64_t target) {
  if (s == t_running_stream) return;  // a task waiting for its own stream would deadlock
  if (spinThenYield([&] { return s->completed.load(std::memory_order_acquire) >= target; })) return;
  std::unique_lock<std::mutex> lock(s->mutex);
  s->host_waiters.fetch_add(1, std::memory_order_seq_cst);
  s->done_cv.wait(lock, [&] { return s->completed.load(std::memory_order_seq_cst) >= target; });
  s->host_waiters.fetch_sub(1, std::memory_order_seq_cst);
}

// Who is being told of a stream's error (see "Errors belong to their stream" at the top).
enum class Reader {
  kStream,  // the stream's own synchronize / query / blocking copy: reports and clears
  kDevice,  // a device-wide synchronize: reports; clears once every launcher has been told
};

npuError_t takeError(npuStream_st* s, Reader reader) {
  std::lock_guard<std::mutex> lock(s->mutex);
  if (!s->failed) return npuSuccess;
  std::string message = s->error_message;
  if (s->skipped > 0) {
    message += "; " + std::to_string(s->skipped) + " later task(s) on the stream were skipped";
  }
  if (reader == Reader::kDevice) {
    s->untold.erase(std::remove(s->untold.begin(), s->untold.end(), threadTag()),
                    s->untold.end());
  }
  if (reader == Reader::kStream || s->untold.empty()) {
    s->failed = false;
    s->skipped = 0;
    s->error_message.clear();
    s->untold.clear();
  }
  return fail(npuErrorLaunchFailure, message);
}

npuError_t validateStream(npuStream_t stream) {
  if (stream->magic.load(std::memory_order_relaxed) != npuStream_st::kAlive) {
    return fail(npuErrorInvalidResourceHandle,
                "stream " + hex(stream) + " is not a live stream (destroyed or never created)");
  }
  return npuSuccess;
}

// Waits (holding `lock`) until the queue has room for `task`; see "Back-pressure" at the top.
void waitForRoom(npuStream_st* s, std::unique_lock<std::mutex>& lock, const Task& task) {
  const size_t bound = config().max_pending;
  const size_t limit = task.kind == Task::kRecord || task.kind == Task::kWait ? 2 * bound : bound;
  if (s->queue.size() < limit) return;
  if (t_running_stream != nullptr) {
    ++s->overflows;
    return;
  }
  ++s->launch_waits;
  ++s->launch_waiters;
  const size_t resume = resumeDepth();
  uint64_t seen = s->completed.load(std::memory_order_acquire);
  while (s->queue.size() > resume && !s->stopping) {
    if (s->space_cv.wait_for(lock, kStall) == std::cv_status::timeout) {
      const uint64_t now = s->completed.load(std::memory_order_acquire);
      if (now == seen) {  // stalled: let the launch through
        if (s->queue.size() >= limit) ++s->overflows;
        break;
      }
      seen = now;
    }
  }
  --s->launch_waiters;
}

// Whether nothing is queued on `s` and no task of it is running (caller holds s->mutex).
bool idleLocked(npuStream_st* s) {
  return s->queue.empty() && !s->inline_running.load(std::memory_order_acquire) &&
         s->completed.load(std::memory_order_acquire) ==
             s->submitted.load(std::memory_order_relaxed);
}

// Runs `task` on the calling thread as the stream's next task: the caller holds `lock` and has
// found the stream idle. `inline_running` keeps the worker from starting a task queued meanwhile
// by another thread until this one is counted. Returns the task's sequence number.
uint64_t runOnCaller(npuStream_st* s, std::unique_lock<std::mutex>& lock, Task& task) {
  s->inline_running.store(true, std::memory_order_relaxed);
  task.launcher = threadTag();
  profilerStampLaunch(task);
  const uint64_t seq = s->submitted.fetch_add(1, std::memory_order_relaxed) + 1;
  lock.unlock();
  // As on the worker: the task runs "on" its stream (a task synchronizing its own stream does
  // not wait for itself; a launch it makes never waits for room).
  npuStream_st* const outer = t_running_stream;
  t_running_stream = s;
  runAndComplete(s, task);  // counted before the flag drops: a record queued meanwhile sees it
  t_running_stream = outer;
  s->inline_running.store(false, std::memory_order_release);
  return seq;
}

uint64_t push(npuStream_st* s, const Task& task) {
  std::unique_lock<std::mutex> lock(s->mutex);
  if (s->host_runner != 0 && s->host_runner == threadTag()) {
    if (idleLocked(s)) {  // a host run: the task runs here and now
      Task here = task;
      return runOnCaller(s, lock, here);
    }
    // Another thread queued work (or runs a short task) meanwhile: this launch goes behind it,
    // and so does the rest of the host run; the worker takes over.
    s->host_runner = 0;
  }
  waitForRoom(s, lock, task);
  s->queue.push_back(task);
  Task& queued = s->queue.back();
  queued.launcher = threadTag();
  profilerStampLaunch(queued);
  if (s->queue.size() > s->peak_pending) s->peak_pending = s->queue.size();
  s->queued.fetch_add(1, std::memory_order_release);
  uint64_t seq = s->submitted.fetch_add(1, std::memory_order_relaxed) + 1;
  if (s->worker_sleeping) s->work_cv.notify_one();
  return seq;
}

}  // namespace

bool completeRecordIfIdle(npuStream_st* s, npuEvent_st* event) {
  // Under launch blocking a record reports and clears the stream's error like any launch; a
  // failed stream keeps the queued path too, so the error reaches the event as it always did.
  if (config().launch_blocking || chaos()) return false;  // chaos: the record gets its delay
  std::lock_guard<std::mutex> lock(s->mutex);
  if (s->failed || !idleLocked(s)) return false;
  // The stream cannot move while we hold its mutex: the record's position is where it stands.
  eventComplete(event, eventNextRecord(event), std::string(), s,
                s->completed.load(std::memory_order_relaxed), streamSimNs(s));
  return true;
}

npuError_t defaultStream(Device* dev, npuStream_st** out) {
  {
    std::lock_guard<std::mutex> lock(dev->streams_mutex);
    if (dev->default_stream) {
      *out = dev->default_stream;
      return npuSuccess;
    }
  }
  static std::mutex create_mutex;  // one default stream per device, even under a race
  std::lock_guard<std::mutex> create(create_mutex);
  if (!dev->default_stream) {
    npuStream_st* s = createStream(dev, 0, true);
    std::lock_guard<std::mutex> lock(dev->streams_mutex);
    dev->default_stream = s;
  }
  *out = dev->default_stream;
  return npuSuccess;
}

npuError_t resolveStream(npuStream_t in, npuStream_st** out) {
  if (npuError_t e = checkUsable()) return e;
  if (in) {
    if (npuError_t e = validateStream(in)) return e;
    *out = in;
    return npuSuccess;
  }
  Device* dev = nullptr;
  if (npuError_t e = currentDevice(&dev)) return e;
  return defaultStream(dev, out);
}

npuError_t enqueue(npuStream_st* s, const Task& task) {
  if (Capture* c = s->capture.load(std::memory_order_acquire)) return captureAppend(c, s, task);
  if (config().schedule == npuScheduleSerial && t_running_stream == nullptr) {
    // NPU_SIM_SCHEDULE=serial: on an idle stream the task runs now, on this thread. Behind
    // another thread's queued work it is queued as usual, never waited for here: launchers
    // may hold locks (the allocator records events under its own), and a launcher that waited
    // for a stream whose work needs that lock would deadlock.
    std::unique_lock<std::mutex> lock(s->mutex);
    if (idleLocked(s)) {
      Task here = task;
      runOnCaller(s, lock, here);  // releases the lock
      return config().launch_blocking ? takeError(s, Reader::kStream) : npuSuccess;
    }
  }
  uint64_t seq = push(s, task);
  if (!config().launch_blocking) return npuSuccess;
  waitFor(s, seq);
  return takeError(s, Reader::kStream);
}

namespace {

// Runs a short task on the calling thread if `s` is idle; false if it must be queued.
bool runInline(npuStream_st* s, Task& task) {
  if (!config().inline_tasks || t_running_stream != nullptr) return false;
  std::unique_lock<std::mutex> lock(s->mutex);
  if (!idleLocked(s)) return false;
  runOnCaller(s, lock, task);
  return true;
}

}  // namespace

npuError_t enqueueShort(npuStream_st* s, Task& task) {
  if (s->capture.load(std::memory_order_acquire) != nullptr || !runInline(s, task)) {
    return enqueue(s, task);
  }
  if (!config().launch_blocking) return npuSuccess;
  return takeError(s, Reader::kStream);
}


npuError_t enqueueAndWait(const char* api, npuStream_st* s, const Task& task) {
  if (npuError_t e = captureCheckDeviceCall(api, s->dev)) return e;
  if (npuError_t e = captureCheckStreamSync(api, s)) return e;
  // The caller waits anyway: on an idle stream it does the work itself (no hand-off).
  Task here = task;
  if (!runInline(s, here)) waitFor(s, push(s, task));
  hostJoinedStream(s);
  return takeError(s, Reader::kStream);
}

namespace {

Task workTask(const char* name, npuTaskFn fn, npuTaskRelease release, bool replayable,
              void* arg) {
  Task task;
  task.kind = Task::kWork;
  task.fn = fn;
  task.release = release;
  task.replayable = replayable;
  task.arg = arg;
  // A bounded copy (launches are the hot path: no printf machinery here).
  const char* from = name ? name : "task";
  const size_t n = strnlen(from, sizeof(task.name) - 1);
  std::memcpy(task.name, from, n);
  task.name[n] = '\0';
  return task;
}

npuError_t launch(npuStream_t stream, const char* name, npuTaskFn fn, npuTaskRelease release,
                  bool replayable, bool short_task, void* arg, bool kernel = false) {
  if (!fn) return fail(npuErrorInvalidValue, "npuLaunchTask: fn is NULL");
  npuStream_st* s = nullptr;
  if (npuError_t e = resolveStream(stream, &s)) return e;
  if (__builtin_expect(kernel && !config().faults.empty(), 0)) {
    (void)npuSimFaultTick(npuSimOnLaunch, s->dev->index, nullptr);
  }
  if (npuError_t e = deviceFault(s->dev)) return e;
  if (kernel && __builtin_expect(config().shadow, 0) && !npuSanEnabled()) {
    // Shadow execution: a kernel would not run, and its modeled time reaches the stream as its
    // op's charge (npuSimCharge), so it takes no queue slot: released at once, after the checks
    // a launch makes (the stream, the device's health, NPU_SIM_FAULTS' launch count). The
    // sanitizer, which follows each kernel through the queue, keeps the queued form.
    if (release) release(arg);
    return npuSuccess;
  }
  Task task = workTask(name, fn, release, replayable, arg);
  task.kernel = kernel;
  NPU_LOG(NPU_LOG_DEBUG, "RUNTIME", "launch %s on stream %p (device %d)", task.name,
          static_cast<void*>(s), s->dev->index);
  return short_task ? enqueueShort(s, task) : enqueue(s, task);
}


}  // namespace

std::atomic<Capture*>& streamCapture(npuStream_st* s) { return s->capture; }
Device* streamDevice(npuStream_st* s) { return s->dev; }
bool streamIsDefault(npuStream_st* s) { return s->is_default; }

void waitDeviceIdle(Device* dev) {
  std::vector<npuStream_st*> streams;
  {
    std::lock_guard<std::mutex> lock(dev->streams_mutex);
    streams = dev->streams;
  }
  for (npuStream_st* s : streams) waitFor(s, s->submitted.load(std::memory_order_acquire));
}

void waitForStreamPosition(npuStream_st* s, uint64_t position) { waitFor(s, position); }

void clearStreamErrors(Device* dev) {
  std::lock_guard<std::mutex> streams_lock(dev->streams_mutex);
  for (npuStream_st* s : dev->streams) {
    std::lock_guard<std::mutex> lock(s->mutex);
    s->failed = false;
    s->skipped = 0;
    s->error_message.clear();
    s->untold.clear();
  }
}

uint64_t streamSimNs(npuStream_st* s) { return s->sim_ns.load(std::memory_order_relaxed); }

void streamSimAtLeast(npuStream_st* s, uint64_t ns) { simClockAtLeast(s->sim_ns, ns); }

uint64_t deviceSimNs(Device* dev) {
  uint64_t latest = 0;
  std::lock_guard<std::mutex> lock(dev->streams_mutex);
  for (npuStream_st* s : dev->streams) latest = std::max(latest, streamSimNs(s));
  return latest;
}

bool streamReached(npuStream_st* s, uint64_t position) {
  return s->completed.load(std::memory_order_acquire) >= position;
}

}  // namespace npu::rt

using namespace npu::rt;

extern "C" {

npuError_t npuStreamCreate(npuStream_t* stream) {
  return npuStreamCreateWithPriority(stream, 0, 0);
}

npuError_t npuStreamCreateWithPriority(npuStream_t* stream, unsigned int flags, int priority) {
  if (!stream) return fail(npuErrorInvalidValue, "npuStreamCreate: stream is NULL");
  Device* dev = nullptr;
  if (npuError_t e = currentDevice(&dev)) return e;
  if (priority < -1 || priority > 0) {
    return fail(npuErrorInvalidValue, "npuStreamCreateWithPriority: priority " +
                                          std::to_string(priority) +
                                          " is out of range; use 0 (normal) or -1 (high)");
  }
  *stream = createStream(dev, priority, false);
  NPU_LOG(NPU_LOG_INFO, "RUNTIME", "device %d: stream %p created, priority %d", dev->index,
          static_cast<void*>(*stream), priority);
  return npuSuccess;
}

npuError_t npuStreamDestroy(npuStream_t stream) {
  if (!stream) return fail(npuErrorInvalidResourceHandle, "npuStreamDestroy: stream is NULL");
  if (npuError_t e = validateStream(stream)) return e;
  if (stream->is_default) {
    return fail(npuErrorInvalidResourceHandle, "npuStreamDestroy: the default stream cannot be "
                                               "destroyed");
  }
  if (stream->capture.load()) {
    return fail(npuErrorStreamCaptureUnsupported,
                "npuStreamDestroy: stream " + hex(stream) + " is capturing a graph; end the "
                "capture (npuStreamEndCapture) before destroying the stream");
  }
  {
    std::lock_guard<std::mutex> lock(stream->dev->streams_mutex);
    auto& all = stream->dev->streams;
    all.erase(std::remove(all.begin(), all.end(), stream), all.end());
  }
  waitFor(stream, stream->submitted.load());
  {
    std::lock_guard<std::mutex> lock(stream->mutex);
    stream->stopping = true;
    stream->work_cv.notify_one();
  }
  stream->worker.join();
  // The struct is kept (a few hundred bytes) so that a stale handle is detected, not a crash.
  stream->magic.store(npuStream_st::kDead);
  static std::mutex graveyard_mutex;
  static auto* graveyard = new std::vector<npuStream_st*>();  // keeps them reachable
  std::lock_guard<std::mutex> lock(graveyard_mutex);
  graveyard->push_back(stream);
  return npuSuccess;
}

npuError_t npuStreamSynchronize(npuStream_t stream) {
  npuStream_st* s = nullptr;
  if (npuError_t e = resolveStream(stream, &s)) return e;
  if (npuError_t e = captureCheckStreamSync("npuStreamSynchronize", s)) return e;
  waitFor(s, s->submitted.load(std::memory_order_acquire));
  hostJoinedStream(s);
  return takeError(s, Reader::kStream);
}

npuError_t npuStreamBeginHostRun(npuStream_t stream) {
  npuStream_st* s = nullptr;
  if (npuError_t e = resolveStream(stream, &s)) return e;
  std::lock_guard<std::mutex> lock(s->mutex);
  if (!config().inline_tasks || s->capture.load(std::memory_order_acquire) != nullptr ||
      s->host_runner != 0 || !idleLocked(s)) {
    return npuErrorNotReady;  // not an error: the caller launches as usual
  }
  s->host_runner = threadTag();
  return npuSuccess;
}

npuError_t npuStreamEndHostRun(npuStream_t stream) {
  npuStream_st* s = nullptr;
  if (npuError_t e = resolveStream(stream, &s)) return e;
  std::lock_guard<std::mutex> lock(s->mutex);
  if (s->host_runner == threadTag()) {  // else a launch behind queued work ended it already
    s->host_runner = 0;
    if (!s->queue.empty() && s->worker_sleeping) s->work_cv.notify_one();
  }
  return npuSuccess;
}

npuError_t npuStreamQuery(npuStream_t stream) {
  npuStream_st* s = nullptr;
  if (npuError_t e = resolveStream(stream, &s)) return e;
  if (npuError_t e = captureCheckStreamSync("npuStreamQuery", s)) return e;
  if (npuError_t e = takeError(s, Reader::kStream)) return e;
  if (s->completed.load(std::memory_order_acquire) < s->submitted.load(std::memory_order_acquire)) {
    return npuErrorNotReady;
  }
  hostJoinedStream(s);
  return npuSuccess;
}

npuError_t npuStreamGetQueueStats(npuStream_t stream, npuStreamQueueStats* stats) {
  if (!stats) return fail(npuErrorInvalidValue, "npuStreamGetQueueStats: stats is NULL");
  npuStream_st* s = nullptr;
  if (npuError_t e = resolveStream(stream, &s)) return e;
  std::lock_guard<std::mutex> lock(s->mutex);
  stats->pending = s->queue.size();
  stats->peak_pending = s->peak_pending;
  stats->max_pending = config().max_pending;
  stats->launch_waits = s->launch_waits;
  stats->overflows = s->overflows;
  return npuSuccess;
}

npuError_t npuStreamGetPriority(npuStream_t stream, int* priority) {
  if (!priority) return fail(npuErrorInvalidValue, "npuStreamGetPriority: priority is NULL");
  npuStream_st* s = nullptr;
  if (npuError_t e = resolveStream(stream, &s)) return e;
  *priority = s->priority;
  return npuSuccess;
}

npuError_t npuStreamGetDevice(npuStream_t stream, int* device) {
  if (!device) return fail(npuErrorInvalidValue, "npuStreamGetDevice: device is NULL");
  npuStream_st* s = nullptr;
  if (npuError_t e = resolveStream(stream, &s)) return e;
  *device = s->dev->index;
  return npuSuccess;
}

npuError_t npuStreamGetId(npuStream_t stream, int* id) {
  if (!id) return fail(npuErrorInvalidValue, "npuStreamGetId: id is NULL");
  npuStream_st* s = nullptr;
  if (npuError_t e = resolveStream(stream, &s)) return e;
  *id = s->id;
  return npuSuccess;
}

npuError_t npuGetDefaultStream(int index, npuStream_t* stream) {
  if (!stream) return fail(npuErrorInvalidValue, "npuGetDefaultStream: stream is NULL");
  if (npuError_t e = checkUsable()) return e;
  Device* dev = device(index);
  if (!dev) return invalidDevice(index);
  return defaultStream(dev, stream);
}

npuError_t npuDeviceSynchronize(void) {
  Device* dev = nullptr;
  if (npuError_t e = currentDevice(&dev)) return e;
  if (npuError_t e = captureCheckDeviceCall("npuDeviceSynchronize", dev)) return e;
  std::vector<npuStream_st*> streams;
  {
    std::lock_guard<std::mutex> lock(dev->streams_mutex);
    streams = dev->streams;
  }
  npuError_t first = npuSuccess;
  std::string first_message;
  for (npuStream_st* s : streams) {
    waitFor(s, s->submitted.load(std::memory_order_acquire));
    npuError_t e = takeError(s, Reader::kDevice);
    if (e != npuSuccess && first == npuSuccess) {
      first = e;
      first_message = npuGetLastErrorMessage();
    }
  }
  hostJoinedDevice(dev);
  return first == npuSuccess ? npuSuccess : fail(first, first_message);
}


npuError_t npuLaunchTask(npuStream_t stream, const char* name, npuTaskFn fn, void* arg) {
  return launch(stream, name, fn, nullptr, false, false, arg);
}

npuError_t npuLaunchTaskWithRelease(npuStream_t stream, const char* name, npuTaskFn fn,
                                    npuTaskRelease release, void* arg) {
  return launch(stream, name, fn, release, true, false, arg);
}

npuError_t npuLaunchShortTaskWithRelease(npuStream_t stream, const char* name, npuTaskFn fn,
                                         npuTaskRelease release, void* arg) {
  return launch(stream, name, fn, release, true, true, arg);
}

npuError_t npuLaunchKernel(npuStream_t stream, const char* name, npuTaskFn fn,
                           npuTaskRelease release, void* arg, unsigned int flags) {
  if (flags & ~npuKernelShort) {
    return fail(npuErrorInvalidValue, "npuLaunchKernel: unknown flags " + hex(reinterpret_cast<void*>(
                                          static_cast<uintptr_t>(flags))));
  }
  // A shadowed kernel is a no-op: on an idle stream it costs less in place than handed over.
  const bool short_task = (flags & npuKernelShort) != 0 || npu::rt::config().shadow;
  return launch(stream, name, fn, release, true, short_task, arg, /*kernel=*/true);
}

int npuSimShadow(void) { return npu::rt::config().shadow ? 1 : 0; }

npuError_t npuSimCharge(npuStream_t stream, const char* name, uint64_t ns) {
  if (!simClockOn()) return npuSuccess;  // nothing models time
  npuStream_st* s = nullptr;
  if (npuError_t e = resolveStream(stream, &s)) return e;
  Task task = workTask(name, nullptr, nullptr, true, nullptr);
  task.kind = Task::kCharge;
  task.payload[0] = ns;
  // Captured into a graph, the op is issued by the graph's launch, at its replay: no issue time.
  task.payload[1] = s->capture.load(std::memory_order_acquire) ? 0 : simHostIssue();
  return enqueueShort(s, task);
}

npuError_t npuSimStreamClock(npuStream_t stream, uint64_t* ns) {
  if (!ns) return fail(npuErrorInvalidValue, "npuSimStreamClock: ns is NULL");
  npuStream_st* s = nullptr;
  if (npuError_t e = resolveStream(stream, &s)) return e;
  *ns = streamSimNs(s);
  return npuSuccess;
}

npuError_t npuSimDeviceClock(int device, uint64_t* ns) {
  if (!ns) return fail(npuErrorInvalidValue, "npuSimDeviceClock: ns is NULL");
  if (npuError_t e = checkUsable()) return e;
  Device* dev = npu::rt::device(device);
  if (!dev) {
    return fail(npuErrorInvalidDevice, "npuSimDeviceClock: device " + std::to_string(device) +
                                           " is not visible");
  }
  *ns = deviceSimNs(dev);
  return npuSuccess;
}

int npuSimInTask(void) { return t_running_stream != nullptr ? 1 : 0; }

uint64_t npuSimTaskClock(void) { return t_running_stream ? streamSimNs(t_running_stream) : 0; }

void npuSimTaskClockAdvanceTo(uint64_t ns) {
  if (t_running_stream) streamSimAtLeast(t_running_stream, ns);
}

npuError_t npuLaunchTaskSync(npuStream_t stream, const char* name, npuTaskFn fn,
                             npuTaskRelease release, void* arg) {
  if (!fn) return fail(npuErrorInvalidValue, "npuLaunchTaskSync: fn is NULL");
  npuStream_st* s = nullptr;
  if (npuError_t e = resolveStream(stream, &s)) return e;
  Task task = workTask(name, fn, release, true, arg);
  return enqueueAndWait("npuLaunchTaskSync", s, task);
}

void npuTaskFail(const char* message) {
  if (t_task_failure) *t_task_failure = message && *message ? message : "task failed";
}

}  // extern "C"
