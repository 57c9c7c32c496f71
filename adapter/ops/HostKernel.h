// The npu device's long tail: an aten op without a kernel of ours runs ATen's own CPU kernel as
// its device kernel, on the current stream, over host aliases of the device memory.
//
// How an op gets there (the global PrivateUse1 fallback, Fallback.cpp, calls runOnHost):
//  1. asynchronous host kernel: the op's meta kernel computes the outputs' sizes, strides and
//     dtypes on the host; the outputs are allocated on the npu and the CPU kernel is queued on
//     the stream, so the host returns at once, as with any npu kernel;
//  2. synchronizing host kernel: ops whose output size depends on the data (nonzero,
//     masked_select, unique, boolean-mask indexing, ...) and ops whose meta kernel refused the
//     arguments (bad input: the CPU kernel then raises its own message) wait for the stream,
//     run the CPU kernel on aliases of the inputs and copy the outputs to the device;
//  3. anything else (no meta kernel, a non-tensor result, a view) is the CPU fallback
//     (Fallback.cpp): copies to the host and back, a warning, TORCH_NPU_FALLBACK_CPU_DISABLE.
// The op report (python -m torch_npu.utils.op_report) shows which of these each op took.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>

namespace torch_npu {

// Runs `op` by path 1, 2 or 3 above.
void runOnHost(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Counts a call of aten::<name> that a kernel of ours handed to ATen's CPU kernel itself (the
// calls of each path are counted in OpStats).
void countHostKernelCall(const char* name);

// Runs aten::<name>.<overload> through path 1/2 with the given arguments: how a kernel of ours
// hands an input it does not cover (a dtype, a layout) to ATen's CPU kernel.
template <class Result, class... Args>
Result callHostKernel(const c10::OperatorHandle& op, Args&&... args) {
  torch::jit::Stack stack;
  torch::jit::push(stack, std::forward<Args>(args)...);
  runOnHost(op, &stack);
  if constexpr (!std::is_void_v<Result>) return torch::jit::pop(stack).to<Result>();
}

// The handle of aten::<name>.<overload>, looked up once per call site.
#define NPU_ATEN_OP(name, overload)                                                      \
  ([]() -> const c10::OperatorHandle& {                                                  \
    static const c10::OperatorHandle handle =                                            \
        c10::Dispatcher::singleton().findSchemaOrThrow("aten::" name, overload);         \
    return handle;                                                                       \
  }())

}  // namespace torch_npu
