// How each npu op call ran, for the op report (python -m torch_npu.utils.op_report): one table
// for the execution paths that leave our kernel library. Calls of our own kernels are not
// counted here (the report tells them from the dispatcher's profile).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace torch_npu {

// The ways an op without a kernel of ours runs, in order of preference (ExecutionPaths.h).
enum class OpPath : uint8_t {
  kHostKernel,      // ATen's CPU kernel queued on the stream over host aliases (asynchronous)
  kHostKernelSync,  // ATen's CPU kernel after waiting for the stream (data-dependent outputs)
  kCpuFallback,     // copies to the CPU and back, with torch_npu's warning
};
inline constexpr size_t kNumOpPaths = 3;

class OpStats {
 public:
  // Never destroyed: stream workers and unjoined threads may count during interpreter exit.
  static OpStats& instance();

  // Counts one call of `op` ("aten::sort.values_stable") by `path`; returns the op's count on
  // that path so far (1 on its first call: the fallback warns then).
  int64_t count(OpPath path, const std::string& op);

  // Calls per op by `path`.
  std::map<std::string, int64_t> calls(OpPath path) const;
  // Calls of all ops by each path: read around each op without taking the lock.
  std::array<int64_t, kNumOpPaths> totals() const;

 private:
  OpStats() = default;

  mutable std::mutex mutex_;
  std::array<std::map<std::string, int64_t>, kNumOpPaths> calls_;
  std::array<std::atomic<int64_t>, kNumOpPaths> totals_{};
};

}  // namespace torch_npu
