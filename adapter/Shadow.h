// Shadow execution (NPU_SIM_SHADOW=1) as the adapter sees it: a program runs at its real size
// with npu tensors that carry no data (docs/shadow.md).
//
// The runtime holds the seams where data would move (npu/runtime.h): device memory is address
// space only, kernels (npuLaunchKernel: every task the adapter launches) keep their places in
// their streams but do not run, copies and collectives beyond 64 KiB move no bytes (a large copy
// to the host writes zeros) while small ones carry their metadata. So every op runs its normal host code (shape logic,
// allocation, stream and event bookkeeping, autograd) unchanged. What is left for the adapter
// is where a *host* value would depend on the data:
//  - an op whose output shape depends on the values (nonzero, masked_select, unique, boolean
//    mask indexing) cannot be sized: refuseDataDependent raises, naming the op;
//  - a value read on the host (Tensor.item(), .cpu(), tolist()) is the placeholder, zero:
//    warnPlaceholders says so once.
#pragma once

#include <string>

namespace torch_npu {

// NPU_SIM_SHADOW=1, read once by the runtime at start-up.
bool shadowExecution();

// Raises the error for an op whose output size depends on tensor values, which shadow
// execution does not compute. `op` is the operator's name ("aten::nonzero").
[[noreturn]] void refuseDataDependent(const std::string& op);

// Warns (once per process) that values read on the host are placeholders.
void warnPlaceholders();

}  // namespace torch_npu
