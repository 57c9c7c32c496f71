#include "OpStats.h"

namespace torch_npu {

OpStats& OpStats::instance() {
  static OpStats* stats = new OpStats();
  return *stats;
}

int64_t OpStats::count(OpPath path, const std::string& op) {
  const auto index = static_cast<size_t>(path);
  totals_[index].fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mutex_);
  return ++calls_[index][op];
}

std::map<std::string, int64_t> OpStats::calls(OpPath path) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return calls_[static_cast<size_t>(path)];
}

std::array<int64_t, kNumOpPaths> OpStats::totals() const {
  std::array<int64_t, kNumOpPaths> out{};
  for (size_t i = 0; i < kNumOpPaths; ++i) out[i] = totals_[i].load(std::memory_order_relaxed);
  return out;
}

}  // namespace torch_npu
