// The boxed CPU fallback of the npu device: every aten op without an npu kernel runs on the CPU
// (inputs copied to the host, outputs copied back), with a one-time warning per op, unless
// TORCH_NPU_FALLBACK_CPU_DISABLE=1 forbids it.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>


namespace torch_npu {

// Copies the inputs to the CPU, runs the op there and copies the results back (warns once per
// op; TORCH_NPU_FALLBACK_CPU_DISABLE=1 turns it into an error).
void cpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// The npu device of the first npu tensor (or tensor list element, or npu Device argument, the
// current device when it has no index) among stack[begin:]; -1 when there is none.
c10::DeviceIndex npuDeviceOf(const torch::jit::Stack& stack, size_t begin);

// Replaces each Generator argument (npu, or none: the device's default) by a CPU generator
// seeded from it, so a CPU kernel draws reproducible numbers from the npu generator's stream.
void replaceNPUGenerators(const c10::FunctionSchema& schema, torch::jit::Stack* stack);

}  // namespace torch_npu
