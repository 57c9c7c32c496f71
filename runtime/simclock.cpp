// The cost model of shadow execution's simulated clock (npu/runtime.h): the figures the runtime
// itself needs (copies, memsets; ccl reads the collective ones). Kernels' modeled times come
// from the adapter (npuSimCharge), which knows the ops.
#include <cmath>
#include <mutex>

#include "runtime_internal.h"

namespace npu::rt {
namespace {

std::atomic<bool> g_on{false};
npuSimCostModel g_model{};  // written once, before g_on is set
uint64_t g_dispatch_ns = 0;  // likewise: host_dispatch_us in ns
// The host's simulated clock (npu/runtime.h, host_dispatch_us): one per process, since the
// threads that issue ops (the main one, autograd's) take turns rather than run side by side.
std::atomic<uint64_t> g_host_ns{0};

}  // namespace

uint64_t simHostIssue() {
  if (g_dispatch_ns == 0) return 0;
  return g_host_ns.fetch_add(g_dispatch_ns, std::memory_order_relaxed) + g_dispatch_ns;
}

void simHostAtLeast(uint64_t ns) { simClockAtLeast(g_host_ns, ns); }

bool simClockOn() { return g_on.load(std::memory_order_acquire); }
void simClockDisable() { g_on.store(false, std::memory_order_release); }
const npuSimCostModel& simCostModel() { return g_model; }

uint64_t simTransferNs(int memcpy_kind, size_t bytes) {
  const npuSimCostModel& m = g_model;
  const bool host = memcpy_kind == npuMemcpyHostToDevice || memcpy_kind == npuMemcpyDeviceToHost;
  // A device-to-device copy reads and writes HBM; a memset (kind < 0) writes it.
  const double bytes_moved = memcpy_kind == npuMemcpyDeviceToDevice ? 2.0 * bytes : double(bytes);
  const double gbps = host ? m.h2d_gbps : m.hbm_gbps;
  return static_cast<uint64_t>(std::llround(m.copy_overhead_us * 1e3 + bytes_moved / gbps));
}

}  // namespace npu::rt

using namespace npu::rt;

extern "C" {

npuError_t npuSimSetCostModel(const npuSimCostModel* model) {
  if (!model) return fail(npuErrorInvalidValue, "npuSimSetCostModel: model is NULL");
  if (!npuSimPeekShadow()) {
    return fail(npuErrorNotSupported, "npuSimSetCostModel: the simulated clock runs under "
                                      "shadow execution only (NPU_SIM_SHADOW=1)");
  }
  const double rates[] = {model->hbm_gbps, model->h2d_gbps, model->intra_gbps, model->inter_gbps};
  for (double r : rates) {
    if (!(r > 0) || !std::isfinite(r)) {
      return fail(npuErrorInvalidValue, "npuSimSetCostModel: every bandwidth must be a positive "
                                        "number of GB/s");
    }
  }
  if (!(model->host_dispatch_us >= 0) || !std::isfinite(model->host_dispatch_us)) {
    return fail(npuErrorInvalidValue, "npuSimSetCostModel: host_dispatch_us must be a number of "
                                      "microseconds >= 0 (0: the host is not modeled)");
  }
  static std::mutex once;
  std::lock_guard<std::mutex> lock(once);
  if (g_on.load()) {
    return fail(npuErrorNotSupported, "npuSimSetCostModel: a cost model is installed already "
                                      "(one per process, before the first launch)");
  }
  g_model = *model;
  g_dispatch_ns = static_cast<uint64_t>(std::llround(model->host_dispatch_us * 1e3));
  g_on.store(true, std::memory_order_release);
  return npuSuccess;
}

npuError_t npuSimGetCostModel(npuSimCostModel* model) {
  if (!model) return fail(npuErrorInvalidValue, "npuSimGetCostModel: model is NULL");
  if (!simClockOn()) return npuErrorNotReady;
  *model = g_model;
  return npuSuccess;
}

}  // extern "C"
