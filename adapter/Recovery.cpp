#include "Recovery.h"

#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "NPUException.h"
#include "npu/caching_allocator.h"
#include "npu/runtime.h"

namespace py = pybind11;

namespace torch_npu {
namespace {

std::vector<npuMemUceInfo> uceInfo(int device) {
  std::vector<npuMemUceInfo> info(npuGetMemUceInfo(device, nullptr, 0));
  if (!info.empty()) info.resize(npuGetMemUceInfo(device, info.data(), info.size()));
  return info;
}

// Whether a recorded error lies in memory the caching allocator holds on `device`.
bool uceInPool(int device, const std::vector<npuMemUceInfo>& info) {
  for (const auto& seg : npu::alloc::CachingAllocator::instance().snapshot()) {
    if (seg.device != device) continue;
    for (const npuMemUceInfo& u : info) {
      const auto a = reinterpret_cast<uintptr_t>(u.addr);
      if (a < seg.address + seg.total_size && seg.address < a + u.len) return true;
    }
  }
  return false;
}

// torch_npu.npu.check_uce_in_memory: 0 no memory error; 1 outside PyTorch's pool (cannot be
// recovered); 2 in memory the pool only cached (released by emptying the cache: re-run the step);
// 3 in memory still allocated (parameters, optimizer state: load them from a checkpoint).
int checkUceInMemory(int device) {
  const std::vector<npuMemUceInfo> info = uceInfo(device);
  if (info.empty()) return 0;
  if (!uceInPool(device, info)) return 1;
  npu::alloc::CachingAllocator::instance().emptyCache();
  return uceInPool(device, info) ? 3 : 2;
}

py::list uceAddresses() {
  int device = 0;
  NPU_CHECK(npuGetDevice(&device));
  py::list out;
  for (const npuMemUceInfo& u : uceInfo(device)) {
    py::dict d;
    d["ptr"] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(u.addr));
    d["size"] = u.len;
    out.append(d);
  }
  return out;
}

// Counts an optimizer step; returns the hbm_uce fault due now as (target, text), else None.
py::object faultStep(int device) {
  npuSimFault fault;
  NPU_CHECK(npuSimFaultTick(npuSimOnStep, device, &fault));
  if (fault.kind != npuSimFaultHbmUce) return py::none();
  return py::make_tuple(std::string(fault.target), std::string(fault.text));
}

struct UceRange {
  int device;
  void* ptr;
  size_t bytes;
};

}  // namespace

void initRecoveryBindings(py::module& m) {
  m.def("_npu_stopDevice", [](int device) {
    return npuDeviceTaskAbort(device) == npuSuccess ? 0 : 1;  // torch_npu: 0 on success
  });
  m.def("_npu_restart_device", [](int device) { NPU_CHECK(npuDeviceRepair(device)); },
        py::call_guard<py::gil_scoped_release>());
  m.def("_npu_check_uce_in_memory", &checkUceInMemory);
  m.def("_npu_get_uce_addr", &uceAddresses);
  m.def("_npu_deviceHealth", [](int device) {
    int health = 0;
    NPU_CHECK(npuDeviceGetHealth(device, &health));
    return health;
  });
  m.def("_npu_faultsArmed", [] { return npuSimFaultsArmed() != 0; });
  m.def("_npu_faultStep", &faultStep);
  // The memory error happens in stream order, where the optimizer step that names it ends:
  // work queued before it (the step's own gradient all-reduce, still waiting for a slower
  // peer) finishes as on a card, and only work after it meets the faulty device.
  m.def("_npu_injectUce", [](int device, uintptr_t stream, uintptr_t ptr, size_t bytes) {
    auto* range = new UceRange{device, reinterpret_cast<void*>(ptr), bytes};
    const npuError_t err = npuLaunchTaskWithRelease(
        reinterpret_cast<npuStream_t>(stream), "NPU_SIM_FAULTS hbm_uce",
        [](void* arg) {
          const auto* r = static_cast<const UceRange*>(arg);
          if (npuSimInjectMemError(r->device, r->ptr, r->bytes) != npuSuccess) {
            npuTaskFail(npuGetLastErrorMessage());
          }
        },
        [](void* arg) { delete static_cast<UceRange*>(arg); }, range);
    if (err != npuSuccess && err != npuErrorLaunchFailure) delete range;
    NPU_CHECK(err);
  });
}

}  // namespace torch_npu
