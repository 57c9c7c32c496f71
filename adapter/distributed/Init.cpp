// torch_npu._C._distributed_c10d: the Python face of ProcessGroupHCCL. The class derives from
// torch's own c10d Backend binding (torch._C._distributed_c10d.Backend; both extensions share
// pybind11's type registry), so torch.distributed takes it wherever it takes a Backend.
#include "distributed/Init.h"

#include <torch/csrc/utils/pybind.h>

#include <chrono>

#include "distributed/ProcessGroupHCCL.h"

namespace py = pybind11;

namespace torch_npu {
namespace {

// The c10d objects arrive as torch's Python objects; their C++ object is owned by an
// intrusive_ptr, so a new reference is taken from the raw pointer rather than reading the holder
// of another extension's type.
template <class T>
c10::intrusive_ptr<T> shareOwnership(T* object) {
  return object == nullptr ? c10::intrusive_ptr<T>() : c10::intrusive_ptr<T>::reclaim_copy(object);
}

c10::intrusive_ptr<ProcessGroupHCCL> makeProcessGroup(c10d::Store& store, int rank, int size,
                                                      double timeout_seconds,
                                                      std::vector<uint32_t> node_of_rank,
                                                      c10d::Backend* inter_node,
                                                      std::string group_name,
                                                      std::vector<uint64_t> global_ranks) {
  auto options = c10::make_intrusive<ProcessGroupHCCL::Options>(
      std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000.0)));
  options->nodeOfRank = std::move(node_of_rank);
  options->interNodeBackend = shareOwnership(inter_node);
  options->group_name = std::move(group_name);
  options->global_ranks_in_group = std::move(global_ranks);
  return c10::make_intrusive<ProcessGroupHCCL>(shareOwnership(&store), rank, size,
                                               std::move(options));
}

}  // namespace

void initDistributedBindings(py::module& m) {
  // The base class must be registered first: importing torch.distributed does it.
  py::module::import("torch._C._distributed_c10d");
  py::module dist = m.def_submodule("_distributed_c10d", "SimNPU's hccl backend for c10d");
  py::class_<ProcessGroupHCCL, c10d::Backend, c10::intrusive_ptr<ProcessGroupHCCL>>(
      dist, "ProcessGroupHCCL",
      "The hccl backend: collectives between npu devices (torch_npu.distributed makes it).")
      .def(py::init(&makeProcessGroup), py::arg("store"), py::arg("rank"), py::arg("size"),
           py::arg("timeout_seconds"), py::arg("node_of_rank") = std::vector<uint32_t>(),
           py::arg("inter_node") = nullptr, py::arg("group_name") = "",
           py::arg("global_ranks") = std::vector<uint64_t>(),
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("timeout_seconds",
                             [](ProcessGroupHCCL& pg) {
                               return pg.getBackendOptions()->timeout.count() / 1000.0;
                             })
      .def_property_readonly("node_of_rank", &ProcessGroupHCCL::nodeOfRank)
      .def("_inter_node_bytes", &ProcessGroupHCCL::interNodeBytes,
           "(sent, received): bytes carried between nodes by the Gloo hops so far")
      .def("_comm_handle",
           [](ProcessGroupHCCL& pg, int64_t device) {
             return reinterpret_cast<uintptr_t>(
                 pg.commForTesting(static_cast<c10::DeviceIndex>(device)));
           },
           py::call_guard<py::gil_scoped_release>());
}

}  // namespace torch_npu
