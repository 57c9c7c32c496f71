// The three ways an aten op runs on the npu device, in order of preference, and the one place
// that decides between the last two:
//  1. npu kernel: the op is registered for PrivateUse1 (NPU_IMPL, in the family's file) and one
//     of our kernels covers the call: it is queued on the stream (KernelBridge.h). A registered
//     op that does not cover a call (a dtype, a layout) hands it to path 2 with callHostKernel.
//  2. ATen host kernel: ATen's own CPU kernel is the device kernel. A dtype the card takes and
//     the CPU kernel lacks (float16 of cdist, int32 indices of put_, ...), or 16-bit arguments
//     of a CPU kernel that rounds intermediates where the card computes in float32
//     (upsample_linear1d, grid_sampler_2d, ...), are widened first and the results narrowed
//     back once (HostKernelDtypes.h). Ops whose CPU kernel checks more than their meta kernel
//     (searchsorted, histc) have npu kernels that check at the call, then come here.
//     a. asynchronous: the op's meta kernel computes the outputs' sizes, strides and dtypes on
//        the host (remembered per signature of the arguments); the outputs are allocated on the
//        npu and the CPU kernel is queued on the stream over host aliases of the device memory,
//        so the host returns at once;
//     b. synchronizing: ops whose output size depends on the data (nonzero, masked_select,
//        unique, boolean-mask indexing, ...) and calls whose meta kernel refused the arguments
//        (bad input: the CPU kernel then raises its own message) wait for the stream, run the
//        CPU kernel on aliases of the inputs and copy the outputs to the device;
//  3. CPU fallback: anything else (no meta kernel, a non-tensor result, a view) is copied to the
//     host, run there and copied back, with torch_npu's warning once per op;
//     TORCH_NPU_FALLBACK_CPU_DISABLE=1 turns it into an error naming the op.
// An op with no npu registration reaches runOnHost through the global fallback (Dispatch.cpp),
// after the card check (runUnregistered).
// Each call of paths 2 and 3 is counted in OpStats, which the op report reads
// (python -m torch_npu.utils.op_report).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <type_traits>
#include <utility>

namespace torch_npu {

// Runs `op` by path 2a, 2b or 3 above.
void runOnHost(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Runs `op` by path 3, whatever paths 1 and 2 could do: how strict card mode runs an op that
// torch_npu has no NPU kernel for (CardCheck.h), with its warning and its
// TORCH_NPU_FALLBACK_CPU_DISABLE check. (Under shadow execution, which has no data to copy, it
// is runOnHost.)
void runByCpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// The global fallback's entry (Dispatch.cpp): an op without an npu kernel of ours. The card
// check first (CardCheck.h), then runOnHost or runByCpuFallback.
void runUnregistered(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Runs aten::<name>.<overload> through path 2 (or 3) with the given arguments: how a kernel of
// ours hands a call it does not cover to ATen's CPU kernel.
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
