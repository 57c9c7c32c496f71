// The stream sanitizer's adapter side (TORCH_NPU_SANITIZER, torch_npu.npu._sanitizer): ops'
// byte ranges to the runtime's happens-before engine, reports with both accesses' stacks.
#pragma once

#include <ATen/core/Tensor.h>
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "npu/runtime.h"

namespace torch_npu {
void initSanitizerBindings(pybind11::module& m);
// A collective launched on `stream` (ProcessGroupHCCL): reads its inputs, writes its outputs
// there. (The c10d ops themselves are skipped: they run on the communicator's stream.)
void sanitizeCollective(npuStream_t stream, const std::string& op,
                        const std::vector<at::Tensor>& inputs,
                        const std::vector<at::Tensor>& outputs);
}  // namespace torch_npu
