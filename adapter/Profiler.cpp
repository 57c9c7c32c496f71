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
//  - torch.profiler gets the same device records through the Kineto plugin (KinetoPlugin.cpp).
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
  m.attr("_npu_profiler_has_kineto_plugin") = hasKinetoPlugin();
}

}  // namespace torch_npu::profiler
