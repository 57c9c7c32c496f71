// The stream sanitizer's adapter side (torch_npu.npu._sanitizer, TORCH_NPU_SANITIZER=1): every
// dispatcher op is seen through a global RecordFunction callback, and the byte ranges it reads
// and writes go to the runtime's happens-before engine (npu/runtime.h, npuSanAccess) on the
// stream the op launches on. The engine orders the streams by the runtime's own event, wait and
// synchronize calls, so C++ ops, autograd's backward, copies (npuMemcpyAsync records its bytes
// under the op's tag) and compiled code calling aten ops are covered alike.
//
// An op's tag carries its schema, which argument each range was, and the Python stack of the
// launch (CapturedTraceback, symbolized only when a report names it). A report is printed to
// stderr at once, in the shape of PyTorch's CUDA sanitizer, and kept for
// torch_npu.npu._sanitizer.reports(). (RecordFunction callbacks cannot raise: the report is how
// the finding reaches the user, as with the CUDA sanitizer's print before its raise.)
#include "Sanitizer.h"

#include <ATen/record_function.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <unistd.h>
#include <mutex>
#include <set>
#include <tuple>
#include <sstream>
#include <string>
#include <vector>

#include "NPUStream.h"
#include "npu/runtime.h"

namespace torch {
TORCH_API std::vector<pybind11::object> py_symbolize(
    std::vector<CapturedTraceback*>& to_symbolize);
TORCH_PYTHON_API void installCapturedTracebackPython();
}  // namespace torch

namespace torch_npu {
namespace {

namespace py = pybind11;

// What one access was: kept by the engine while the access is the latest on its bytes.
struct Tag {
  std::atomic<int> refs{1};
  std::string op;      // the schema
  std::string what;    // "writing to argument self", "reading from the output", ...
  std::shared_ptr<torch::CapturedTraceback> stack;
};

void retainTag(uint64_t tag) { reinterpret_cast<Tag*>(tag)->refs.fetch_add(1); }
void releaseTag(uint64_t tag) {
  Tag* t = reinterpret_cast<Tag*>(tag);
  if (t->refs.fetch_sub(1) == 1) {
    if (t->stack && Py_IsInitialized()) {
      py::gil_scoped_acquire gil;  // the traceback holds Python frames' code objects
      delete t;
    } else {
      delete t;
    }
  }
}

std::mutex g_reports_mutex;
std::vector<std::string> g_reports;
at::CallbackHandle g_callback = 0;

std::shared_ptr<torch::CapturedTraceback> gatherStack() {
  if (!Py_IsInitialized() || PyGILState_GetThisThreadState() == nullptr) return nullptr;
  return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/false, /*cpp=*/false);
}

std::string streamName(const npuSanSide& s) {
  if (s.stream_id < 0) return "the host";
  return "stream " + std::to_string(s.stream_id) + " on npu:" + std::to_string(s.device);
}

std::string formatStack(const py::object& frames) {
  std::ostringstream out;
  py::list list = frames.cast<py::list>();
  if (list.empty()) return "  (no Python stack: the access came from a thread without one)\n";
  for (size_t i = list.size(); i-- > 0;) {  // gathered innermost first
    py::dict d = list[i].cast<py::dict>();
    out << "  File \"" << py::str(d["filename"]).cast<std::string>() << "\", line "
        << py::str(d["line"]).cast<std::string>() << ", in "
        << py::str(d["name"]).cast<std::string>() << "\n";
  }
  return out.str();
}

// NPU_SIM_SANITIZER_LOG=FILE: every process of a job (each torchrun rank) also appends its
// reports there, whole and one after another, so a job's reports are in one place (a CI run
// fails on a non-empty file).
void appendToLog(const std::string& report) {
  static const char* path = std::getenv("NPU_SIM_SANITIZER_LOG");
  if (path == nullptr || *path == '\0') return;
  const int fd = ::open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::fprintf(stderr, "NPU sanitizer: cannot append to NPU_SIM_SANITIZER_LOG=%s\n", path);
    return;
  }
  // One write with O_APPEND: the processes' reports do not interleave.
  const std::string line = "[pid " + std::to_string(::getpid()) + "] " + report;
  (void)!::write(fd, line.data(), line.size());
  ::close(fd);
}

