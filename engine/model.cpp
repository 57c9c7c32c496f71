// Model: the loaded plan (see npu/engine.h for how a model runs).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "engine/engine_internal.h"

namespace npu::engine {

namespace {

void* device_alloc(uint64_t bytes, const char* what, const std::string& model) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  if (npuMalloc(&p, bytes) != npuSuccess) {
    throw ModelError("loading " + model + ": cannot allocate " + std::to_string(bytes) +
                     " bytes of device memory for the " + what + " (" +
                     npuGetLastErrorMessage() + ")");
  }
  return p;
}

// The arguments of one queued run; the runtime owns and releases them.
struct Launch {
  Model* model;
  size_t gear;
  std::vector<void*> inputs, outputs;
};

std::string join(const std::vector<int64_t>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + std::to_string(v[i]);
  return s;
}

}  // namespace

Model::Model(ModelDef def) : def_(std::move(def)) {
  // SIMNPU_ENGINE_PROFILE=1: time every node, print the time per op at unload (stderr).
  const char* profile = std::getenv("SIMNPU_ENGINE_PROFILE");
  profile_ = profile && *profile && std::string(profile) != "0";
  npuGetDevice(&device_);
  // Every node is prepared before any memory is taken: an unsupported node fails the load
  // without side effects.
  uint64_t arena_size = def_.arena_size;
  gears_.resize(1 + def_.gears.size());
  gears_[0].def = &def_;
  for (size_t k = 0; k < def_.gears.size(); ++k) {
    gears_[k + 1].def = &def_.gears[k];
    arena_size = std::max(arena_size, def_.gears[k].arena_size);
  }
  for (auto& g : gears_) {
    for (const auto& node : g.def->nodes) g.kernels.push_back(make_kernel(*g.def, node));
  }
  try {
    weights_ = device_alloc(def_.weights.size(), "weights", def_.source);
    arena_ = device_alloc(arena_size, "activation arena", def_.source);
  } catch (...) {
    npuFree(weights_);
    throw;
  }
  if (!def_.weights.empty()) {
    npuMemcpy(weights_, def_.weights.data(), def_.weights.size(), npuMemcpyHostToDevice);
    def_.weights.clear();  // the device copy is the one that is used
    def_.weights.shrink_to_fit();
  }
  for (auto& g : gears_) {
    g.ptrs.resize(g.def->tensors.size());
    for (size_t i = 0; i < g.def->tensors.size(); ++i) {
      const auto& t = g.def->tensors[i];
      if (t.storage == Storage::Arena) g.ptrs[i] = static_cast<char*>(arena_) + t.offset;
      if (t.storage == Storage::Weight) g.ptrs[i] = static_cast<char*>(weights_) + t.offset;
    }
  }
  PreparedWeights prepared;  // what the kernels keep of it outlives this
  for (auto& g : gears_) {
    for (auto& k : g.kernels) k->prepare_weights(g.ptrs.data(), prepared);
  }
}

std::shared_ptr<const kernels::PackedB> PreparedWeights::packed_b(const kernels::TensorDesc& b) {
  const Key key{b.data, b.sizes[0], b.sizes[1], b.strides[0], b.strides[1]};
  auto& slot = packed_b_[key];
  if (!slot) slot = std::make_shared<const kernels::PackedB>(b);
  return slot;
}

std::shared_ptr<const kernels::PackedConvWeight> PreparedWeights::packed_conv(
    const kernels::TensorDesc& w, int64_t groups) {
  auto& slot = packed_conv_[{w.data, groups}];
  if (!slot) slot = std::make_shared<const kernels::PackedConvWeight>(w, groups);
  return slot;
}

size_t Model::find_gear(const std::vector<int64_t>& values) const {
  for (size_t k = 0; k < gears_.size(); ++k) {
    const ModelDef& g = *gears_[k].def;
    std::vector<int64_t> shape;
    for (uint32_t i : g.inputs) {
      shape.insert(shape.end(), g.tensors[i].dims.begin(), g.tensors[i].dims.end());
    }
    if (def_.dynamic_mode == DynamicMode::Batch ? values == def_.gear_values[k]
                                                : values == shape) {
      return k;
    }
  }
  std::string gears;
  const char* sep = def_.dynamic_mode == DynamicMode::Batch ? "," : ";";  // as atc takes them
  for (const auto& v : def_.gear_values) gears += (gears.empty() ? "" : sep) + join(v, ",");
  if (def_.dynamic_mode == DynamicMode::Batch) {
    throw ModelError("batch size " + join(values, ",") + " is not one of the model's gears (" +
                     gears + ", atc --dynamic_batch_size): pad the batch to a gear or convert "
                     "with that batch size among the gears");
  }
  if (def_.dynamic_mode == DynamicMode::Dims) {
    throw ModelError("input dims " + join(values, ",") + " match none of the model's gears "
                     "(the -1 dimensions of --input_shape take " + gears +
                     ", atc --dynamic_dims): pad the inputs to a gear");
  }
  throw ModelError("the model has static shapes; it takes its inputs' own dims only");
}

