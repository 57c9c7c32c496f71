#include "NPUGraph.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>

#include "NPUException.h"
#include "NPUFunctions.h"
#include "npu/caching_allocator.h"

namespace torch_npu {
namespace {

npu::alloc::CachingAllocator& allocator() { return npu::alloc::CachingAllocator::instance(); }

thread_local NPUGraph* t_capturing = nullptr;  // the graph this thread is capturing

npuStreamCaptureMode parseMode(const std::string& mode) {
  if (mode == "global") return npuStreamCaptureModeGlobal;
  if (mode == "thread_local") return npuStreamCaptureModeThreadLocal;
  if (mode == "relaxed") return npuStreamCaptureModeRelaxed;
  TORCH_CHECK(false, "Unknown capture_error_mode '", mode,
              "'; expected 'global', 'thread_local' or 'relaxed'");
}

}  // namespace

MempoolId graphPoolHandle() {
  static std::atomic<uint64_t> next{1};
  return {0, next.fetch_add(1, std::memory_order_relaxed)};
}

NPUGraph::~NPUGraph() {
  try {
    reset();
  } catch (...) {
    // A destructor must not throw; reset only fails on a runtime that is already gone.
  }
}

void NPUGraph::captureBegin(MempoolId pool, const std::string& mode) {
  TORCH_CHECK(!capturing_, "NPUGraph::capture_begin: this graph is already capturing");
  TORCH_CHECK(graph_ == nullptr,
              "NPUGraph::capture_begin: this graph already holds a capture; call reset() "
              "before capturing again");
  const npuStreamCaptureMode capture_mode = parseMode(mode);
  const NPUStream stream = getCurrentNPUStream();
  TORCH_CHECK(stream != getDefaultNPUStream(stream.device_index()),
              "NPU graphs must be captured on a non-default stream. (However, after capture, "
              "it's ok to replay on the default stream.) Use torch.npu.graph(...), which "
              "captures on a side stream, or enter torch.npu.stream(torch.npu.Stream()) first.");
  const MempoolId id = pool.second != 0 || pool.first != 0 ? pool : graphPoolHandle();
  allocator().beginAllocateToPool(stream.device_index(), id.second, stream.handle());
  const npuError_t error = npuStreamBeginCapture(stream.handle(), capture_mode);
  if (error != npuSuccess) {
    allocator().endAllocateToPool(stream.device_index(), id.second);
    allocator().releasePool(stream.device_index(), id.second);
    NPU_CHECK(error);
  }
  capturing_ = true;
  t_capturing = this;
  device_ = stream.device_index();
  capture_stream_ = stream.id();
  pool_ = id;
}

void NPUGraph::captureEnd() {
  TORCH_CHECK(capturing_, "NPUGraph::capture_end: capture_begin was not called");
  const NPUStream stream = getCurrentNPUStream(device_);
  TORCH_CHECK(stream.id() == capture_stream_,
              "Capture must end on the same stream it began on.");
  capturing_ = false;
  if (t_capturing == this) t_capturing = nullptr;
  npuGraph_t graph = nullptr;
  const npuError_t error = npuStreamEndCapture(stream.handle(), &graph);
  allocator().endAllocateToPool(device_, pool_.second);
  if (error != npuSuccess) {
    allocator().releasePool(device_, pool_.second);
    NPU_CHECK(error);
  }
  graph_ = graph;
}

void NPUGraph::replay() {
  TORCH_CHECK(graph_ != nullptr,
              "Called NPUGraph::replay without a preceding successful capture.");
  const NPUStream stream = getCurrentNPUStream(device_);
  for (const RngTable& table : rng_) {
    // The seeds eager execution would draw now, written on the replay stream so that a replay
    // still queued keeps reading its own (the table is the graph's; the tasks read it when run).
    std::vector<uint64_t> seeds(table.seeds->size());
    table.generator.get<NPUGeneratorImpl>()->nextLaunchSeeds(seeds);
    launchTask(stream, "graph_rng_seeds",
               [seeds = std::move(seeds), into = table.seeds] { *into = seeds; });
  }
  NPU_CHECK(npuGraphLaunch(graph_, stream.handle()));
}

void NPUGraph::debugDump(const std::string& path) const {
  TORCH_CHECK(graph_ != nullptr,
              "Called NPUGraph::debug_dump without a preceding successful capture.");
  NPU_CHECK(npuGraphDebugDotPrint(graph_, path.c_str()));
}

NPUGraph* NPUGraph::capturingOnThisThread(c10::DeviceIndex device) {
  return t_capturing != nullptr && t_capturing->device_ == device ? t_capturing : nullptr;
}

LaunchSeed NPUGraph::captureSeed(const at::Generator& generator) {
  auto it = std::find_if(rng_.begin(), rng_.end(), [&](const RngTable& table) {
    return table.generator.unsafeGetGeneratorImpl() == generator.unsafeGetGeneratorImpl();
  });
  if (it == rng_.end()) {
    rng_.push_back({generator, std::make_shared<std::vector<uint64_t>>()});
    it = rng_.end() - 1;
  }
  it->seeds->push_back(0);
  return LaunchSeed(it->seeds, it->seeds->size() - 1);
}

void NPUGraph::reset() {
  if (capturing_) {
    // Abandon a capture that never ended (an exception inside torch.npu.graph).
    capturing_ = false;
    if (t_capturing == this) t_capturing = nullptr;
    rng_.clear();
    npuGraph_t abandoned = nullptr;
    const NPUStream stream(c10::Stream(c10::Stream::UNSAFE,
                                       c10::Device(c10::DeviceType::PrivateUse1, device_),
                                       capture_stream_));
    if (npuStreamEndCapture(stream.handle(), &abandoned) == npuSuccess) {
      npuGraphDestroy(abandoned);
    }
    allocator().endAllocateToPool(device_, pool_.second);
    allocator().releasePool(device_, pool_.second);
    return;
  }
  if (graph_ == nullptr) return;
  NPU_CHECK(npuGraphDestroy(graph_));
  graph_ = nullptr;
  rng_.clear();
  allocator().releasePool(device_, pool_.second);
}

MempoolId NPUGraph::pool() const {
  TORCH_CHECK(capturing_ || graph_ != nullptr,
              "Called NPUGraph::pool without a preceding successful capture.");
  return pool_;
}

size_t NPUGraph::numTasks() const {
  if (graph_ == nullptr) return 0;
  size_t count = 0;
  NPU_CHECK(npuGraphGetTaskCount(graph_, &count));
  return count;
}

}  // namespace torch_npu
