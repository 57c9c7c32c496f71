// The Kineto plugin: torch.profiler with ProfilerActivity.PrivateUse1 gets the runtime's device
// records (kernels, copies, memsets) as Kineto activities, linked to the operators that launched
// them. (torch_npu.profiler's own session is in Profiler.cpp.)
//
// How it works:
//  - Kineto pushes its own correlation id for every op on the op's thread; the plugin forwards it
//    to the runtime as the thread's correlation id, so the kernels an op launches carry it.
//  - Stopping the session drains the runtime's records and turns each into an activity.
//  - Without Kineto in torch (its headers absent), this file registers nothing.
#include "Profiler.h"

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "npu/profiler.h"
#include "npu/runtime.h"

#if __has_include(<IActivityProfiler.h>)
#define NPU_KINETO_PLUGIN 1
#ifndef USE_KINETO
#define USE_KINETO  // the headers below only declare the registry when Kineto is in
#endif
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#endif

#ifdef NPU_KINETO_PLUGIN
// IActivityProfilerSession::getTraceBuffer returns std::unique_ptr<CpuTraceBuffer>, a type that
// torch's headers only declare. Ours always returns an empty one, but even that needs a deleter
// for the incomplete type; this one is never called on a non-null pointer (it would be a bug).
template <>
struct std::default_delete<libkineto::CpuTraceBuffer> {
  void operator()(libkineto::CpuTraceBuffer* buffer) const noexcept {
    if (buffer != nullptr) std::abort();
  }
};
#endif

namespace torch_npu::profiler {

#ifdef NPU_KINETO_PLUGIN
namespace {

// Kineto keeps raw pointers to the activities a session logs and offers plugins no way to hand
// over their ownership (CpuTraceBuffer is not in torch's headers), while torch reads them back
// as late as export_chrome_trace(). So they are kept for the life of the process: about 200
// bytes per kernel profiled through torch.profiler.
std::mutex g_kineto_store_mutex;
std::vector<std::unique_ptr<libkineto::GenericTraceActivity>>& kinetoStore() {
  static auto* store = new std::vector<std::unique_ptr<libkineto::GenericTraceActivity>>();
  return *store;
}

thread_local std::vector<uint64_t> t_kineto_correlation_stack;

const char* memcpyKindName(int kind) {
  switch (kind) {
    case npuMemcpyHostToDevice:
      return "HtoD";
    case npuMemcpyDeviceToHost:
      return "DtoH";
    case npuMemcpyDeviceToDevice:
      return "DtoD";
    default:
      return "HtoH";
  }
}

class KinetoSession final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    // Kineto's clock is the Unix epoch in ns; ours is CLOCK_MONOTONIC.
    const auto wall = std::chrono::system_clock::now().time_since_epoch();
    epoch_offset_ns_ =
        std::chrono::duration_cast<std::chrono::nanoseconds>(wall).count() -
        static_cast<int64_t>(npuProfilerClockNs());
    const npuError_t error = npuProfilerStart();
    if (error != npuSuccess) {
      status_ = libkineto::TraceStatus::ERROR;
      errors_.push_back(std::string("SimNPU: device activities not recorded: ") +
                        npuGetLastErrorMessage());
      return;
    }
    started_ = true;
    owns_records_ = true;
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    if (!started_) return;
    npuProfilerStop();
    started_ = false;  // owns_records_ stays: processTrace, after stop, drains what we recorded
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return errors_; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, nullptr, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback linked_activity, int64_t /*start*/,
                    int64_t /*end*/) override {
    // Without our own runtime session the records belong to whoever holds it.
    if (!owns_records_) return;
    std::vector<npuActivityRecord> records(4096);
    std::vector<libkineto::GenericTraceActivity*> logged;
    {
      std::lock_guard<std::mutex> lock(g_kineto_store_mutex);
      while (size_t n = npuProfilerDrain(records.data(), records.size())) {
        for (size_t i = 0; i < n; ++i) addActivities(records[i], linked_activity, logged);
      }
    }
    for (const auto* activity : logged) activity->log(logger);
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(
        libkineto::DeviceInfo{0, 0, "SimNPU", "NPU"});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> infos;
    for (const auto& [device, stream] : streams_seen_) {
      infos.push_back(libkineto::ResourceInfo{stream, stream, device,
                                              "Stream " + std::to_string(stream)});
    }
    return infos;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }

  // Only a session that owns the runtime's records sets correlation ids: two profilers setting
  // the one per-thread id, with their op exits interleaved, would leave a stale id behind.
  void pushCorrelationId(uint64_t id) override {
    if (!owns_records_) return;
    t_kineto_correlation_stack.push_back(npuProfilerSetCorrelationId(id));
  }

