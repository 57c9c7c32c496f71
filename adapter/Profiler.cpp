// The profiler bridge (see Profiler.h).
//
// How it works:
//  - A session (torch_npu.profiler) adds a thread-local RecordFunction callback on the thread
//    that starts it; at::ThreadLocalState carries it to the autograd engine's threads, and
//    stream workers (which run kernels, not operators) never see it.
//  - Entering an operator takes a fresh correlation id and makes it the runtime's
//    per-thread correlation id until the operator exits, when the previous one is restored.
//    So a kernel is linked to the INNERMOST operator that launched it (aten::mm rather than
//    aten::matmul), as CUDA traces link kernels to the op around cudaLaunchKernel. User scopes
//    (torch.profiler.record_function) are recorded but take no correlation id.
//  - Every time is the runtime's clock (npuProfilerClockNs, CLOCK_MONOTONIC), so host ops,
//    device records and Python's time.monotonic_ns() compare directly.
//  - Stop removes the callback, closes the runtime session (which waits for the streams) and
//    hands everything to Python as lists of tuples; the trace files are written there.
//  - The Kineto plugin (when torch has Kineto) does the same for torch.profiler: Kineto pushes
//    its own correlation id for every op on the op's thread, the plugin forwards it to the
//    runtime, and the drained records become Kineto activities linked to those ops.
#include "Profiler.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <ATen/record_function.h>

#include <chrono>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "npu/caching_allocator.h"
#include "npu/profiler.h"
#include "npu/runtime.h"

#if __has_include(<IActivityProfiler.h>)
#define NPU_KINETO_PLUGIN 1
#ifndef USE_KINETO
#define USE_KINETO  // the headers below only declare the registry when Kineto is in
#endif
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#endif

#ifdef NPU_KINETO_PLUGIN
// IActivityProfilerSession::getTraceBuffer returns std::unique_ptr<CpuTraceBuffer>, a type that
// torch's headers only declare. Ours always returns an empty one, but even that needs a deleter
// for the incomplete type; this one is never called on a non-null pointer (it would be a bug).
template <>
struct std::default_delete<libkineto::CpuTraceBuffer> {
  void operator()(libkineto::CpuTraceBuffer* buffer) const noexcept {
    if (buffer != nullptr) std::abort();
  }
};
#endif

namespace py = pybind11;