// One report per earlier access, range and stream: the same conflict seen again (an op nested
// in the one reported, the next step of a loop) adds nothing.
bool firstOfItsKind(const npuSanReport& r) {
  static std::mutex mutex;
  static std::set<std::tuple<uint64_t, uintptr_t, uintptr_t, int, int>> seen;
  std::lock_guard<std::mutex> lock(mutex);
  if (seen.size() > 65536) seen.clear();
  return seen.emplace(r.previous.tag, r.begin, r.end, r.current.device, r.current.stream_id)
      .second;
}

// Formats, prints and keeps a batch of the engine's reports (each first of its kind).
void publishBatch(const npuSanReport* reports, size_t n) {
  py::gil_scoped_acquire gil;
  for (size_t i = 0; i < n; ++i) {
    const npuSanReport& r = reports[i];
    if (!firstOfItsKind(r)) {  // an op nested in the one just reported finds the same conflict
      if (r.current.tag != 0) releaseTag(r.current.tag);
      if (r.previous.tag != 0) releaseTag(r.previous.tag);
      continue;
    }
    Tag* now = reinterpret_cast<Tag*>(r.current.tag);
    Tag* before = reinterpret_cast<Tag*>(r.previous.tag);
    std::vector<torch::CapturedTraceback*> stacks;
    if (now && now->stack) stacks.push_back(now->stack.get());
    if (before && before->stack) stacks.push_back(before->stack.get());
    std::vector<py::object> frames = torch::py_symbolize(stacks);
    size_t next = 0;
    auto describe = [&](const char* title, const npuSanSide& side, Tag* tag) {
      std::ostringstream out;
      out << title << " by " << streamName(side) << " during "
          << (tag ? "kernel:\n" + tag->op + "\n" + tag->what : std::string("a runtime call"))
          << "\nWith stack trace:\n"
          << (tag && tag->stack ? formatStack(frames[next++]) : std::string("  (none)\n"));
      return out.str();
    };
    std::ostringstream text;
    char range[96];
    std::snprintf(range, sizeof(range), "bytes [0x%zx, 0x%zx)", static_cast<size_t>(r.begin),
                  static_cast<size_t>(r.end));
    text << "============================\n";
    switch (r.kind) {
      case npuSanRace:
        text << "NPU sanitizer detected a possible data race on " << range
             << (r.current.stream_id < 0
                     ? " (the host accessed memory a stream may still be using: synchronize "
                       "the stream or the copy's event first)"
                     : "")
             << "\n";
        break;
      case npuSanFreeInUse:
        text << "NPU sanitizer detected a block freed while another stream may still use it, "
             << range << " (call tensor.record_stream(stream) for that stream)\n";
        break;
      case npuSanUninitRead:
        text << "NPU sanitizer detected a read of uninitialised device memory, " << range << "\n";
        break;
    }
    text << describe("Access", r.current, now) << "\n"
         << describe(r.kind == npuSanUninitRead ? "Allocated" : "Previous access", r.previous,
                     before);
    const std::string s = text.str();
    std::fprintf(stderr, "%s", s.c_str());
    std::fflush(stderr);
    {
      std::lock_guard<std::mutex> lock(g_reports_mutex);
      g_reports.push_back(s);
      appendToLog(s);
    }
    if (now != nullptr) releaseTag(r.current.tag);  // the engine retained them for us
    if (before != nullptr) releaseTag(r.previous.tag);
  }
}

// Formats and publishes the reports the last engine call found (the caller holds the GIL or
// may take it).
void publishReports() {
  npuSanReport reports[8];
  size_t n = 0;
  while ((n = npuSanTakeReports(reports, 8)) != 0) publishBatch(reports, n);
}