  void popCorrelationId() override {
    if (!owns_records_ || t_kineto_correlation_stack.empty()) return;
    npuProfilerSetCorrelationId(t_kineto_correlation_stack.back());
    t_kineto_correlation_stack.pop_back();
  }

 private:
  // A kernel (or copy) becomes two activities, as CUDA's do in Kineto: the launch on the host
  // thread (PRIVATEUSE1_RUNTIME, a zero-length "npuLaunchTask") and the device activity on its
  // stream, joined by a flow arrow; both are linked to the op with the correlation id.
  void addActivities(const npuActivityRecord& r,
                     const libkineto::getLinkedActivityCallback& linked_activity,
                     std::vector<libkineto::GenericTraceActivity*>& logged) {
    static const libkineto::TraceSpan kSpan(0, 0, "SimNPU");
    const auto corr = static_cast<int32_t>(r.correlation_id);
    const libkineto::ITraceActivity* op =
        linked_activity && corr != 0 ? linked_activity(corr) : nullptr;

    std::string name = r.name;
    libkineto::ActivityType type = libkineto::ActivityType::CONCURRENT_KERNEL;
    if (r.kind == npuActivityMemcpy) {
      type = libkineto::ActivityType::GPU_MEMCPY;
      name = std::string("Memcpy ") + memcpyKindName(r.memcpy_kind);
    } else if (r.kind == npuActivityMemset) {
      type = libkineto::ActivityType::GPU_MEMSET;
      name = "Memset";
    }
    auto launch = std::make_unique<libkineto::GenericTraceActivity>(
        kSpan, libkineto::ActivityType::PRIVATEUSE1_RUNTIME, "npuLaunchTask");
    launch->startTime = static_cast<int64_t>(r.launch_ns) + epoch_offset_ns_;
    launch->endTime = launch->startTime;
    launch->id = corr;
    launch->device = static_cast<int32_t>(getpid());
    launch->resource = r.launch_thread;
    launch->threadId = r.launch_thread;
    launch->linked = op;
    launch->flow.id = static_cast<uint32_t>(r.correlation_id);
    launch->flow.type = libkineto::kLinkAsyncCpuGpu;
    launch->flow.start = true;

    auto device = std::make_unique<libkineto::GenericTraceActivity>(kSpan, type, name);
    device->startTime = static_cast<int64_t>(r.start_ns) + epoch_offset_ns_;
    device->endTime = static_cast<int64_t>(r.end_ns) + epoch_offset_ns_;
    device->id = corr;
    device->device = r.device;
    device->resource = r.stream_id;
    device->threadId = r.stream_id;
    device->linked = op;
    device->flow.id = static_cast<uint32_t>(r.correlation_id);
    device->flow.type = libkineto::kLinkAsyncCpuGpu;
    device->flow.start = false;
    // addMetadata<T> formats with fmt, whose library torch does not export: strings only.
    device->addMetadataQuoted("device", std::to_string(r.device));
    device->addMetadataQuoted("stream", std::to_string(r.stream_id));
    device->addMetadataQuoted("External id", std::to_string(r.correlation_id));
    if (r.kind != npuActivityKernel) device->addMetadataQuoted("bytes", std::to_string(r.bytes));
    streams_seen_.emplace_back(r.device, r.stream_id);

    if (corr != 0) {
      logged.push_back(launch.get());
      kinetoStore().push_back(std::move(launch));
    }
    logged.push_back(device.get());
    kinetoStore().push_back(std::move(device));
  }

  bool started_ = false;
  bool owns_records_ = false;  // npuProfilerStart succeeded for this session
  int64_t epoch_offset_ns_ = 0;
  std::vector<std::string> errors_;
  std::vector<std::pair<int, int>> streams_seen_;
};

class KinetoPlugin final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }

  const std::set<libkineto::ActivityType>& availableActivities() const override {
    return activities_;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& /*config*/) override {
    for (libkineto::ActivityType type : activity_types) {
      if (activities_.count(type) > 0) return std::make_unique<KinetoSession>();
    }
    return nullptr;  // CPU-only profile: nothing for us to record
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t /*ts_ms*/, int64_t /*duration_ms*/,
      const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  std::string name_ = "SimNPU";
  std::set<libkineto::ActivityType> activities_ = {
      libkineto::ActivityType::CONCURRENT_KERNEL, libkineto::ActivityType::GPU_MEMCPY,
      libkineto::ActivityType::GPU_MEMSET, libkineto::ActivityType::PRIVATEUSE1_RUNTIME};
};

REGISTER_PRIVATEUSE1_PROFILER(KinetoPlugin);

}  // namespace

bool hasKinetoPlugin() { return true; }
#else
bool hasKinetoPlugin() { return false; }
#endif  // NPU_KINETO_PLUGIN

}  // namespace torch_npu::profiler
