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

// Queues fn(args...) on the current stream of `device` (-1: the current device). Every argument
// is passed as a 64-bit integer: on x86-64 and AArch64 pointers and int64_t travel in the same
// registers and stack slots, and they are the only kinds of argument Inductor's C++ kernels take
// besides floats (refused by the caller).
void launchCompiledKernel(uintptr_t fn, const std::string& name, std::vector<uint64_t> args,
                          c10::DeviceIndex device);

}  // namespace torch_npu
