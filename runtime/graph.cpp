// Graphs: a stream's work captured once and replayed as one submission (CUDA graphs' role).
//
// How it works:
//  - npuStreamBeginCapture points the stream at a Capture. enqueue() reads that pointer once per
//    launch; when it is set, the task is appended to the capture's graph instead of queued.
//    Work tasks must come with a release function (npuLaunchTaskWithRelease): the graph runs them
//    once per replay and releases them when it is destroyed.
//  - Fork and join through events, as in CUDA: a stream that waits for an event recorded in the
//    capture joins it; it is joined back when a stream of the capture waits for an event
//    recorded on it after its last task. The graph is one list in launch order, so a replay runs
//    the work of all joined streams serially in that order; the events between them need no
//    task (launch order already implies them). Records stay in the graph, numbered anew at each
//    launch, so a host can still wait for an event recorded inside a graph.
//  - Replay pushes a single Task::kGraph; the stream worker runs the graph's tasks one after the
//    other through runTask, so failures, skipping and profiling behave as for eager work.
//  - A synchronizing call during a capture cannot be recorded (its answer would be the capture
//    time's, not the replay's): it fails with npuErrorStreamCaptureUnsupported and invalidates
//    the capture, and npuStreamEndCapture then reports the call that did it.
//  - All capture state is under one mutex: captures are rare, launches only read an atomic.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "runtime_internal.h"

struct npuGraph_st {
  static constexpr uint32_t kAlive = 0x47525048;  // "GRPH"
  static constexpr uint32_t kDead = 0xdeadbeef;
  std::atomic<uint32_t> magic{kAlive};
  std::atomic<int> refs{1};  // the user's handle + queued launches
  npu::rt::Device* dev = nullptr;
  std::vector<npu::rt::Task> tasks;  // kWork (with release), kCopy, kMemset, kRecord
};

namespace npu::rt {

struct Capture {
  npuGraph_st* graph = nullptr;
  npuStream_st* origin = nullptr;
  npuStreamCaptureMode mode = npuStreamCaptureModeGlobal;
  std::thread::id thread;  // the thread that began it (ThreadLocal mode)
  struct Member {
    npuStream_st* stream;
    uint64_t appended = 0;     // tasks it added
    uint64_t joined_upto = 0;  // how many of them another member has waited for
  };
  std::vector<Member> members;  // origin first, then joined streams
  struct Record {
    npuStream_st* stream;
    uint64_t mark;  // the stream's `appended` when the event was recorded
  };
  std::unordered_map<npuEvent_st*, Record> records;  // events recorded in the capture
  bool invalidated = false;
  std::string why;  // the call that invalidated it

