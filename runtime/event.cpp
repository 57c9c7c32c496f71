// Events: markers in a stream that hosts and other streams can wait for, with timestamps.
//
// An event counts its records. Recording enqueues a marker carrying the new record number;
// when the stream reaches it, the event's completed number catches up and the time is taken.
// Queries and waits compare the two numbers, so re-recording an event is well defined: a wait
// refers to the record that was last enqueued when the wait was issued, as in CUDA.
#include <cinttypes>
#include <cstdio>
#include <vector>

#include "runtime_internal.h"

struct npuEvent_st {
  static constexpr uint32_t kAlive = 0x45564e54;  // "EVNT"
  static constexpr uint32_t kDead = 0xdeadbeef;
  std::atomic<uint32_t> magic{kAlive};
  std::atomic<int> refs{1};  // the user's handle + queued tasks naming the event
  unsigned flags = 0;
  std::mutex mutex;
  std::condition_variable cv;
  uint64_t recorded = 0;                // records enqueued
  std::atomic<uint64_t> completed{0};   // records reached by their stream
  uint64_t time_ns = 0;                 // when the latest completed record was reached
  uint64_t sim_ns = 0;                  // its stream's simulated clock then (shadow execution)
  int waiters = 0;
  std::string error;  // the recording stream's error when the latest record completed, or ""
  npuStream_st* done_stream = nullptr;  // the latest completed record's stream and position
  uint64_t done_position = 0;
};

namespace npu::rt {
namespace {

npuError_t validateEvent(const char* api, npuEvent_t event) {
  if (!event) return fail(npuErrorInvalidResourceHandle, std::string(api) + ": event is NULL");
  if (event->magic.load(std::memory_order_relaxed) != npuEvent_st::kAlive) {
    return fail(npuErrorInvalidResourceHandle,
                std::string(api) + ": event " + hex(event) + " was destroyed or never created");
  }
  return npuSuccess;
}

}  // namespace

void eventRetain(npuEvent_st* event) { event->refs.fetch_add(1, std::memory_order_relaxed); }

// Event structs are recycled, never freed: a stale handle then reads a valid struct whose
// magic says it is dead (unless it was reused), instead of freed memory.
std::mutex g_pool_mutex;
std::vector<npuEvent_st*>& eventPool() {
  static auto* pool = new std::vector<npuEvent_st*>();
  return *pool;
}

void eventRelease(npuEvent_st* event) {
  if (event->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  eventPool().push_back(event);
}

static npuEvent_st* eventAcquire(unsigned flags) {
  npuEvent_st* event = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_pool_mutex);
    if (!eventPool().empty()) {
      event = eventPool().back();
      eventPool().pop_back();
    }
  }
  if (!event) event = new npuEvent_st();
  std::lock_guard<std::mutex> lock(event->mutex);
  event->refs.store(1);
  event->flags = flags;
  event->recorded = 0;
  event->completed.store(0);
  event->time_ns = 0;
  event->sim_ns = 0;
  event->waiters = 0;
  event->error.clear();
  event->done_stream = nullptr;
  event->done_position = 0;
  event->magic.store(npuEvent_st::kAlive);
  return event;
}

void eventComplete(npuEvent_st* event, uint64_t seq, const std::string& error,
                   npuStream_st* stream, uint64_t position, uint64_t sim_ns) {
  std::lock_guard<std::mutex> lock(event->mutex);
  if (seq > event->completed.load(std::memory_order_relaxed)) {
    event->time_ns = nowNs();
    event->sim_ns = sim_ns;
    event->error = error;
    event->done_stream = stream;
    event->done_position = position;
    event->completed.store(seq, std::memory_order_release);
  }
  if (event->waiters > 0) event->cv.notify_all();
}

std::string eventWait(npuEvent_st* event, uint64_t seq, uint64_t* sim_ns) {
  bool done =
      spinThenYield([&] { return event->completed.load(std::memory_order_acquire) >= seq; });
  npuStream_st* stream = nullptr;
  uint64_t position = 0;
  std::string error;
  {
    std::unique_lock<std::mutex> lock(event->mutex);
    if (!done) {
      ++event->waiters;
      event->cv.wait(lock,
                     [&] { return event->completed.load(std::memory_order_acquire) >= seq; });
      --event->waiters;
    }
    stream = event->done_stream;
    position = event->done_position;
    error = event->error;
    if (sim_ns) *sim_ns = event->sim_ns;
  }
  // Also until the recording stream has counted the record (a moment after the event
  // completed), so that whatever the waiter does next -- a stream running on, a host reading
  // the event -- sees the record as done everywhere, as npuEventQuery reports it.
  if (stream) waitForStreamPosition(stream, position);
  return error;
}

uint64_t eventNextRecord(npuEvent_st* event) {
  std::lock_guard<std::mutex> lock(event->mutex);
  return ++event->recorded;
}

namespace {

// The error a completed record carries, as the calling thread's error.
npuError_t recordError(const char* api, const std::string& error) {
  return fail(npuErrorLaunchFailure, std::string(api) +
                                         ": the event was recorded on a stream after a task "
                                         "failed there, so the work it marks did not run: " +
                                         error);
}

}  // namespace

}  // namespace npu::rt

using namespace npu::rt;

