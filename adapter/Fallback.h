// The boxed CPU fallback of the npu device: every aten op without an npu kernel runs on the CPU
// (inputs copied to the host, outputs copied back), with a one-time warning per op, unless
// TORCH_NPU_FALLBACK_CPU_DISABLE=1 forbids it.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace torch_npu {

// How many times each op ("aten::isin.Tensor_Tensor_out") has fallen back, for the op report.
std::map<std::string, int64_t> fallbackCounts();

}  // namespace torch_npu