namespace torch_npu::profiler {

std::atomic<bool> g_record_memory{false};

namespace {

int32_t systemThreadId() {
  thread_local const auto tid = static_cast<int32_t>(syscall(SYS_gettid));
  return tid;
}

// ---- the torch_npu.profiler session ---------------------------------------------------------

struct HostOp {
  std::string name;
  uint64_t correlation_id;  // 0 for user scopes
  uint64_t start_ns, end_ns;
  int32_t thread;
  bool user_scope;
  std::string input_shapes;  // "" unless record_shapes
  std::string input_dtypes;
};

struct MemoryEvent {
  uint64_t ts_ns;
  uintptr_t ptr;
  int64_t delta_bytes;
  int device;
  int64_t allocated_bytes, reserved_bytes;  // SIZE: the allocator's totals after the event
  int32_t thread;
};

struct Session {
  std::mutex mutex;
  bool open = false;
  bool record_shapes = false;
  bool device = false;  // the runtime session is ours
  at::CallbackHandle callback = 0;
  std::vector<HostOp> ops;
  std::vector<MemoryEvent> memory;
};

Session& session() {
  static auto* s = new Session();  // never destroyed: ops may exit during interpreter teardown
  return *s;
}

std::atomic<uint64_t> g_next_correlation_id{1};

struct OpContext final : at::ObserverContext {
  uint64_t start_ns = 0;
  uint64_t correlation_id = 0;
  uint64_t previous_correlation_id = 0;
  std::string input_shapes, input_dtypes;
};

void describeInputs(const at::RecordFunction& fn, std::string* shapes, std::string* dtypes) {
  std::ostringstream s, d;
  s << '[';
  d << '[';
  bool first = true;
  for (const c10::IValue& value : fn.inputs()) {
    if (!first) {
      s << ", ";
      d << ", ";
    }
    first = false;
    if (value.isTensor() && value.toTensor().defined()) {
      const at::Tensor& t = value.toTensor();
      s << t.sizes();
      d << c10::toString(t.scalar_type());
    } else {
      s << "[]";
      d << value.tagKind();
    }
  }
  s << ']';
  d << ']';
  *shapes = s.str();
  *dtypes = d.str();
}

std::unique_ptr<at::ObserverContext> onOpEnter(const at::RecordFunction& fn) {
  auto ctx = std::make_unique<OpContext>();
  if (fn.scope() != at::RecordScope::USER_SCOPE) {
    ctx->correlation_id = g_next_correlation_id.fetch_add(1, std::memory_order_relaxed);
    ctx->previous_correlation_id = npuProfilerSetCorrelationId(ctx->correlation_id);
  }
  if (session().record_shapes && fn.needsInputs()) {
    describeInputs(fn, &ctx->input_shapes, &ctx->input_dtypes);
  }
  ctx->start_ns = npuProfilerClockNs();  // last, so the op's own bookkeeping is outside it
  return ctx;
}

void onOpExit(const at::RecordFunction& fn, at::ObserverContext* base) {
  const uint64_t end_ns = npuProfilerClockNs();
  auto* ctx = static_cast<OpContext*>(base);
  if (ctx->correlation_id != 0) npuProfilerSetCorrelationId(ctx->previous_correlation_id);
  HostOp op{fn.name(),
            ctx->correlation_id,
            ctx->start_ns,
            end_ns,
            systemThreadId(),
            fn.scope() == at::RecordScope::USER_SCOPE,
            std::move(ctx->input_shapes),
            std::move(ctx->input_dtypes)};
  Session& s = session();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.open) s.ops.push_back(std::move(op));
}

void throwIfRuntimeFailed(npuError_t error, const char* what) {
  if (error == npuSuccess) return;
  throw std::runtime_error(std::string(what) + ": " + npuGetErrorName(error) + ": " +
                           npuGetLastErrorMessage());
}

void startSession(bool host, bool device, bool record_shapes, bool profile_memory) {
  Session& s = session();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.open) {
      throw std::runtime_error(
          "torch_npu.profiler: a profiler is already running in this process; stop it "
          "before starting another");
    }
  }
  if (device) {
    const npuError_t error = npuProfilerStart();
    if (error == npuErrorNotReady) {
      throw std::runtime_error(
          "torch_npu.profiler: the NPU activity recorder is in use (torch.profiler with "
          "ProfilerActivity.PrivateUse1 is running?); one device profiler at a time");
    }
    throwIfRuntimeFailed(error, "torch_npu.profiler: npuProfilerStart failed");
  }
  std::lock_guard<std::mutex> lock(s.mutex);
  s.open = true;
  s.device = device;
  s.record_shapes = record_shapes;
  s.ops.clear();
  s.memory.clear();
  // Without host ops there are no correlation ids either: device records only (the
  // PROFILING_MODE table, which must not grow with every op of a long program).
  if (host) {
    at::RecordFunctionCallback callback(&onOpEnter, &onOpExit);
    callback.needsInputs(record_shapes)
        .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
                 at::RecordScope::USER_SCOPE});
    s.callback = at::addThreadLocalCallback(callback);
  }
  g_record_memory.store(profile_memory, std::memory_order_relaxed);
}

py::dict stopSession() {
  Session& s = session();
  bool device = false;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.open) throw std::runtime_error("torch_npu.profiler: no profiler is running");
    if (s.callback != 0) at::removeCallback(s.callback);
    s.callback = 0;
    s.open = false;
    device = s.device;
    g_record_memory.store(false, std::memory_order_relaxed);
  }
  std::vector<npuActivityRecord> records;
  uint64_t dropped = 0;
  if (device) {
    {
      py::gil_scoped_release no_gil;  // Stop waits for the streams
      throwIfRuntimeFailed(npuProfilerStop(), "torch_npu.profiler: npuProfilerStop failed");
    }
    std::vector<npuActivityRecord> chunk(4096);
    while (size_t n = npuProfilerDrain(chunk.data(), chunk.size())) {
      records.insert(records.end(), chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(n));
    }
    dropped = npuProfilerDroppedRecords();
  }
  py::list ops, activities, memory;
  std::lock_guard<std::mutex> lock(s.mutex);
  for (const HostOp& op : s.ops) {
    ops.append(py::make_tuple(op.name, op.correlation_id, op.start_ns, op.end_ns, op.thread,
                              op.user_scope, op.input_shapes, op.input_dtypes));
  }
  for (const npuActivityRecord& r : records) {
    activities.append(py::make_tuple(r.kind, std::string(r.name), r.correlation_id, r.launch_ns,
                                     r.start_ns, r.end_ns, r.device, r.stream_id, r.bytes,
                                     r.memcpy_kind, r.launch_thread));
  }
  for (const MemoryEvent& m : s.memory) {
    memory.append(py::make_tuple(m.ts_ns, m.ptr, m.delta_bytes, m.device, m.allocated_bytes,
                                 m.reserved_bytes, m.thread));
  }
  s.ops.clear();
  s.memory.clear();
  py::dict result;
  result["ops"] = ops;
  result["activities"] = activities;
  result["memory"] = memory;
  result["dropped"] = dropped;
  return result;
}

