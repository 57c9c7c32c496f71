// The outputs of a replayed NPU graph, handed to the caller without a copy.
//
// A graph writes its outputs into its own memory at every replay. CUDA graph trees hand those
// tensors out as they are and track their liveness: a tensor of an earlier replay that is still
// referenced when the graph replays again is overwritten (reading it then raises). Here nothing
// is ever overwritten under a live reference, and nothing is copied while none is:
//  - handOut() returns aliases of the graph's outputs: tensors over new storages that point
//    into the graph's memory (outputs that shared a storage in the graph share one here too);
//    each alias storage holds a reference to the graph's storage, so the memory outlives the
//    graph if an alias does.
//  - preserveLive(), called before each replay, finds the alias storages of the last handOut()
//    that are still referenced (a loss kept across steps, a gradient AccumulateGrad kept) and
//    gives each its own block with a copy of its bytes, queued on the current stream before the
//    replay: every view of it, made by anyone, keeps its values. Storages nobody references any
//    more (the usual case: saved activations consumed by the backward, gradients the optimizer
//    has used) cost nothing.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <cstdint>
#include <vector>

namespace torch_npu {

class GraphOutputs {
 public:
  // outputs: the graph's output tensors (from the capture), all on one npu device.
  explicit GraphOutputs(std::vector<at::Tensor> outputs);

  // Aliases of the outputs, in order, over fresh alias storages (the graph's data as of the
  // last replay). Forgets the aliases of the previous call: preserveLive() first.
  std::vector<at::Tensor> handOut();

  // Copies each still-referenced alias storage of the last handOut() into a block of its own
  // (queued on the current stream); returns how many were copied.
  int64_t preserveLive();

 private:
  std::vector<at::Tensor> outputs_;
  std::vector<int64_t> storage_of_;  // output i -> index into its distinct storage
  std::vector<c10::Storage> storages_;  // the graph's distinct output storages
  std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> handed_;  // last handOut()'s aliases
};

}  // namespace torch_npu
