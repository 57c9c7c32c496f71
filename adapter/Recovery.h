// torch_npu's recovery calls (stop_device, restart_device, check_uce_in_memory, _get_uce_addr)
// and the NPU_SIM_FAULTS hooks torch_npu's Python side needs (optimizer steps, UCE targets).
#pragma once

#include <pybind11/pybind11.h>

namespace torch_npu {
void initRecoveryBindings(pybind11::module& m);
}  // namespace torch_npu