// The bytes a tensor's view spans: from its lowest to its highest element.
bool span(const at::Tensor& t, uintptr_t* begin, size_t* bytes) {
  if (!t.defined() || !t.has_storage() || t.numel() == 0) return false;
  const void* data = t.storage().data();
  if (data == nullptr) return false;
  int64_t lo = 0, hi = 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t extent = (t.size(d) - 1) * t.stride(d);
    (extent < 0 ? lo : hi) += extent;
  }
  const int64_t item = static_cast<int64_t>(t.element_size());
  *begin = reinterpret_cast<uintptr_t>(data) + (t.storage_offset() + lo) * item;
  *bytes = static_cast<size_t>((hi - lo + 1) * item);
  return true;
}

// Factories of uninitialised memory write none of it; their calls are still tagged, so that
// NPU_SIM_SANITIZER_UNINIT names the allocation a read of never-written bytes came from.
bool uninitialisedFactory(const c10::FunctionSchema& schema) {
  static const char* kFactories[] = {"aten::empty", "aten::empty_strided", "aten::empty_like",
                                     "aten::new_empty", "aten::new_empty_strided"};
  for (const char* n : kFactories) {
    if (schema.name() == n) return true;
  }
  return false;
}

bool skipped(const c10::FunctionSchema& schema) {
  const std::string& name = schema.name();
  // Collectives run on the communicator's stream, ordered by its own events (the engine sees
  // those; sanitizeCollective records their bytes there), functional collectives and their
  // wait_tensor included; views and metadata touch no bytes.
  for (const char* ns : {"c10d::", "_c10d_functional::", "c10d_functional::"}) {
    if (name.rfind(ns, 0) == 0) return true;
  }
  static const char* kNoAccess[] = {
      "aten::record_stream", "aten::set_", "aten::resize_",
      "aten::detach",       "aten::alias",         "aten::lift_fresh", "aten::_has_compatible_shallow_copy_type",
      "aten::is_pinned",    "aten::_pin_memory",   "aten::pin_memory", "aten::to", "aten::_to_copy",
      // metadata only
      "aten::result_type",  "aten::size",          "aten::stride",     "aten::numel",
      "aten::dim",          "aten::sym_size",      "aten::sym_stride", "aten::sym_numel",
      "aten::sym_storage_offset", "aten::is_same_size", "aten::is_floating_point",
      "aten::is_complex",   "aten::is_signed",     "aten::_version",   "aten::output_nr",
      "aten::requires_grad_", "aten::retain_grad", "aten::_is_zerotensor", "aten::is_conj",
      "aten::is_neg",       "aten::can_cast",      "aten::promote_types", "aten::is_nonzero_meta",
  };
  for (const char* n : kNoAccess) {
    if (name == n) return true;
  }
  // A view: every return aliases an input without writing it.
  bool view = !schema.returns().empty();
  for (const c10::Argument& ret : schema.returns()) {
    const c10::AliasInfo* alias = ret.alias_info();
    if (alias == nullptr || alias->isWrite()) view = false;
  }
  return view;
}

// Whether the op writes its i-th argument: the schema's (a!) annotation, and _copy_from's dst,
// which its schema leaves unannotated.
bool writes_argument(const c10::FunctionSchema& schema, size_t i) {
  const c10::AliasInfo* alias = schema.arguments()[i].alias_info();
  if (alias != nullptr && alias->isWrite()) return true;
  return schema.name() == "aten::_copy_from" && schema.arguments()[i].name() == "dst";
}

struct OpContext : at::ObserverContext {
  npuStream_t stream = nullptr;
  Tag* tag = nullptr;
  uint64_t previous_tag = 0;
  bool active = false;
  std::vector<const void*> input_data;  // an output over an input's memory is not a new write
};