Model::~Model() {
  // Queued runs read the arena and weights: let the model's device finish first (the caller
  // may have another device current).
  int current = 0;
  npuGetDevice(&current);
  npuSetDevice(device_);
  npuDeviceSynchronize();
  npuSetDevice(current);
  if (profile_) print_profile();  // after the queued runs, which add to the sums
  npuFree(arena_);
  npuFree(weights_);
}

void Model::run(size_t gear, void* const* inputs, void* const* outputs) {
  Gear& g = gears_[gear];
  for (size_t i = 0; i < g.def->inputs.size(); ++i) g.ptrs[g.def->inputs[i]] = inputs[i];
  for (size_t i = 0; i < g.def->outputs.size(); ++i) g.ptrs[g.def->outputs[i]] = outputs[i];
  if (!profile_) {
    for (auto& k : g.kernels) k->run(g.ptrs.data());
    return;
  }
  if (g.node_seconds.empty()) g.node_seconds.assign(g.kernels.size(), 0.0);
  for (size_t k = 0; k < g.kernels.size(); ++k) {
    auto t0 = std::chrono::steady_clock::now();
    g.kernels[k]->run(g.ptrs.data());
    g.node_seconds[k] +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  ++g.runs;
}

void Model::print_profile() const {
  for (size_t k = 0; k < gears_.size(); ++k) {
    const Gear& g = gears_[k];
    if (!g.runs) continue;
    std::map<std::string, std::pair<double, int>> by_op;
    double total = 0;
    for (size_t n = 0; n < g.node_seconds.size(); ++n) {
      auto& e = by_op[g.def->nodes[n].op];
      e.first += g.node_seconds[n] / g.runs;
      e.second += 1;
      total += g.node_seconds[n] / g.runs;
    }
    std::vector<std::pair<double, std::string>> rows;
    for (const auto& [op, e] : by_op) rows.emplace_back(e.first, op);
    std::sort(rows.rbegin(), rows.rend());
    std::fprintf(stderr, "[engine profile] %s gear %zu: %llu runs, %.3f ms a run\n",
                 def_.source.c_str(), k, static_cast<unsigned long long>(g.runs), total * 1e3);
    for (const auto& [sec, op] : rows) {
      std::fprintf(stderr, "  %-22s %4d nodes %9.3f ms %5.1f%%\n", op.c_str(),
                   by_op[op].second, sec * 1e3, 100 * sec / total);
    }
    std::vector<std::pair<double, size_t>> nodes;
    for (size_t n = 0; n < g.node_seconds.size(); ++n) nodes.emplace_back(g.node_seconds[n], n);
    std::sort(nodes.rbegin(), nodes.rend());
    std::fprintf(stderr, "  slowest nodes:\n");
    for (size_t i = 0; i < nodes.size() && i < 8; ++i) {
      const NodeInfo& node = g.def->nodes[nodes[i].second];
      std::string shapes;
      for (uint32_t t : node.inputs) {
        if (t == kNoTensor) continue;
        shapes += " [";
        for (int64_t d : g.def->tensors[t].dims) shapes += std::to_string(d) + ",";
        shapes.back() = ']';
      }
      std::fprintf(stderr, "  %9.3f ms %s (%s)%s\n", nodes[i].first / g.runs * 1e3,
                   node.name.c_str(), node.op.c_str(), shapes.c_str());
    }
  }
}

npuError_t Model::execute_async(npuStream_t stream, const std::vector<void*>& inputs,
                                const std::vector<void*>& outputs, size_t gear) {
  return launch(stream, inputs, outputs, gear, false);
}

npuError_t Model::execute(npuStream_t stream, const std::vector<void*>& inputs,
                          const std::vector<void*>& outputs, size_t gear) {
  return launch(stream, inputs, outputs, gear, true);
}

npuError_t Model::launch(npuStream_t stream, const std::vector<void*>& inputs,
                         const std::vector<void*>& outputs, size_t gear, bool wait) {
  if (gear >= gears_.size()) {
    throw ModelError("gear " + std::to_string(gear) + " is out of range (the model has " +
                     std::to_string(gears_.size()) + ")");
  }
  current_gear_ = gear;
  auto* l = new Launch{this, gear, inputs, outputs};
  const npuTaskFn run = [](void* arg) {
    auto* self = static_cast<Launch*>(arg);
    self->model->run(self->gear, self->inputs.data(), self->outputs.data());
  };
  const npuTaskRelease release = [](void* arg) { delete static_cast<Launch*>(arg); };
  const npuError_t err = wait ? npuLaunchTaskSync(stream, "aclmdlExecute", run, release, l)
                              : npuLaunchTaskWithRelease(stream, "aclmdlExecute", run, release, l);
  if (err != npuSuccess && err != npuErrorLaunchFailure) delete l;
  return err;
}

}  // namespace npu::engine
