// torch.npu.NPUGraph: torch.cuda.CUDAGraph's twin over the runtime's stream capture.
//
// How it works:
//  - capture_begin makes the current stream (never the default one) record instead of run
//    (npuStreamBeginCapture) and routes what it allocates into a graph pool of the caching
//    allocator, so the addresses the recorded kernels use stay reserved for the graph.
//  - Every op launches its task through npuLaunchTaskWithRelease, so the runtime owns the task
//    bodies and a replay runs them again: same kernels, same pointers, new data in the static
//    input tensors. A synchronizing call (.item(), .cpu(), synchronize) during the capture is
//    refused by the runtime and invalidates it; capture_end then reports the call.
//  - replay launches the graph on the current stream as one queue entry.
//  - Random ops captured by the graph read their seeds from a table per generator, which replay
//    refills with fresh draws first (NPUGenerator.h).
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <memory>
#include <utility>
#include <vector>

#include "NPUGenerator.h"
#include "NPUStream.h"

namespace torch_npu {

// A graph pool id, as torch's MempoolId_t: (0, n) for pools made by graph_pool_handle() or by
// a graph that was given none; (0, 0) means "no pool given".
using MempoolId = std::pair<uint64_t, uint64_t>;
MempoolId graphPoolHandle();

class NPUGraph {
 public:
  NPUGraph() = default;
  ~NPUGraph();
  NPUGraph(const NPUGraph&) = delete;
  NPUGraph& operator=(const NPUGraph&) = delete;

  // mode: "global", "thread_local" or "relaxed" (torch.cuda.graph's capture_error_mode).
  void captureBegin(MempoolId pool = {0, 0}, const std::string& mode = "global");
  void captureEnd();
  void replay();
  void reset();
  MempoolId pool() const;
  size_t numTasks() const;  // tasks recorded (kernels, copies, event records)
  // The graph as Graphviz DOT (npuGraphDebugDotPrint); torch_npu/npu/graphs.py keeps
  // torch.cuda.CUDAGraph's enable_debug_mode rule in front of it.
  void debugDump(const std::string& path) const;

  // The graph this thread is capturing on `device` (nullptr if none).
  static NPUGraph* capturingOnThisThread(c10::DeviceIndex device);
  // A seed slot for a random op being captured with `generator`.
  LaunchSeed captureSeed(const at::Generator& generator);

 private:
  struct RngTable {
    at::Generator generator;
    std::shared_ptr<std::vector<uint64_t>> seeds;  // one per captured launch, in launch order
  };
  std::vector<RngTable> rng_;

  npuGraph_t graph_ = nullptr;
  bool capturing_ = false;
  c10::DeviceIndex device_ = -1;
  c10::StreamId capture_stream_ = 0;
  MempoolId pool_{0, 0};
};

}  // namespace torch_npu