const void* dataOf(const at::Tensor& t) {
  return t.defined() && t.has_storage() ? t.storage().data() : nullptr;
}

// The stream the op launches on: the current stream of its first npu tensor's device; the host
// for an op on host tensors only.
npuStream_t executor(const c10::ArrayRef<c10::IValue>& inputs) {
  for (const c10::IValue& v : inputs) {
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().is_privateuseone()) {
      return getCurrentNPUStream(v.toTensor().device().index()).handle();
    }
    if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList().vec()) {
        if (t.defined() && t.is_privateuseone()) {
          return getCurrentNPUStream(t.device().index()).handle();
        }
      }
    }
  }
  for (const c10::IValue& v : inputs) {  // a factory: its device= argument
    if (v.isDevice() && v.toDevice().is_privateuseone()) {
      return getCurrentNPUStream(v.toDevice().has_index() ? v.toDevice().index() : -1).handle();
    }
  }
  return NPU_SAN_HOST;
}

// Where an output was written: the op's stream, or for an npu output of an op without npu
// inputs (a factory whose device came from a default), its device's current stream.
npuStream_t outputStream(npuStream_t op_stream, const at::Tensor& t) {
  if (op_stream == NPU_SAN_HOST && t.defined() && t.is_privateuseone()) {
    return getCurrentNPUStream(t.device().index()).handle();
  }
  return op_stream;
}

bool capturing(npuStream_t stream) {
  if (stream == NPU_SAN_HOST) return false;
  npuStreamCaptureStatus status = npuStreamCaptureStatusNone;
  return npuStreamIsCapturing(stream, &status) == npuSuccess &&
         status != npuStreamCaptureStatusNone;
}

Tag* newTag(std::string op, std::string what,
            const std::shared_ptr<torch::CapturedTraceback>& stack) {
  Tag* t = new Tag();
  t->op = std::move(op);
  t->what = std::move(what);
  t->stack = stack;
  return t;
}

void access(npuStream_t stream, const at::Tensor& t, bool write, Tag* tag) {
  // Host tensors of an npu op are either read by value at the launch (a 0-dim scalar) or made
  // on the host before it returns (philox seeds); the bytes a copy moves to or from host memory
  // asynchronously are recorded by the runtime's copy itself (npuMemcpyAsync).
  if (stream != NPU_SAN_HOST && t.defined() && !t.is_privateuseone()) return;
  uintptr_t begin = 0;
  size_t bytes = 0;
  if (!span(t, &begin, &bytes)) return;
  if (npuSanAccess(stream, reinterpret_cast<void*>(begin), bytes, write ? 1 : 0,
                   reinterpret_cast<uint64_t>(tag)) > 0) {
    publishReports();
  }
}