extern "C" {

npuError_t npuEventCreate(npuEvent_t* event) {
  return npuEventCreateWithFlags(event, npuEventDefault);
}

npuError_t npuEventCreateWithFlags(npuEvent_t* event, unsigned int flags) {
  if (!event) return fail(npuErrorInvalidValue, "npuEventCreate: event is NULL");
  if (flags & ~npuEventDisableTiming) {
    return fail(npuErrorInvalidValue, "npuEventCreateWithFlags: unknown flags " +
                                          std::to_string(flags) +
                                          "; use npuEventDefault or npuEventDisableTiming");
  }
  *event = eventAcquire(flags);
  return npuSuccess;
}

npuError_t npuEventDestroy(npuEvent_t event) {
  if (npuError_t e = validateEvent("npuEventDestroy", event)) return e;
  event->magic.store(npuEvent_st::kDead);
  eventRelease(event);  // queued tasks that name it keep it alive until they ran
  return npuSuccess;
}

npuError_t npuEventRecord(npuEvent_t event, npuStream_t stream) {
  if (npuError_t e = validateEvent("npuEventRecord", event)) return e;
  npuStream_st* s = nullptr;
  if (npuError_t e = resolveStream(stream, &s)) return e;
  if (Capture* c = streamCapture(s).load(std::memory_order_acquire)) {
    return captureRecord(c, s, event);  // numbered when the graph is launched
  }
  if (sanOn()) sanEventRecord(event, s);
  if (completeRecordIfIdle(s, event)) return npuSuccess;  // nothing ahead of it to wait for
  Task task;
  task.kind = Task::kRecord;
  task.event = event;
  std::snprintf(task.name, sizeof(task.name), "event record");
  {
    std::lock_guard<std::mutex> lock(event->mutex);
    task.event_seq = ++event->recorded;
  }
  eventRetain(event);
  return enqueue(s, task);
}

npuError_t npuStreamWaitEvent(npuStream_t stream, npuEvent_t event, unsigned int flags) {
  if (npuError_t e = validateEvent("npuStreamWaitEvent", event)) return e;
  npuStream_st* s = nullptr;
  if (npuError_t e = resolveStream(stream, &s)) return e;
  if (npuError_t result; captureWait(s, event, &result)) return result;
  if (sanOn()) sanStreamWait(s, event);
  Task task;
  task.kind = Task::kWait;
  task.event = event;
  std::snprintf(task.name, sizeof(task.name), "event wait");
  {
    std::lock_guard<std::mutex> lock(event->mutex);
    task.event_seq = event->recorded;
    // A record that is complete, healthy and counted by its stream leaves nothing to wait for:
    // the wait task would find it so and pass at once, at the cost of a hand-off. (Not under
    // the simulated clock: the wait moves the stream's clock, in its order.)
    if (task.event_seq != 0 && !simClockOn() && event->completed.load(std::memory_order_acquire) >= task.event_seq &&
        event->error.empty() &&
        (event->done_stream == nullptr ||
         streamReached(event->done_stream, event->done_position))) {
      return npuSuccess;
    }
  }
  if (task.event_seq == 0) return npuSuccess;  // never recorded: nothing to wait for
  eventRetain(event);
  return enqueue(s, task);
}

npuError_t npuEventQuery(npuEvent_t event) {
  if (npuError_t e = validateEvent("npuEventQuery", event)) return e;
  if (npuError_t e = captureCheckEventSync("npuEventQuery", event)) return e;
  std::lock_guard<std::mutex> lock(event->mutex);
  if (event->completed.load() < event->recorded) return npuErrorNotReady;
  if (event->done_stream && !streamReached(event->done_stream, event->done_position)) {
    return npuErrorNotReady;  // a moment: the stream is counting the record as done
  }
  if (!event->error.empty()) return recordError("npuEventQuery", event->error);
  hostJoinedEvent(event, event->sim_ns);
  return npuSuccess;
}

npuError_t npuEventSynchronize(npuEvent_t event) {
  if (npuError_t e = validateEvent("npuEventSynchronize", event)) return e;
  if (npuError_t e = captureCheckEventSync("npuEventSynchronize", event)) return e;
  uint64_t target;
  {
    std::lock_guard<std::mutex> lock(event->mutex);
    target = event->recorded;
  }
  if (target == 0) return npuSuccess;  // never recorded
  uint64_t sim = 0;
  std::string error = eventWait(event, target, &sim);
  if (!error.empty()) return recordError("npuEventSynchronize", error);
  hostJoinedEvent(event, sim);
  return npuSuccess;
}

npuError_t npuEventElapsedTime(float* ms, npuEvent_t start, npuEvent_t end) {
  if (!ms) return fail(npuErrorInvalidValue, "npuEventElapsedTime: ms is NULL");
  if (npuError_t e = validateEvent("npuEventElapsedTime", start)) return e;
  if (npuError_t e = validateEvent("npuEventElapsedTime", end)) return e;
  uint64_t times[2];
  npuEvent_t events[2] = {start, end};
  for (int i = 0; i < 2; ++i) {
    npuEvent_t ev = events[i];
    const char* which = i == 0 ? "start" : "end";
    std::lock_guard<std::mutex> lock(ev->mutex);
    if (ev->flags & npuEventDisableTiming) {
      return fail(npuErrorInvalidResourceHandle, std::string("npuEventElapsedTime: the ") + which +
                                                     " event was created with timing disabled");
    }
    if (ev->recorded == 0) {
      return fail(npuErrorInvalidResourceHandle,
                  std::string("npuEventElapsedTime: the ") + which + " event was never recorded");
    }
    if (ev->completed.load() < ev->recorded) return npuErrorNotReady;
    times[i] = simClockOn() ? ev->sim_ns : ev->time_ns;
  }
  *ms = static_cast<float>((static_cast<double>(times[1]) - static_cast<double>(times[0])) / 1e6);
  return npuSuccess;
}

}  // extern "C"