  Member& member(npuStream_st* s) {
    for (Member& m : members) {
      if (m.stream == s) return m;
    }
    members.push_back({s});
    return members.back();
  }
};

namespace {

std::mutex g_mutex;                 // guards every Capture and g_active
std::vector<Capture*> g_active;     // captures in progress
std::atomic<int> g_active_count{0};  // lets calls skip the mutex when nothing captures

std::string streamName(npuStream_st* s) {
  return "stream " + hex(s) + " on NPU " + std::to_string(streamDevice(s)->index);
}

void invalidate(Capture* c, const std::string& why) {
  if (!c->invalidated) {
    c->invalidated = true;
    c->why = why;
  }
}

npuError_t failInvalidated(const char* api, Capture* c) {
  return fail(npuErrorStreamCaptureInvalidated,
              std::string(api) + ": the graph capture on " + streamName(c->origin) +
                  " was invalidated by an earlier call (" + c->why +
                  "); end the capture (npuStreamEndCapture) and capture again");
}

const char* kMoveOut =
    "move the synchronizing call (e.g. .item(), .cpu(), printing a tensor, "
    "torch.npu.synchronize()) out of the captured region";

void releaseTasks(std::vector<Task>& tasks) {
  for (Task& t : tasks) {
    if (t.kind == Task::kWork && t.release) t.release(t.arg);
    if (t.kind == Task::kRecord) eventRelease(t.event);
  }
  tasks.clear();
  tasks.shrink_to_fit();
}

// Graph structs are kept after destruction (a few dozen bytes), so a stale handle is detected.
void graphRelease(npuGraph_st* g) {
  if (g->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  releaseTasks(g->tasks);
}

npuError_t validateGraph(const char* api, npuGraph_t graph) {
  if (!graph) return fail(npuErrorInvalidResourceHandle, std::string(api) + ": graph is NULL");
  if (graph->magic.load(std::memory_order_relaxed) != npuGraph_st::kAlive) {
    return fail(npuErrorInvalidResourceHandle,
                std::string(api) + ": graph " + hex(graph) + " was destroyed or never created");
  }
  return npuSuccess;
}

}  // namespace

npuGraph_st* captureGraphOf(npuStream_st* s) {
  if (!streamCapture(s).load(std::memory_order_acquire)) return nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  Capture* c = streamCapture(s).load();
  return c ? c->graph : nullptr;
}

namespace {

// Ends `c` on every member stream and forgets it; the caller holds g_mutex.
void detach(Capture* c) {
  for (Capture::Member& m : c->members) streamCapture(m.stream).store(nullptr);
  g_active.erase(std::remove(g_active.begin(), g_active.end(), c), g_active.end());
  g_active_count.fetch_sub(1, std::memory_order_release);
}

struct GraphLaunch {
  npuGraph_st* graph;
  std::vector<uint64_t> record_seqs;  // the number each record of the graph gets this time
};

void releaseLaunch(void* arg) {
  auto* launch = static_cast<GraphLaunch*>(arg);
  graphRelease(launch->graph);
  delete launch;
}

}  // namespace

npuError_t captureAppend(Capture* c, npuStream_st* s, const Task& task) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (c->invalidated) return failInvalidated("launch", c);
  if (task.kind == Task::kWork && !task.replayable) {
    const std::string why = "npuLaunchTask of task '" + std::string(task.name) + "'";
    invalidate(c, why);
    return fail(npuErrorStreamCaptureUnsupported,
                "npuLaunchTask: " + streamName(s) + " is capturing a graph and task '" +
                    task.name + "' was launched without a release function, so a replay "
                    "could not own its argument; launch it with npuLaunchTaskWithRelease");
  }
  c->graph->tasks.push_back(task);
  ++c->member(s).appended;
  return npuSuccess;
}

npuError_t captureRecord(Capture* c, npuStream_st* s, npuEvent_st* event) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (c->invalidated) return failInvalidated("npuEventRecord", c);
  Task task;
  task.kind = Task::kRecord;
  task.event = event;
  std::snprintf(task.name, sizeof(task.name), "event record");
  eventRetain(event);  // the graph's reference, dropped when the graph is destroyed
  c->graph->tasks.push_back(task);
  c->records[event] = {s, c->member(s).appended};
  return npuSuccess;
}