bool sessionOpen() {
  Session& s = session();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.open;
}

// ---- the Kineto plugin (torch.profiler) -------------------------------------------------------

#ifdef NPU_KINETO_PLUGIN

// Kineto keeps raw pointers to the activities a session logs and offers plugins no way to hand
// over their ownership (CpuTraceBuffer is not in torch's headers), while torch reads them back
// as late as export_chrome_trace(). So they are kept for the life of the process: about 200
// bytes per kernel profiled through torch.profiler.
std::mutex g_kineto_store_mutex;
std::vector<std::unique_ptr<libkineto::GenericTraceActivity>>& kinetoStore() {
  static auto* store = new std::vector<std::unique_ptr<libkineto::GenericTraceActivity>>();
  return *store;
}

thread_local std::vector<uint64_t> t_kineto_correlation_stack;

const char* memcpyKindName(int kind) {
  switch (kind) {
    case npuMemcpyHostToDevice:
      return "HtoD";
    case npuMemcpyDeviceToHost:
      return "DtoH";
    case npuMemcpyDeviceToDevice:
      return "DtoD";
    default:
      return "HtoH";
  }
}

class KinetoSession final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    // Kineto's clock is the Unix epoch in ns; ours is CLOCK_MONOTONIC.
    const auto wall = std::chrono::system_clock::now().time_since_epoch();
    epoch_offset_ns_ =
        std::chrono::duration_cast<std::chrono::nanoseconds>(wall).count() -
        static_cast<int64_t>(npuProfilerClockNs());
    const npuError_t error = npuProfilerStart();
    if (error != npuSuccess) {
      status_ = libkineto::TraceStatus::ERROR;
      errors_.push_back(std::string("SimNPU: device activities not recorded: ") +
                        npuGetLastErrorMessage());
      return;
    }
    started_ = true;
    owns_records_ = true;
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    if (!started_) return;
    npuProfilerStop();
    started_ = false;  // owns_records_ stays: processTrace, after stop, drains what we recorded
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return errors_; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, nullptr, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback linked_activity, int64_t /*start*/,
                    int64_t /*end*/) override {
    // Without our own runtime session the records belong to whoever holds it.
    if (!owns_records_) return;
    std::vector<npuActivityRecord> records(4096);
    std::vector<libkineto::GenericTraceActivity*> logged;
    {
      std::lock_guard<std::mutex> lock(g_kineto_store_mutex);
      while (size_t n = npuProfilerDrain(records.data(), records.size())) {
        for (size_t i = 0; i < n; ++i) addActivities(records[i], linked_activity, logged);
      }
    }
    for (const auto* activity : logged) activity->log(logger);
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(
        libkineto::DeviceInfo{0, 0, "SimNPU", "NPU"});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> infos;
    for (const auto& [device, stream] : streams_seen_) {
      infos.push_back(libkineto::ResourceInfo{stream, stream, device,
                                              "Stream " + std::to_string(stream)});
    }
    return infos;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }

  // Only a session that owns the runtime's records sets correlation ids: two profilers setting
  // the one per-thread id, with their op exits interleaved, would leave a stale id behind.
  void pushCorrelationId(uint64_t id) override {
    if (!owns_records_) return;
    t_kineto_correlation_stack.push_back(npuProfilerSetCorrelationId(id));
  }

  void popCorrelationId() override {
    if (!owns_records_ || t_kineto_correlation_stack.empty()) return;
    npuProfilerSetCorrelationId(t_kineto_correlation_stack.back());
    t_kineto_correlation_stack.pop_back();
  }

 private:
  // A kernel (or copy) becomes two activities, as CUDA's do in Kineto: the launch on the host
  // thread (PRIVATEUSE1_RUNTIME, a zero-length "npuLaunchTask") and the device activity on its
  // stream, joined by a flow arrow; both are linked to the op with the correlation id.
  void addActivities(const npuActivityRecord& r,
                     const libkineto::getLinkedActivityCallback& linked_activity,
                     std::vector<libkineto::GenericTraceActivity*>& logged) {
    static const libkineto::TraceSpan kSpan(0, 0, "SimNPU");
    const auto corr = static_cast<int32_t>(r.correlation_id);
    const libkineto::ITraceActivity* op =
        linked_activity && corr != 0 ? linked_activity(corr) : nullptr;

    std::string name = r.name;
    libkineto::ActivityType type = libkineto::ActivityType::CONCURRENT_KERNEL;
    if (r.kind == npuActivityMemcpy) {
      type = libkineto::ActivityType::GPU_MEMCPY;
      name = std::string("Memcpy ") + memcpyKindName(r.memcpy_kind);
    } else if (r.kind == npuActivityMemset) {
      type = libkineto::ActivityType::GPU_MEMSET;
      name = "Memset";
    }
    auto launch = std::make_unique<libkineto::GenericTraceActivity>(
        kSpan, libkineto::ActivityType::PRIVATEUSE1_RUNTIME, "npuLaunchTask");
    launch->startTime = static_cast<int64_t>(r.launch_ns) + epoch_offset_ns_;
    launch->endTime = launch->startTime;
    launch->id = corr;
    launch->device = static_cast<int32_t>(getpid());
    launch->resource = r.launch_thread;
    launch->threadId = r.launch_thread;
    launch->linked = op;
    launch->flow.id = static_cast<uint32_t>(r.correlation_id);
    launch->flow.type = libkineto::kLinkAsyncCpuGpu;
    launch->flow.start = true;

    auto device = std::make_unique<libkineto::GenericTraceActivity>(kSpan, type, name);
    device->startTime = static_cast<int64_t>(r.start_ns) + epoch_offset_ns_;
    device->endTime = static_cast<int64_t>(r.end_ns) + epoch_offset_ns_;
    device->id = corr;
    device->device = r.device;
    device->resource = r.stream_id;
    device->threadId = r.stream_id;
    device->linked = op;
    device->flow.id = static_cast<uint32_t>(r.correlation_id);
    device->flow.type = libkineto::kLinkAsyncCpuGpu;
    device->flow.start = false;
    // addMetadata<T> formats with fmt, whose library torch does not export: strings only.
    device->addMetadataQuoted("device", std::to_string(r.device));
    device->addMetadataQuoted("stream", std::to_string(r.stream_id));
    device->addMetadataQuoted("External id", std::to_string(r.correlation_id));
    if (r.kind != npuActivityKernel) device->addMetadataQuoted("bytes", std::to_string(r.bytes));
    streams_seen_.emplace_back(r.device, r.stream_id);

    if (corr != 0) {
      logged.push_back(launch.get());
      kinetoStore().push_back(std::move(launch));
    }
    logged.push_back(device.get());
    kinetoStore().push_back(std::move(device));
  }

  bool started_ = false;
  bool owns_records_ = false;  // npuProfilerStart succeeded for this session
  int64_t epoch_offset_ns_ = 0;
  std::vector<std::string> errors_;
  std::vector<std::pair<int, int>> streams_seen_;
};

