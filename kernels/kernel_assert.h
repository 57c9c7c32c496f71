// Internal invariants of the kernel library. Kernels trust their inputs (the adapter checks
// user arguments), so a failed assert here is always a bug in SimNPU, never a user error.
#pragma once

#include <stdexcept>
#include <string>

namespace npu::kernels::detail {

[[noreturn]] inline void assert_fail(const char* cond, const char* file, int line,
                                     const std::string& msg) {
  throw std::logic_error(std::string("SimNPU kernels internal assert failed (this is a bug): ") +
                         cond + " at " + file + ":" + std::to_string(line) +
                         (msg.empty() ? "" : ": " + msg));
}

}  // namespace npu::kernels::detail

#define NPU_KERNEL_ASSERT(cond, msg)                                            \
  do {                                                                          \
    if (!(cond)) ::npu::kernels::detail::assert_fail(#cond, __FILE__, __LINE__, (msg)); \
  } while (0)
