// torch_npu._C: the Python face of the adapter. Every function here is a thin wrapper; the
// names are the ones torch_npu/npu/*.py calls. Streams cross the boundary as
// (stream_id, device_index, device_type) tuples, as torch.cuda's do.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <map>
#include <thread>

#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include "AtExit.h"
#include "NPUException.h"
#include "MemoryHistory.h"
#include "NPUFunctions.h"
#include "NPUGenerator.h"
#include "NPUGraph.h"
#include "GraphOutputs.h"
#include "NPUHostAllocator.h"
#include "CompiledKernels.h"
#include "CostModel.h"
#include "NPUStream.h"
#include "Profiler.h"
#include "Recovery.h"
#include "Sanitizer.h"
#include "distributed/Init.h"
#include "ops/CardCheck.h"
#include "ops/KernelBridge.h"
#include "ops/OpStats.h"
#include "npu/caching_allocator.h"
#include "npu/runtime.h"

namespace py = pybind11;

namespace torch_npu {
namespace {

namespace alloc = npu::alloc;
using StreamTuple = std::tuple<int64_t, int64_t, int64_t>;

// ---- bodies: devices ---------------------------------------------------------------------

c10::DeviceIndex initializedDevice(int64_t device) {
  lazyInit();
  return checkedDeviceIndex(static_cast<c10::DeviceIndex>(device));
}

void npuInit() { lazyInit(); }

int64_t getDeviceCount() { return deviceCount(); }

// (count, why): the count before initialisation, read from the environment as it is now
// (npuPeekDeviceCount); `why` explains a count of 0 when a variable was rejected.
std::pair<int64_t, std::string> peekDeviceCount() {
  int count = 0;
  char why[512];
  NPU_CHECK(npuPeekDeviceCount(&count, why, sizeof(why)));
  return {count, std::string(why)};
}

// torch_npu._C._empty_strided_npu(size, stride, dtype): what Inductor's generated wrappers call
// to allocate a buffer on the current npu (torch._C._dynamo.guards._empty_strided_cuda's twin).
at::Tensor emptyStridedNpu(std::vector<int64_t> size, std::vector<int64_t> stride,
                           const py::object& dtype) {
  TORCH_CHECK_TYPE(THPDtype_Check(dtype.ptr()), "_empty_strided_npu(size, stride, dtype): dtype "
                   "must be a torch.dtype, got ", py::str(py::type::of(dtype)).cast<std::string>());
  TORCH_CHECK_VALUE(size.size() == stride.size(), "_empty_strided_npu: size has ", size.size(),
                    " dimensions but stride has ", stride.size());
  lazyInit();
  const auto scalar_type = reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type;
  return at::empty_strided(size, stride,
                           at::TensorOptions()
                               .dtype(scalar_type)
                               .device(c10::Device(c10::DeviceType::PrivateUse1, currentDevice())));
}

void setDeviceBody(int64_t device) {
  lazyInit();
  if (device < 0) return;  // torch.cuda semantics: a negative index is a no-op
  setDevice(checkedDeviceIndex(static_cast<c10::DeviceIndex>(device)));
}

int64_t getDeviceBody() {
  lazyInit();
  return currentDevice();
}

py::dict getDeviceProperties(int64_t device) {
  npuDeviceProp prop{};
  NPU_CHECK(npuGetDeviceProperties(&prop, static_cast<int>(device)));
  py::dict d;
  d["name"] = std::string(prop.name);
  d["soc_version"] = std::string(prop.soc_version);
  d["total_memory"] = prop.total_memory;
  d["cube_core_num"] = prop.cube_core_num;
  d["vector_core_num"] = prop.vector_core_num;
  d["major"] = prop.major;
  d["minor"] = prop.minor;
  return d;
}

void synchronizeDevice(int64_t device) {
  const c10::DeviceIndex index = initializedDevice(device);
  py::gil_scoped_release no_gil;
  DeviceSwitch on_device(index);
  NPU_CHECK(npuDeviceSynchronize());
}

int64_t getUtilization(int64_t device) {
  int percent = 0;
  NPU_CHECK(npuDeviceGetUtilization(initializedDevice(device), &percent));
  return percent;
}

std::pair<size_t, size_t> memGetInfo(int64_t device) {
  DeviceSwitch on_device(initializedDevice(device));
  size_t free_bytes = 0, total_bytes = 0;
  NPU_CHECK(npuMemGetInfo(&free_bytes, &total_bytes));
  return {free_bytes, total_bytes};
}

std::string runtimeVersion() { return npuGetRuntimeVersion(); }
std::string driverVersion() { return npuGetDriverVersion(); }

// ---- bodies: streams ---------------------------------------------------------------------

StreamTuple pack(const NPUStream& stream) {
  const c10::StreamData3 data = stream.unwrap().pack3();
  return {data.stream_id, data.device_index, static_cast<int64_t>(data.device_type)};
}

NPUStream unpack(int64_t stream_id, int64_t device_index, int64_t device_type) {
  return NPUStream(c10::Stream::unpack3(stream_id, static_cast<c10::DeviceIndex>(device_index),
                                        static_cast<c10::DeviceType>(device_type)));
}

StreamTuple getCurrentStream(int64_t device) {
  return pack(getCurrentNPUStream(initializedDevice(device)));
}

StreamTuple getDefaultStream(int64_t device) {
  return pack(getDefaultNPUStream(initializedDevice(device)));
}

void setStream(int64_t stream_id, int64_t device_index, int64_t device_type) {
  const NPUStream stream = unpack(stream_id, device_index, device_type);
  lazyInit();
  setDevice(stream.device_index());
  setCurrentNPUStream(stream);
}

StreamTuple streamFromPool(int64_t device, int64_t priority) {
  return pack(getStreamFromPool(static_cast<int>(priority), initializedDevice(device)));
}

bool streamQuery(int64_t stream_id, int64_t device_index, int64_t device_type) {
  return unpack(stream_id, device_index, device_type).query();
}

void streamSynchronize(int64_t stream_id, int64_t device_index, int64_t device_type) {
  const NPUStream stream = unpack(stream_id, device_index, device_type);
  if (C10_UNLIKELY(syncDebugMode() != 0)) {
    // Under the GIL, so "warn" becomes a Python warning (the handler raises it on scope exit).
    torch::PyWarningHandler handler;
    warnOrErrorOnSync();
  }
  py::gil_scoped_release no_gil;
  NPU_CHECK(npuStreamSynchronize(stream.handle()));
}

// Keeps the current stream busy for `ms` milliseconds (torch.cuda._sleep's twin, for tests).
void sleepOnStream(int64_t ms) {
  TORCH_CHECK(ms >= 0, "_npu_sleep: ms must be non-negative, got ", ms);
  launchTask(getCurrentNPUStream(initializedDevice(-1)), "sleep",
             [ms] { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); });
}

// torch.Event.elapsed_time refuses subclasses such as torch.npu.Event, so the subclass
// measures through the runtime directly; event ids are the runtime's event handles.
double eventElapsedTime(int64_t start_id, int64_t end_id) {
  TORCH_CHECK(start_id != 0 && end_id != 0,
              "elapsed_time: both events must be recorded before measuring between them");
  float ms = 0;
  NPU_CHECK(npuEventElapsedTime(&ms, reinterpret_cast<npuEvent_t>(start_id),
                                reinterpret_cast<npuEvent_t>(end_id)));
  return ms;
}

std::pair<int, int> streamPriorityRange() {
  int least = 0, greatest = 0;
  NPU_CHECK(npuDeviceGetStreamPriorityRange(&least, &greatest));
  return {least, greatest};
}

// ---- bodies: memory ----------------------------------------------------------------------

// A counter as torch.cuda reports it: our allocator's alloc::Stat or c10's (the host allocator).
template <class Stat>
py::dict statToDict(const Stat& stat) {
  py::dict d;
  d["current"] = stat.current;
  d["peak"] = stat.peak;
  d["allocated"] = stat.allocated;
  d["freed"] = stat.freed;
  return d;
}

py::dict statArrayToDict(const alloc::StatArray& stats) {
  static const char* const kPoolNames[alloc::kNumStatTypes] = {"all", "small_pool", "large_pool"};
  py::dict d;
  for (int i = 0; i < alloc::kNumStatTypes; ++i) d[kPoolNames[i]] = statToDict(stats[i]);
  return d;
}

py::dict memoryStats(int64_t device) {
  const alloc::DeviceStats s =
      alloc::CachingAllocator::instance().getStats(initializedDevice(device));
  py::dict d;
  d["num_alloc_retries"] = s.num_alloc_retries;
  d["num_ooms"] = s.num_ooms;
  d["max_split_size"] = s.max_split_size;
  d["num_sync_all_streams"] = s.num_sync_all_streams;
  d["num_device_alloc"] = s.num_device_alloc;
  d["num_device_free"] = s.num_device_free;
  d["allocation"] = statArrayToDict(s.allocation);
  d["segment"] = statArrayToDict(s.segment);
  d["active"] = statArrayToDict(s.active);
  d["inactive_split"] = statArrayToDict(s.inactive_split);
  d["allocated_bytes"] = statArrayToDict(s.allocated_bytes);
  d["reserved_bytes"] = statArrayToDict(s.reserved_bytes);
  d["active_bytes"] = statArrayToDict(s.active_bytes);
  d["inactive_split_bytes"] = statArrayToDict(s.inactive_split_bytes);
  d["requested_bytes"] = statArrayToDict(s.requested_bytes);
  d["oversize_allocations"] = statToDict(s.oversize_allocations);
  d["oversize_segments"] = statToDict(s.oversize_segments);
  return d;
}

// The pinned host allocator's statistics in torch.cuda.host_memory_stats' nested layout.
py::dict hostMemoryStats() {
  const at::HostStats s = getNPUHostAllocator()->get_stats();
  auto duration = [](const c10::CachingAllocator::DurationStat& v) {
    py::dict d;
    d["total"] = v.total;
    d["max"] = v.max;
    d["min"] = v.min;
    d["count"] = v.count;
    d["avg"] = v.count ? v.total / v.count : 0;
    return d;
  };
  py::dict d;
  d["allocations"] = statToDict(s.allocations);
  d["allocated_bytes"] = statToDict(s.allocated_bytes);
  d["active_requests"] = statToDict(s.active_requests);
  d["active_bytes"] = statToDict(s.active_bytes);
  d["num_host_alloc"] = s.num_host_alloc;
  d["num_host_free"] = s.num_host_free;
  d["host_alloc_time"] = duration(s.host_alloc_time);
  d["host_free_time"] = duration(s.host_free_time);
  return d;
}

const char* blockState(const alloc::BlockInfo& block) {
  if (block.allocated) return "active_allocated";
  if (block.active) return "active_pending_free";
  return "inactive";
}

py::dict memorySnapshot() {
  py::list segments;
  if (isInitialized()) {
    for (const alloc::SegmentInfo& segment : alloc::CachingAllocator::instance().snapshot()) {
      py::dict seg;
      seg["device"] = segment.device;
      seg["address"] = segment.address;
      seg["total_size"] = segment.total_size;
      seg["allocated_size"] = segment.allocated_size;
      seg["active_size"] = segment.active_size;
      seg["requested_size"] = segment.requested_size;
      seg["stream"] = reinterpret_cast<uintptr_t>(segment.stream);
      seg["segment_type"] = segment.is_large ? "large" : "small";
      seg["segment_pool_id"] = py::make_tuple(0, segment.pool_id);
      seg["is_expandable"] = segment.is_expandable;
      seg["frames"] = py::list();
      py::list blocks;
      uintptr_t address = segment.address;
      for (const alloc::BlockInfo& block : segment.blocks) {
        py::dict b;
        b["address"] = address;
        b["size"] = block.size;
        b["requested_size"] = block.requested_size;
        b["state"] = blockState(block);
        b["frames"] = py::list();
        blocks.append(b);
        address += block.size;
      }
      seg["blocks"] = blocks;
      segments.append(seg);
    }
  }
  py::dict result;
  result["segments"] = segments;
  result["device_traces"] = py::list();
  return result;
}

void emptyCache() {
  if (!isInitialized()) return;
  py::gil_scoped_release no_gil;
  alloc::CachingAllocator::instance().emptyCache();
}

void resetPeakMemoryStats(int64_t device) {
  alloc::CachingAllocator::instance().resetPeakStats(initializedDevice(device));
}

void resetAccumulatedMemoryStats(int64_t device) {
  alloc::CachingAllocator::instance().resetAccumulatedStats(initializedDevice(device));
}

void setMemoryFraction(double fraction, int64_t device) {
  TORCH_CHECK(fraction >= 0 && fraction <= 1, "Invalid fraction value: ", fraction,
              ". Allowed range: 0~1");
  alloc::CachingAllocator::instance().setMemoryFraction(fraction, initializedDevice(device));
}

// torch.npu.memory._set_allocator_settings: PYTORCH_NPU_ALLOC_CONF's grammar, at run time.
void setAllocatorSettings(const std::string& conf) {
  try {
    alloc::CachingAllocator::instance().setSettings(conf);
  } catch (const std::invalid_argument& e) {
    // The variable's own message, with the name of the call that gave the setting.
    std::string what = e.what();
    const std::string prefix = "PYTORCH_NPU_ALLOC_CONF: ";
    if (what.rfind(prefix, 0) == 0) what = what.substr(prefix.size());
    TORCH_CHECK(false, "torch.npu.memory._set_allocator_settings: ", what);
  }
}

// ---- bodies: user memory pools (torch.npu.MemPool) ----------------------------------------

// Allocator errors about pools (a use_mem_pool ended by another thread, ...) as RuntimeError.
template <class Fn>
auto poolCall(Fn&& fn) {
  try {
    return fn();
  } catch (const alloc::AllocatorError& e) {
    TORCH_CHECK(false, e.what());
  }
}

// A new pool id: the graph pools' counter, so that a MemPool's id can also be handed to
// torch.npu.graph(pool=...), as with CUDA.
MempoolId createMemPool(int64_t device, bool use_on_oom, bool no_split) {
  const MempoolId id = graphPoolHandle();
  poolCall([&] {
    alloc::CachingAllocator::instance().createPool(initializedDevice(device), id.second,
                                                   use_on_oom, no_split);
    return 0;
  });
  return id;
}

void beginAllocateCurrentThreadToPool(int64_t device, MempoolId id) {
  poolCall([&] {
    alloc::CachingAllocator::instance().beginAllocateThreadToPool(initializedDevice(device),
                                                                  id.second);
    return 0;
  });
}

void endAllocateCurrentThreadToPool(int64_t device, MempoolId id) {
  poolCall([&] {
    alloc::CachingAllocator::instance().endAllocateThreadToPool(initializedDevice(device),
                                                                id.second);
    return 0;
  });
}

void releaseMemPool(int64_t device, MempoolId id) {
  poolCall([&] {
    alloc::CachingAllocator::instance().releasePool(initializedDevice(device), id.second);
    return 0;
  });
}

// Drops the MemPool object's use; its cached segments go back to the device then (as the CUDA
// MemPool's destructor empties its pool), unless use_mem_pool blocks still hold it.
void destroyMemPool(int64_t device, MempoolId id) {
  releaseMemPool(device, id);
  py::gil_scoped_release no_gil;  // waits for pending stream uses
  alloc::CachingAllocator::instance().releasePoolMemory(initializedDevice(device), id.second);
}

int memPoolUseCount(int64_t device, MempoolId id) {
  return alloc::CachingAllocator::instance().poolUseCount(initializedDevice(device), id.second);
}

double getMemoryFraction(int64_t device) {
  return alloc::CachingAllocator::instance().getMemoryFraction(initializedDevice(device));
}

// ---- bodies: RNG and the fallback table ----------------------------------------------------

py::object getDefaultGenerator(int64_t device) {
  const at::Generator& generator = getDefaultNPUGenerator(initializedDevice(device));
  PyObject* wrapped = THPGenerator_initDefaultGenerator(generator);
  if (!wrapped) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(wrapped);
}

py::dict opCalls(OpPath path) {
  py::dict d;
  for (const auto& [name, count] : OpStats::instance().calls(path)) d[py::str(name)] = count;
  return d;
}

py::dict hostKernelOps(bool synchronizing) {
  return opCalls(synchronizing ? OpPath::kHostKernelSync : OpPath::kHostKernel);
}

py::dict fallbackOps() { return opCalls(OpPath::kCpuFallback); }

// torch_npu._C._npu_launchCompiledKernel(fn, name, *args), what Inductor's npu wrapper calls:
// npu tensors pass their device pointers, ints their value, 0-dim CPU tensors (Python scalars
// Dynamo turned into inputs) their bytes.
void launchCompiledKernelFromPython(uintptr_t fn, const std::string& name, const py::args& args) {
  std::vector<KernelArg> values;
  values.reserve(args.size());
  c10::DeviceIndex device = -1;
  for (const py::handle arg : args) {
    if (THPVariable_Check(arg.ptr())) {
      const at::Tensor& t = THPVariable_Unpack(arg.ptr());
      if (t.is_cpu() && t.dim() == 0) {
        values.push_back(hostScalarArg(t.data_ptr(), t.element_size()));
        continue;
      }
      TORCH_CHECK(t.is_privateuseone(), "compiled npu kernel ", name, " got a tensor of shape ",
                  t.sizes(), " on ", t.device(), "; every buffer of an npu kernel must be on "
                  "npu (only 0-dim CPU scalars are passed by value)");
      if (device < 0) device = t.device().index();
      values.push_back({reinterpret_cast<uintptr_t>(t.data_ptr()), false});
    } else if (PyLong_Check(arg.ptr()) && !PyBool_Check(arg.ptr())) {
      values.push_back({static_cast<uint64_t>(arg.cast<int64_t>()), false});
    } else {
      TORCH_CHECK_NOT_IMPLEMENTED(false, "compiled npu kernel ", name, " takes a ",
                                  py::str(arg.get_type().attr("__name__")).cast<std::string>(),
                                  " argument; only tensors and integers can be passed to a "
                                  "kernel launched on the npu stream");
    }
  }
  launchCompiledKernel(fn, name, std::move(values), device);
}

// ---- bodies: shadow execution's cost model (CostModel.h, docs/shadow.md) --------------------

double figure(const py::dict& d, const char* key) {
  TORCH_CHECK(d.contains(key), "the cost model has no '", key, "' figure");
  const double v = py::cast<double>(d[key]);
  TORCH_CHECK(v >= 0, "the cost model's '", key, "' figure must not be negative, got ", v);
  return v;
}

void setCostModel(const py::dict& d) {
  npuSimCostModel sim{};
  sim.hbm_gbps = figure(d, "hbm_gbps");
  sim.h2d_gbps = figure(d, "h2d_gbps");
  sim.copy_overhead_us = figure(d, "copy_overhead_us");
  sim.intra_gbps = figure(d, "intra_gbps");
  sim.intra_latency_us = figure(d, "intra_latency_us");
  sim.inter_gbps = figure(d, "inter_gbps");
  sim.inter_latency_us = figure(d, "inter_latency_us");
  sim.host_dispatch_us = figure(d, "host_dispatch_us");
  NPU_CHECK(npuSimSetCostModel(&sim));
  OpCostFigures f;
  f.cube_tflops_fp16 = figure(d, "cube_tflops_fp16");
  f.cube_tflops_bf16 = figure(d, "cube_tflops_bf16");
  f.cube_tflops_fp32 = figure(d, "cube_tflops_fp32");
  f.vector_tflops = figure(d, "vector_tflops");
  f.hbm_gbps = sim.hbm_gbps;
  f.cube_efficiency = figure(d, "cube_efficiency");
  f.vector_efficiency = figure(d, "vector_efficiency");
  f.hbm_efficiency = figure(d, "hbm_efficiency");
  f.launch_overhead_us = figure(d, "launch_overhead_us");
  installCostModel(f);
}

OpShapes shapesOf(const std::vector<at::Tensor>& tensors) {
  OpShapes out;
  for (const at::Tensor& t : tensors) {
    out.push_back({OpSizes(t.sizes().begin(), t.sizes().end()), static_cast<int64_t>(t.element_size()),
                   static_cast<int>(t.scalar_type())});
  }
  return out;
}

py::tuple modelOpBody(const std::string& op, const std::vector<at::Tensor>& inputs,
                      const std::vector<at::Tensor>& outputs, const std::string& layout,
                      bool causal, bool bottom_right, const std::vector<int64_t>& seq_q,
                      const std::vector<int64_t>& seq_k) {
  const OpCost c = modelOp(op, shapesOf(inputs), shapesOf(outputs),
                           AttentionArgs{layout, causal, bottom_right, seq_q, seq_k});
  return py::make_tuple(c.flops, c.bytes, c.cube, c.ns);
}

std::vector<py::tuple> costTotalsBody() {
  std::vector<py::tuple> out;
  for (const OpCostTotal& t : costTotals()) out.push_back(py::make_tuple(t.name, t.calls, t.ns, t.flops));
  return out;
}

uint64_t simDeviceClock(int64_t device) {
  uint64_t ns = 0;
  NPU_CHECK(npuSimDeviceClock(initializedDevice(device), &ns));
  return ns;
}

// ---- bodies: card fidelity (strict card mode, HF32) ------------------------------------------

native::CubeFamily cubeFamily(const std::string& family) {
  if (family == "matmul") return native::CubeFamily::kMatmul;
  TORCH_CHECK_VALUE(family == "conv", "HF32 family must be 'matmul' or 'conv', got '", family, "'");
  return native::CubeFamily::kConv;
}

c10::ScalarType scalarTypeOf(const py::handle& dtype) {
  TORCH_CHECK_TYPE(THPDtype_Check(dtype.ptr()), "card rules: expected a torch.dtype key, got ",
                   py::str(dtype).cast<std::string>());
  return reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type;
}

std::map<c10::ScalarType, std::string> byDtype(const py::dict& d) {
  std::map<c10::ScalarType, std::string> out;
  for (const auto& [key, value] : d) out[scalarTypeOf(key)] = value.cast<std::string>();
  return out;
}

// rules: [(row, other kind, {dtype: kind}, {dtype: refusal}, {dtype: what the card does},
//          what the card does without a tensor, [ops])]; dtype_names: {dtype: "float64"}.
void installCardRulesBody(const std::string& target, const py::dict& dtype_names,
                          const py::list& rules) {
  std::vector<card_check::RuleSpec> specs;
  for (const py::handle& item : rules) {
    const py::tuple r = py::reinterpret_borrow<py::tuple>(item);
    TORCH_CHECK_VALUE(r.size() == 7, "card rules: each rule is a 7-tuple");
    specs.push_back({r[0].cast<std::string>(), r[1].cast<std::string>(),
                     byDtype(r[2].cast<py::dict>()), byDtype(r[3].cast<py::dict>()),
                     byDtype(r[4].cast<py::dict>()), r[5].cast<std::string>(),
                     r[6].cast<std::vector<std::string>>()});
  }
  card_check::installCardRules(target, byDtype(dtype_names), specs);
}

}  // namespace
}  // namespace torch_npu

