// Kernels that torch.compile (Inductor) generates for npu, launched on the stream.
//
// Inductor's C++ code generator writes each fused kernel as an extern "C" function of pointers
// and int64 sizes. Device memory is host-addressable on the simulator, so such a function IS an
// npu kernel; it only has to run on the stream, in order with the eager work around it, instead
// of inline on the host. launchCompiledKernel queues it as a stream task with the argument
// values captured at launch.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <vector>

namespace torch_npu {

// The most arguments a compiled kernel may take (Inductor's kernels take one per buffer and
// size symbol; a fused kernel over dozens of buffers is rare).
constexpr size_t kMaxCompiledKernelArgs = 64;

// One argument of a compiled kernel. Every argument travels as a 64-bit integer: on x86-64 and
// AArch64 pointers and int64_t use the same registers and stack slots, and they are the only
// kinds Inductor's C++ kernels take besides doubles (refused by the caller).
struct KernelArg {
  uint64_t value = 0;        // a device pointer or an int64 size; or a host scalar's bytes
  bool host_scalar = false;  // value holds the bytes of a 0-dim CPU tensor (Dynamo makes one of
                             // a Python float or int); the kernel reads it through a pointer,
                             // so the task keeps the bytes and passes their address
};

// The argument a 0-dim CPU tensor becomes: its bytes, read now (as eager code reads a CPU
// scalar at the call), kept by the task.
KernelArg hostScalarArg(const void* data, size_t element_size);

// Queues fn(args...) on the current stream of `device` (-1: the current device).
void launchCompiledKernel(uintptr_t fn, const std::string& name, std::vector<KernelArg> args,
                          c10::DeviceIndex device);

}  // namespace torch_npu