bool captureWait(npuStream_st* s, npuEvent_st* event, npuError_t* result) {
  Capture* mine = streamCapture(s).load(std::memory_order_acquire);
  if (!mine && g_active_count.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(g_mutex);
  Capture* recorded_in = nullptr;
  for (Capture* c : g_active) {
    if (c->records.count(event)) recorded_in = c;
  }
  if (!recorded_in) {
    if (!mine) return false;  // an ordinary wait
    const std::string why = "npuStreamWaitEvent on an event recorded outside the capture";
    invalidate(mine, why);
    *result = fail(npuErrorStreamCaptureUnsupported,
                   "npuStreamWaitEvent: " + streamName(s) + " is capturing a graph and event " +
                       hex(event) + " was not recorded in that capture, so a replay could not "
                       "wait for it; record the event inside the captured region, or make the "
                       "wait before npuStreamBeginCapture");
    return true;
  }
  if (recorded_in->invalidated) {
    *result = failInvalidated("npuStreamWaitEvent", recorded_in);
    return true;
  }
  if (mine && mine != recorded_in) {
    invalidate(mine, "npuStreamWaitEvent on an event of another capture");
    *result = fail(npuErrorStreamCaptureUnsupported,
                   "npuStreamWaitEvent: event " + hex(event) + " was recorded in another graph "
                   "capture than the one " + streamName(s) + " records into");
    return true;
  }
  if (!mine) {  // fork: the stream joins the capture
    recorded_in->member(s);
    streamCapture(s).store(recorded_in, std::memory_order_release);
  } else {  // a join: the waiter now depends on the recording stream's work up to the mark
    const Capture::Record& rec = recorded_in->records[event];
    if (rec.stream != s) {
      Capture::Member& m = recorded_in->member(rec.stream);
      m.joined_upto = std::max(m.joined_upto, rec.mark);
    }
  }
  *result = npuSuccess;  // launch order already orders a replay: no wait task
  return true;
}

npuError_t captureCheckDeviceCall(const char* api, Device* dev) {
  if (g_active_count.load(std::memory_order_acquire) == 0) return npuSuccess;
  std::lock_guard<std::mutex> lock(g_mutex);
  for (Capture* c : g_active) {
    if (c->invalidated || c->graph->dev != dev) continue;
    const bool forbids = c->mode == npuStreamCaptureModeGlobal ||
                         (c->mode == npuStreamCaptureModeThreadLocal &&
                          c->thread == std::this_thread::get_id());
    if (!forbids) continue;
    invalidate(c, api);
    return fail(npuErrorStreamCaptureUnsupported,
                std::string(api) + ": not allowed while " + streamName(c->origin) +
                    " is capturing a graph (" +
                    (c->mode == npuStreamCaptureModeGlobal ? "global" : "thread-local") +
                    " capture mode); the capture is invalidated. Fix: " + kMoveOut +
                    ", or capture in relaxed mode");
  }
  return npuSuccess;
}

npuError_t captureCheckStreamSync(const char* api, npuStream_st* s) {
  Capture* c = streamCapture(s).load(std::memory_order_acquire);
  if (!c) return npuSuccess;
  std::lock_guard<std::mutex> lock(g_mutex);
  invalidate(c, api);
  return fail(npuErrorStreamCaptureUnsupported,
              std::string(api) + ": " + streamName(s) + " is capturing a graph, so its work has "
              "not run and cannot be waited for; the capture is invalidated. Fix: " + kMoveOut);
}

npuError_t captureCheckEventSync(const char* api, npuEvent_st* event) {
  if (g_active_count.load(std::memory_order_acquire) == 0) return npuSuccess;
  std::lock_guard<std::mutex> lock(g_mutex);
  for (Capture* c : g_active) {
    if (!c->records.count(event)) continue;
    invalidate(c, api);
    return fail(npuErrorStreamCaptureUnsupported,
                std::string(api) + ": event " + hex(event) + " was recorded in the graph capture "
                "in progress on " + streamName(c->origin) + "; its work runs only when the graph "
                "is launched. The capture is invalidated. Fix: " + kMoveOut);
  }
  return npuSuccess;
}

void runGraphLaunch(npuStream_st* s, Task& task) {
  auto* launch = static_cast<GraphLaunch*>(task.arg);
  size_t record = 0;
  for (const Task& captured : launch->graph->tasks) {
    Task t = captured;
    t.launcher = task.launcher;  // failures are told to whoever launched the graph
    t.prof_session = task.prof_session;
    t.correlation_id = task.correlation_id;
    t.launch_ns = task.launch_ns;
    t.launch_thread = task.launch_thread;
    if (t.kind == Task::kRecord) t.event_seq = launch->record_seqs[record++];
    runTask(s, t);
  }
}

}  // namespace npu::rt

using namespace npu::rt;