class KinetoPlugin final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }

  const std::set<libkineto::ActivityType>& availableActivities() const override {
    return activities_;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& /*config*/) override {
    for (libkineto::ActivityType type : activity_types) {
      if (activities_.count(type) > 0) return std::make_unique<KinetoSession>();
    }
    return nullptr;  // CPU-only profile: nothing for us to record
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t /*ts_ms*/, int64_t /*duration_ms*/,
      const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  std::string name_ = "SimNPU";
  std::set<libkineto::ActivityType> activities_ = {
      libkineto::ActivityType::CONCURRENT_KERNEL, libkineto::ActivityType::GPU_MEMCPY,
      libkineto::ActivityType::GPU_MEMSET, libkineto::ActivityType::PRIVATEUSE1_RUNTIME};
};

REGISTER_PRIVATEUSE1_PROFILER(KinetoPlugin);

#endif  // NPU_KINETO_PLUGIN

}  // namespace

void recordMemoryEvent(const void* ptr, int64_t delta_bytes, int device) noexcept {
  try {
    const npu::alloc::DeviceStats stats = npu::alloc::CachingAllocator::instance().getStats(device);
    MemoryEvent event{npuProfilerClockNs(),
                      reinterpret_cast<uintptr_t>(ptr),
                      delta_bytes,
                      device,
                      stats.allocated_bytes[npu::alloc::kAggregate].current,
                      stats.reserved_bytes[npu::alloc::kAggregate].current,
                      systemThreadId()};
    Session& s = session();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.open) s.memory.push_back(event);
  } catch (...) {
    // A profiler must never turn an allocation into a failure.
  }
}

void initProfilerBindings(py::module_& m) {
  m.def("_npu_profiler_start", &startSession, py::arg("host"), py::arg("device"),
        py::arg("record_shapes"), py::arg("profile_memory"));
  m.def("_npu_profiler_stop", &stopSession);
  m.def("_npu_profiler_is_running", &sessionOpen);
  m.def("_npu_profiler_clock_ns", [] { return npuProfilerClockNs(); });
#ifdef NPU_KINETO_PLUGIN
  m.attr("_npu_profiler_has_kineto_plugin") = true;
#else
  m.attr("_npu_profiler_has_kineto_plugin") = false;
#endif
}

}  // namespace torch_npu::profiler
