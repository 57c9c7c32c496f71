// The offline-model engine: loads an .om (written by atc; format in docs/inference.md) and
// runs its fixed plan on a stream with the kernel library. No PyTorch; AscendCL's model API
// (include/acl/acl_mdl.h) is a thin layer over this.
//
// How a model runs:
//  - load: the file is checked (magic, version, size, checksum, every index in range), the
//    weights are copied into one device buffer and one arena of the planned size is allocated
//    for every intermediate tensor (atc's memory plan gives each its offset; tensors whose
//    lifetimes do not overlap share bytes). Each node becomes a prepared kernel call whose
//    descriptors are built once.
//  - execute: one task on the stream runs every node in order; graph inputs and outputs are
//    the caller's buffers, patched into the descriptors. Nothing is allocated per run (the
//    kernels' own scratch aside), so a model's runs on one stream never race; runs of one
//    model on two streams at once would share the arena and must be ordered by the caller.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "npu/kernels/tensor_desc.h"
#include "npu/runtime.h"

namespace npu::engine {

// A file that is not a valid .om (foreign, truncated, corrupt, another version), or a model
// whose plan the engine cannot run; what() names the problem and the fix.
struct ModelError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

constexpr char kOmMagic[8] = {'S', 'I', 'M', 'N', 'P', 'U', 'O', 'M'};
constexpr uint32_t kOmVersion = 2;  // 1: static shapes; 2: adds the gear trailer
constexpr size_t kOmHeaderSize = 64;

enum class Storage : uint8_t { Arena = 0, Weight = 1, Input = 2, Output = 3 };

struct TensorInfo {
  std::string name;
  kernels::DType dtype = kernels::DType::Float32;
  std::vector<int64_t> dims;
  Storage storage = Storage::Arena;
  uint64_t offset = 0;  // in the arena or the weights; the index for Input / Output
  uint64_t nbytes = 0;
};

struct Attr {
  enum Kind : uint8_t { Int = 0, Float = 1, Ints = 2, Floats = 3, String = 4 } kind = Int;
  int64_t i = 0;
  double f = 0;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::string s;
};

struct NodeInfo {
  std::string op, name;
  std::vector<uint32_t> inputs, outputs;  // tensor indices; kNoTensor for a missing input
  std::vector<std::pair<std::string, Attr>> attrs;
  const Attr* attr(const std::string& key) const;
};
constexpr uint32_t kNoTensor = 0xFFFFFFFFu;

// ATC's dynamic modes: one planned graph per gear (atc --dynamic_batch_size / --dynamic_dims).
enum class DynamicMode : uint8_t { Static = 0, Batch = 1, Dims = 2 };

// The parsed file. Its own tensors / nodes are the first gear's (the largest: every input and
// output of another gear is at most as large); `gears` holds the others, each a complete
// planned graph over the same weights (their own `weights` empty).
struct ModelDef {
  uint32_t version = 0;
  std::string soc_version, source;
  std::vector<TensorInfo> tensors;
  std::vector<uint32_t> inputs, outputs;
  uint64_t arena_size = 0;
  std::vector<NodeInfo> nodes;
  std::vector<uint8_t> weights;
  DynamicMode dynamic_mode = DynamicMode::Static;
  // Per gear, in atc's order (the first is this graph): Batch: {batch size}; Dims: the values
  // of the -1 dimensions of --input_shape, in input order.
  std::vector<std::vector<int64_t>> gear_values;
  std::vector<ModelDef> gears;  // gears 1.. (gear 0 is this graph)
};

// Throws ModelError. `what` names the file in messages.
ModelDef parse_om(const void* data, size_t size, const std::string& what);
ModelDef read_om_file(const std::string& path);

class Model {
 public:
  // Prepares every node and allocates the weights and the arena on the current device.
  // Throws ModelError for a node the engine cannot run (named) and for memory failures.
  explicit Model(ModelDef def);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelDef& def() const { return def_; }
  // Gear 0's (the largest): buffers of these sizes serve every gear.
  const TensorInfo& input(size_t i) const { return def_.tensors[def_.inputs[i]]; }
  const TensorInfo& output(size_t i) const { return def_.tensors[def_.outputs[i]]; }
  size_t num_gears() const { return gears_.size(); }
  const ModelDef& gear(size_t g) const { return *gears_[g].def; }
  // The gear a dynamic model runs for `values`: Batch: {batch size}; Dims: every input's
  // dims, concatenated in input order. Throws ModelError naming the model's gears when none
  // matches.
  size_t find_gear(const std::vector<int64_t>& values) const;
  // The gear of the last execute / execute_async (0 before any).
  size_t current_gear() const { return current_gear_; }
  size_t num_inputs() const { return def_.inputs.size(); }
  size_t num_outputs() const { return def_.outputs.size(); }
  int device() const { return device_; }

  // Queues one run on `stream` (NULL: the current device's default stream). inputs[i] /
  // outputs[i] are device buffers of at least input(i).nbytes / output(i).nbytes bytes and
  // must stay valid until the run has finished. Returns the launch's error.
  // `gear`: which planned graph runs (find_gear); its inputs and outputs must fit the buffers.
  npuError_t execute_async(npuStream_t stream, const std::vector<void*>& inputs,
                           const std::vector<void*>& outputs, size_t gear = 0);
  // execute_async, then wait for the stream (npuLaunchTaskSync: on an idle stream the run
  // happens on the calling thread). Returns the stream's error, as npuStreamSynchronize does.
  npuError_t execute(npuStream_t stream, const std::vector<void*>& inputs,
                     const std::vector<void*>& outputs, size_t gear = 0);

  struct Kernel;  // a prepared node (engine/ops.cpp)

 private:
  npuError_t launch(npuStream_t stream, const std::vector<void*>& inputs,
                    const std::vector<void*>& outputs, size_t gear, bool wait);
  void run(size_t gear, void* const* inputs, void* const* outputs);

  // One planned graph: its prepared nodes and one data pointer per tensor (inputs / outputs
  // set by each run). Every gear shares the weights and the one arena.
  struct Gear {
    const ModelDef* def = nullptr;
    std::vector<std::unique_ptr<Kernel>> kernels;
    std::vector<void*> ptrs;
    std::vector<double> node_seconds;  // SIMNPU_ENGINE_PROFILE: a sum per node, seconds
    uint64_t runs = 0;                 // a count
  };
  void print_profile() const;
  bool profile_ = false;

  ModelDef def_;
  int device_ = 0;
  void* weights_ = nullptr;
  void* arena_ = nullptr;  // sized for the largest gear's plan, allocated once
  std::vector<Gear> gears_;
  size_t current_gear_ = 0;
};

}  // namespace npu::engine