std::unique_ptr<at::ObserverContext> onStart(const at::RecordFunction& fn) {
  // A task's own CPU kernels (the host-kernel path runs ATen on aliases of device memory) were
  // accounted when the task was launched.
  if (npuSimInTask()) return nullptr;
  auto schema = fn.operator_schema();
  if (!schema || skipped(*schema)) return nullptr;
  const auto inputs = fn.inputs();
  const npuStream_t stream = executor(inputs);
  auto ctx = std::make_unique<OpContext>();
  ctx->stream = stream;
  ctx->active = true;
  const auto stack = gatherStack();
  const auto& args = schema->arguments();
  std::string reads, writes;
  // The arguments whose bytes the op's stream touches (access() leaves out the host scalars of
  // an npu op).
  auto touched = [&](const at::Tensor& t) {
    return t.defined() && (stream == NPU_SAN_HOST || t.is_privateuseone());
  };
  for (size_t i = 0; i < inputs.size() && i < args.size(); ++i) {
    const bool write = writes_argument(*schema, i);
    std::string& names = write ? writes : reads;
    bool any = inputs[i].isTensor() && touched(inputs[i].toTensor());
    if (inputs[i].isTensorList()) {
      for (const at::Tensor& t : inputs[i].toTensorList().vec()) any |= touched(t);
    }
    if (any) names += (names.empty() ? "" : ", ") + args[i].name();
  }
  std::string what;
  if (!writes.empty()) what += "writing to argument(s) " + writes;
  if (!reads.empty()) what += (what.empty() ? "" : ", ") + std::string("reading from argument(s) ") + reads;
  bool fresh_output = false;
  for (const c10::Argument& ret : schema->returns()) fresh_output |= ret.alias_info() == nullptr;
  if (fresh_output) what += (what.empty() ? "" : ", and ") + std::string("writing to the output");
  // Captured work runs at each replay of the graph (the engine makes its accesses then).
  if (capturing(stream)) what += " (captured into an NPU graph: at its replay)";
  std::ostringstream op;
  op << *schema;
  ctx->tag = newTag(op.str(), what, stack);
  if (uninitialisedFactory(*schema)) {
    ctx->tag->what = "allocating the output, which it leaves uninitialised";
    ctx->active = false;  // no bytes to record at the end
    ctx->previous_tag = npuSanSetCurrentTag(reinterpret_cast<uint64_t>(ctx->tag));
    return ctx;
  }
  for (size_t i = 0; i < inputs.size() && i < args.size(); ++i) {
    const bool write = writes_argument(*schema, i);
    if (inputs[i].isTensor()) {
      access(stream, inputs[i].toTensor(), write, ctx->tag);
      ctx->input_data.push_back(dataOf(inputs[i].toTensor()));
    } else if (inputs[i].isTensorList()) {
      for (const at::Tensor& t : inputs[i].toTensorList().vec()) {
        access(stream, t, write, ctx->tag);
        ctx->input_data.push_back(dataOf(t));
      }
    }
  }
  ctx->previous_tag = npuSanSetCurrentTag(reinterpret_cast<uint64_t>(ctx->tag));
  return ctx;
}

void onEnd(const at::RecordFunction& fn, at::ObserverContext* base) {
  auto* ctx = static_cast<OpContext*>(base);
  if (ctx == nullptr) return;
  npuSanSetCurrentTag(ctx->previous_tag);
  if (!ctx->active) {
    releaseTag(reinterpret_cast<uint64_t>(ctx->tag));
    return;
  }
  auto schema = fn.operator_schema();
  if (schema) {
    const auto& returns = schema->returns();
    const auto outputs = fn.outputs();
    for (size_t i = 0; i < outputs.size() && i < returns.size(); ++i) {
      if (returns[i].alias_info() != nullptr) continue;  // a written argument, seen already
      // An output over an input's memory (_copy_from returns its dst, unannotated) was seen at
      // the start; seen again here it would come after the op's own synchronize.
      auto fresh = [&](const at::Tensor& t) {
        const void* data = dataOf(t);
        return std::find(ctx->input_data.begin(), ctx->input_data.end(), data) ==
               ctx->input_data.end();
      };
      if (outputs[i].isTensor()) {
        const at::Tensor& t = outputs[i].toTensor();
        if (fresh(t)) access(outputStream(ctx->stream, t), t, true, ctx->tag);
      } else if (outputs[i].isTensorList()) {
        for (const at::Tensor& t : outputs[i].toTensorList().vec()) {
          if (fresh(t)) access(outputStream(ctx->stream, t), t, true, ctx->tag);
        }
      }
    }
  }
  releaseTag(reinterpret_cast<uint64_t>(ctx->tag));
}

void enable(bool uninit) {
  if (g_callback != 0) return;
  torch::installCapturedTracebackPython();  // Python frames in the stacks (idempotent)
  npuSanSetTagHooks(retainTag, releaseTag);
  npuSanEnable(1, uninit ? 1 : 0);
  g_callback = at::addGlobalCallback(at::RecordFunctionCallback(&onStart, &onEnd)
                                         .needsInputs(true)
                                         .needsOutputs(true)
                                         .scopes({at::RecordScope::FUNCTION}));
}