extern "C" {

npuError_t npuStreamBeginCapture(npuStream_t stream, npuStreamCaptureMode mode) {
  npuStream_st* s = nullptr;
  if (npuError_t e = resolveStream(stream, &s)) return e;
  if (mode != npuStreamCaptureModeGlobal && mode != npuStreamCaptureModeThreadLocal &&
      mode != npuStreamCaptureModeRelaxed) {
    return fail(npuErrorInvalidValue, "npuStreamBeginCapture: mode " + std::to_string(mode) +
                                          " is not a capture mode; use global (0), "
                                          "thread-local (1) or relaxed (2)");
  }
  if (streamIsDefault(s)) {
    return fail(npuErrorStreamCaptureUnsupported,
                "npuStreamBeginCapture: the default stream of NPU " +
                    std::to_string(streamDevice(s)->index) +
                    " cannot capture; capture on a stream made with npuStreamCreate "
                    "(torch.npu.graph uses a side stream)");
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  if (streamCapture(s).load()) {
    return fail(npuErrorStreamCaptureUnsupported,
                "npuStreamBeginCapture: " + streamName(s) + " is already capturing a graph");
  }
  auto* c = new Capture();
  c->graph = new npuGraph_st();
  c->graph->dev = streamDevice(s);
  c->origin = s;
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->members.push_back({s});
  g_active.push_back(c);
  g_active_count.fetch_add(1, std::memory_order_release);
  streamCapture(s).store(c, std::memory_order_release);
  return npuSuccess;
}

npuError_t npuStreamEndCapture(npuStream_t stream, npuGraph_t* graph) {
  if (!graph) return fail(npuErrorInvalidValue, "npuStreamEndCapture: graph is NULL");
  *graph = nullptr;
  npuStream_st* s = nullptr;
  if (npuError_t e = resolveStream(stream, &s)) return e;
  std::lock_guard<std::mutex> lock(g_mutex);
  Capture* c = streamCapture(s).load();
  if (!c) {
    return fail(npuErrorInvalidValue, "npuStreamEndCapture: " + streamName(s) +
                                          " is not capturing (call npuStreamBeginCapture first)");
  }
  if (c->origin != s) {
    return fail(npuErrorInvalidValue, "npuStreamEndCapture: " + streamName(s) +
                                          " joined a capture begun on " + streamName(c->origin) +
                                          "; end the capture on that stream");
  }
  std::string unjoined;
  for (const Capture::Member& m : c->members) {
    if (m.stream != s && m.appended > m.joined_upto) {
      unjoined = streamName(m.stream) + " has " + std::to_string(m.appended - m.joined_upto) +
                 " task(s) no stream of the capture waited for";
      break;
    }
  }
  detach(c);
  npuError_t result = npuSuccess;
  if (c->invalidated) {
    result = failInvalidated("npuStreamEndCapture", c);
  } else if (!unjoined.empty()) {
    result = fail(npuErrorStreamCaptureUnjoined,
                  "npuStreamEndCapture: " + unjoined + "; record an event on it after its last "
                  "task and make " + streamName(s) + " wait for that event before ending the "
                  "capture");
  }
  if (result == npuSuccess) {
    *graph = c->graph;
  } else {
    releaseTasks(c->graph->tasks);
    if (sanOn()) sanGraphForget(c->graph);
    delete c->graph;  // never handed out
  }
  delete c;
  return result;
}

npuError_t npuStreamIsCapturing(npuStream_t stream, npuStreamCaptureStatus* status) {
  if (!status) return fail(npuErrorInvalidValue, "npuStreamIsCapturing: status is NULL");
  npuStream_st* s = nullptr;
  if (npuError_t e = resolveStream(stream, &s)) return e;
  if (!streamCapture(s).load(std::memory_order_acquire)) {  // the common case: no lock
    *status = npuStreamCaptureStatusNone;
    return npuSuccess;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  Capture* c = streamCapture(s).load();
  *status = !c                ? npuStreamCaptureStatusNone
            : c->invalidated ? npuStreamCaptureStatusInvalidated
                             : npuStreamCaptureStatusActive;
  return npuSuccess;
}

npuError_t npuGraphLaunch(npuGraph_t graph, npuStream_t stream) {
  if (npuError_t e = validateGraph("npuGraphLaunch", graph)) return e;
  npuStream_st* s = nullptr;
  if (npuError_t e = resolveStream(stream, &s)) return e;
  if (streamCapture(s).load(std::memory_order_acquire)) {
    return fail(npuErrorStreamCaptureUnsupported,
                "npuGraphLaunch: " + streamName(s) + " is capturing; launching a graph into "
                "another capture is not supported");
  }
  if (streamDevice(s) != graph->dev) {
    return fail(npuErrorInvalidValue, "npuGraphLaunch: the graph was captured on NPU " +
                                          std::to_string(graph->dev->index) + " but " +
                                          streamName(s) + " belongs to another device; launch "
                                          "it on a stream of NPU " +
                                          std::to_string(graph->dev->index));
  }
  auto* launch = new GraphLaunch{graph, {}};
  for (const Task& t : graph->tasks) {
    if (t.kind != Task::kRecord) continue;
    launch->record_seqs.push_back(eventNextRecord(t.event));
    eventRetain(t.event);  // runTask releases it after marking the record
  }
  graph->refs.fetch_add(1, std::memory_order_relaxed);
  Task task;
  task.kind = Task::kGraph;
  task.arg = launch;
  task.release = releaseLaunch;
  std::snprintf(task.name, sizeof(task.name), "graph (%zu tasks)", graph->tasks.size());
  // The stream sanitizer: the replay makes the capture's accesses, on this stream, now.
  if (sanOn()) sanGraphLaunch(graph, s);
  return enqueue(s, task);
}

npuError_t npuGraphGetTaskCount(npuGraph_t graph, size_t* count) {
  if (!count) return fail(npuErrorInvalidValue, "npuGraphGetTaskCount: count is NULL");
  if (npuError_t e = validateGraph("npuGraphGetTaskCount", graph)) return e;
  *count = graph->tasks.size();
  return npuSuccess;
}

npuError_t npuGraphDebugDotPrint(npuGraph_t graph, const char* path) {
  if (!path) return fail(npuErrorInvalidValue, "npuGraphDebugDotPrint: path is NULL");
  if (npuError_t e = validateGraph("npuGraphDebugDotPrint", graph)) return e;
  FILE* out = std::fopen(path, "w");
  if (!out) {
    return fail(npuErrorInvalidValue, std::string("npuGraphDebugDotPrint: cannot write '") +
                                          path + "': " + std::strerror(errno));
  }
  // A replay runs the tasks in capture order, one after the other: the graph is a chain.
  static const char* const kKinds[] = {"kernel", "event record", "event wait",
                                       "memcpy",  "memset",       "graph",
                                       "modeled time"};
  std::fprintf(out, "digraph npu_graph {\n  label=\"NPU graph: %zu tasks\";\n"
                    "  node [shape=box];\n", graph->tasks.size());
  for (size_t i = 0; i < graph->tasks.size(); ++i) {
    const Task& task = graph->tasks[i];
    std::string name;
    for (const char* c = task.name; *c; ++c) {  // a DOT string: quotes and backslashes escaped
      if (*c == '"' || *c == '\\') name += '\\';
      name += *c;
    }
    std::fprintf(out, "  t%zu [label=\"%zu: %s\\n(%s)\"];\n", i, i, name.c_str(),
                 kKinds[task.kind]);
    if (i > 0) std::fprintf(out, "  t%zu -> t%zu;\n", i - 1, i);
  }
  std::fprintf(out, "}\n");
  if (std::fclose(out) != 0) {
    return fail(npuErrorInvalidValue, std::string("npuGraphDebugDotPrint: writing '") + path +
                                          "' failed: " + std::strerror(errno));
  }
  return npuSuccess;
}

npuError_t npuGraphDestroy(npuGraph_t graph) {
  if (npuError_t e = validateGraph("npuGraphDestroy", graph)) return e;
  graph->magic.store(npuGraph_st::kDead);
  graphRelease(graph);  // queued launches keep the tasks until they ran
  if (sanOn()) sanGraphForget(graph);
  static std::mutex graveyard_mutex;
  static auto* graveyard = new std::vector<npuGraph_st*>();  // keeps them reachable
  std::lock_guard<std::mutex> lock(graveyard_mutex);
  graveyard->push_back(graph);
  return npuSuccess;
}

}  // extern "C"