// ---- the table: Python name -> body --------------------------------------------------------

using namespace torch_npu;  // NOLINT: the table below names the bodies above

PYBIND11_MODULE(_C, m) {
  installTerminateDiagnostics();
  m.doc() = "torch_npu._C: the SimNPU adapter (devices, streams, memory, RNG, fallback)";
  py::register_local_exception_translator(
      [](std::exception_ptr error) { torch::translate_exception_to_python(error); });

  m.def("_npu_init", &npuInit);
  m.def("_npu_getDeviceCount", &getDeviceCount);
  m.def("_npu_shadowMode", [] { return npuSimPeekShadow() != 0; });
  m.def("_npu_setCostModel", &setCostModel);
  m.def("_npu_costModelInstalled", &costModelInstalled);
  m.def("_npu_modelOp", &modelOpBody, py::arg("op"), py::arg("inputs"), py::arg("outputs"),
        py::arg("layout") = "BNSD", py::arg("causal") = false, py::arg("bottom_right") = false,
        py::arg("seq_q") = std::vector<int64_t>(), py::arg("seq_k") = std::vector<int64_t>());
  m.def("_npu_costTotals", &costTotalsBody);
  m.def("_npu_resetCostTotals", &resetCostTotals);
  m.def("_npu_simDeviceClock", &simDeviceClock);
  m.def("_npu_peekDeviceCount", &peekDeviceCount);
  m.def("_empty_strided_npu", &emptyStridedNpu, py::arg("size"), py::arg("stride"),
        py::arg("dtype"));
  m.def("_npu_setDevice", &setDeviceBody);
  m.def("_npu_getDevice", &getDeviceBody);
  m.def("_npu_getDeviceProperties", &getDeviceProperties);
  m.def("_npu_synchronize", &synchronizeDevice);
  m.def("_npu_get_sync_debug_mode", &syncDebugMode);
  m.def("_npu_set_sync_debug_mode", &setSyncDebugMode);
  m.def("_npu_getUtilization", &getUtilization);
  m.def("_npu_memGetInfo", &memGetInfo);
  m.def("_npu_visibleDevicesWarning", &visibleDevicesWarning);
  m.def("_npu_isInBadFork", &isInBadFork);
  m.def("_npu_quiesceAtExit", &quiesceAtExit, py::call_guard<py::gil_scoped_release>());
  m.def("_npu_runtimeVersion", &runtimeVersion);
  m.def("_npu_driverVersion", &driverVersion);

  m.def("_npu_getCurrentStream", &getCurrentStream);
  m.def("_npu_getDefaultStream", &getDefaultStream);
  m.def("_npu_setStream", &setStream);
  m.def("_npu_getStreamFromPool", &streamFromPool);
  m.def("_npu_streamQuery", &streamQuery);
  m.def("_npu_streamSynchronize", &streamSynchronize);
  m.def("_npu_streamPriorityRange", &streamPriorityRange);
  m.def("_npu_sleep", &sleepOnStream);
  m.def("_npu_eventElapsedTime", &eventElapsedTime);

  m.def("_npu_memoryStats", &memoryStats);
  m.def("_npu_hostMemoryStats", &hostMemoryStats);
  m.def("_npu_emptyWithSwappedMemory",
        [](std::vector<int64_t> size, py::object dtype, int64_t device) {
          auto* d = reinterpret_cast<THPDtype*>(dtype.ptr());
          return emptyWithSwappedMemory(size, d->scalar_type,
                                        static_cast<c10::DeviceIndex>(device));
        });
  m.def("_npu_expandableSegments",
        [] { return alloc::CachingAllocator::instance().config().expandable_segments; });
  m.def("_npu_resetAccumulatedHostMemoryStats",
        [] { getNPUHostAllocator()->reset_accumulated_stats(); });
  m.def("_npu_resetPeakHostMemoryStats", [] { getNPUHostAllocator()->reset_peak_stats(); });
  m.def("_npu_memorySnapshot", &memorySnapshot);
  m.def("_npu_emptyCache", &emptyCache);
  m.def("_npu_resetPeakMemoryStats", &resetPeakMemoryStats);
  m.def("_npu_resetAccumulatedMemoryStats", &resetAccumulatedMemoryStats);
  m.def("_npu_setMemoryFraction", &setMemoryFraction);
  m.def("_npu_getMemoryFraction", &getMemoryFraction);
  m.def("_npu_setAllocatorSettings", &setAllocatorSettings);
  m.def("_npu_recordMemoryHistory", &memory_history::configure);
  m.def("_npu_memoryHistory", [] {
    return memory_history::snapshot(static_cast<int>(deviceCount()));
  });

  m.def("_npu_getDefaultGenerator", &getDefaultGenerator);
  m.def("_fallback_ops", &fallbackOps);
  m.def("_host_kernel_ops", &hostKernelOps, py::arg("synchronizing") = false);
  m.def("_npu_pathTotals", [] {
    const auto t = OpStats::instance().totals();
    return py::make_tuple(t[0], t[1], t[2]);
  });
  m.def("_npu_setAllowHF32", [](const std::string& family, bool allow) {
    native::setAllowHF32(cubeFamily(family), allow);
  });
  m.def("_npu_allowHF32",
        [](const std::string& family) { return native::allowHF32(cubeFamily(family)); });
  m.def("_npu_strictModeFromEnvironment", &card_check::initStrictModeFromEnvironment);
  m.def("_npu_setStrictMode", &card_check::setStrictMode);
  m.def("_npu_strictMode", &card_check::strictMode);
  m.def("_npu_installCardRules", &installCardRulesBody);
  m.def("_npu_cardCheckSites", &card_check::siteOps);
  m.def("_npu_launchCompiledKernel", &launchCompiledKernelFromPython);
  m.def("_npu_graphPoolHandle", &graphPoolHandle);
  m.def("_npu_createMemPool", &createMemPool);
  m.def("_npu_beginAllocateCurrentThreadToPool", &beginAllocateCurrentThreadToPool);
  m.def("_npu_endAllocateCurrentThreadToPool", &endAllocateCurrentThreadToPool);
  m.def("_npu_releasePool", &releaseMemPool);
  m.def("_npu_destroyMemPool", &destroyMemPool);
  m.def("_npu_memPoolUseCount", &memPoolUseCount);
  m.def("_npu_isCurrentStreamCapturing", [] {
    npuStreamCaptureStatus status = npuStreamCaptureStatusNone;
    NPU_CHECK(npuStreamIsCapturing(getCurrentNPUStream().handle(), &status));
    return status != npuStreamCaptureStatusNone;
  });
  py::class_<NPUGraph>(m, "_NPUGraph")
      .def(py::init<>())
      .def("capture_begin", &NPUGraph::captureBegin, py::arg("pool") = MempoolId{0, 0},
           py::arg("capture_error_mode") = "global")
      .def("capture_end", &NPUGraph::captureEnd)
      .def("replay", &NPUGraph::replay, py::call_guard<py::gil_scoped_release>())
      .def("reset", &NPUGraph::reset)
      .def("pool", &NPUGraph::pool)
      .def("_num_tasks", &NPUGraph::numTasks)
      .def("_debug_dump", &NPUGraph::debugDump, py::arg("debug_path"));
  py::class_<GraphOutputs>(m, "_NPUGraphOutputs")
      .def(py::init<std::vector<at::Tensor>>())
      .def("hand_out", &GraphOutputs::handOut)
      .def("preserve_live", &GraphOutputs::preserveLive);
  // Whether inputs[indices[k]] starts at addresses[k] for every k: a graph replay's check that
  // the inputs it reads where they are have not moved, without a Python call per tensor.
  m.def("_npu_dataPtrsAt", [](const py::list& inputs, const std::vector<int64_t>& indices,
                              const std::vector<int64_t>& addresses) {
    TORCH_CHECK(indices.size() == addresses.size(), "_npu_dataPtrsAt: ", indices.size(),
                " indices for ", addresses.size(), " addresses");
    for (size_t k = 0; k < indices.size(); ++k) {
      PyObject* item = PyList_GetItem(inputs.ptr(), static_cast<Py_ssize_t>(indices[k]));
      if (item == nullptr) throw py::error_already_set();
      TORCH_CHECK(THPVariable_Check(item), "_npu_dataPtrsAt: input ", indices[k],
                  " is not a tensor");
      if (reinterpret_cast<int64_t>(THPVariable_Unpack(item).data_ptr()) != addresses[k])
        return false;
    }
    return true;
  });
  m.attr("_built_torch_version") = NPU_BUILT_TORCH_VERSION;
  profiler::initProfilerBindings(m);
  initDistributedBindings(m);
  initRecoveryBindings(m);
  initSanitizerBindings(m);
}
