// The Python bindings of the distributed backend (torch_npu._C._distributed_c10d).
#pragma once

#include <pybind11/pybind11.h>

namespace torch_npu {
void initDistributedBindings(pybind11::module& m);
}  // namespace torch_npu