void disable() {
  if (g_callback == 0) return;
  at::removeCallback(g_callback);
  g_callback = 0;
  npuSanEnable(0, 0);
}

}  // namespace

void sanitizeCollective(npuStream_t stream, const std::string& op,
                        const std::vector<at::Tensor>& inputs,
                        const std::vector<at::Tensor>& outputs) {
  if (g_callback == 0) return;
  Tag* tag = newTag("c10d::" + op + " (hccl, on the communicator's stream)",
                    "reading its inputs, writing its outputs", gatherStack());
  for (const at::Tensor& t : inputs) access(stream, t, false, tag);
  for (const at::Tensor& t : outputs) access(stream, t, true, tag);
  releaseTag(reinterpret_cast<uint64_t>(tag));
}

namespace {

// A kernel torch.compile generated, queued by torch_npu._inductor.launch: Inductor's C++
// signature says which buffers it writes (`float* out_ptr0`) and which it only reads
// (`const float* in_ptr0`); `writes` has a 'w' or 'r' per argument, empty when unknown (then
// every buffer counts as written).
void sanitizeCompiledKernel(const std::string& name, const std::string& writes,
                            const py::args& args) {
  if (g_callback == 0) return;
  std::vector<std::pair<at::Tensor, bool>> buffers;
  std::string read_names, write_names;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!THPVariable_Check(args[i].ptr())) continue;
    const at::Tensor& t = THPVariable_Unpack(args[i].ptr());
    if (!t.is_privateuseone()) continue;
    const bool write = i >= writes.size() || writes[i] == 'w';
    std::string& names = write ? write_names : read_names;
    names += (names.empty() ? "" : ", ") + std::to_string(i);
    buffers.emplace_back(t, write);
  }
  if (buffers.empty()) return;
  const npuStream_t stream = getCurrentNPUStream(buffers.front().first.device().index()).handle();
  std::string what;
  if (!write_names.empty()) what += "writing to argument(s) " + write_names;
  if (!read_names.empty()) {
    what += (what.empty() ? "" : ", ") + std::string("reading from argument(s) ") + read_names;
  }
  if (capturing(stream)) what += " (captured into an NPU graph: at its replay)";
  Tag* tag = newTag("compiled kernel " + name + " (torch.compile, Inductor)", what, gatherStack());
  for (const auto& [t, write] : buffers) {
    if (!write) access(stream, t, false, tag);
  }
  for (const auto& [t, write] : buffers) {
    if (write) access(stream, t, true, tag);
  }
  releaseTag(reinterpret_cast<uint64_t>(tag));
}

}  // namespace

void initSanitizerBindings(py::module& m) {
  m.def("_npu_sanitizer_compiled_kernel", &sanitizeCompiledKernel);
  m.def("_npu_sanitizer_enable", &enable, py::arg("uninit") = false);
  m.def("_npu_sanitizer_disable", &disable);
  m.def("_npu_sanitizer_enabled", [] { return g_callback != 0; });
  m.def("_npu_sanitizer_reports", [] {
    std::lock_guard<std::mutex> lock(g_reports_mutex);
    return g_reports;
  });
  m.def("_npu_sanitizer_clear_reports", [] {
    std::lock_guard<std::mutex> lock(g_reports_mutex);
    g_reports.clear();
  });
  // A host access of a tensor's bytes made without an op (numpy(), tolist(), buffer protocol).
  m.def("_npu_sanitizer_host_access", [](const at::Tensor& t, bool write) {
    if (g_callback == 0) return;
    at::Tensor view = t;
    Tag* tag = nullptr;
    tag = newTag("a host access (Tensor.numpy / tolist / the buffer protocol)",
                 write ? "writing from the host" : "reading from the host", gatherStack());
    access(NPU_SAN_HOST, view, write, tag);
    releaseTag(reinterpret_cast<uint64_t>(tag));
  });
}

}  // namespace torch_npu
