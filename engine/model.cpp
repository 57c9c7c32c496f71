// Model: the loaded plan (see npu/engine.h for how a model runs).
#include <cstring>

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
  std::vector<void*> inputs, outputs;
};

}  // namespace

Model::Model(ModelDef def) : def_(std::move(def)) {
  npuGetDevice(&device_);
  // Every node is prepared before any memory is taken: an unsupported node fails the load
  // without side effects.
  for (const auto& node : def_.nodes) kernels_.push_back(make_kernel(def_, node));
  try {
    weights_ = device_alloc(def_.weights.size(), "weights", def_.source);
    arena_ = device_alloc(def_.arena_size, "activation arena", def_.source);
  } catch (...) {
    npuFree(weights_);
    throw;
  }
  if (!def_.weights.empty()) {
    npuMemcpy(weights_, def_.weights.data(), def_.weights.size(), npuMemcpyHostToDevice);
    def_.weights.clear();  // the device copy is the one that is used
    def_.weights.shrink_to_fit();
  }
  ptrs_.resize(def_.tensors.size());
  for (size_t i = 0; i < def_.tensors.size(); ++i) {
    const auto& t = def_.tensors[i];
    if (t.storage == Storage::Arena) ptrs_[i] = static_cast<char*>(arena_) + t.offset;
    if (t.storage == Storage::Weight) ptrs_[i] = static_cast<char*>(weights_) + t.offset;
  }
}

Model::~Model() {
  // Queued runs read the arena and weights: let the model's device finish first (the caller
  // may have another device current).
  int current = 0;
  npuGetDevice(&current);
  npuSetDevice(device_);
  npuDeviceSynchronize();
  npuSetDevice(current);
  npuFree(arena_);
  npuFree(weights_);
}

void Model::run(void* const* inputs, void* const* outputs) {
  for (size_t i = 0; i < def_.inputs.size(); ++i) ptrs_[def_.inputs[i]] = inputs[i];
  for (size_t i = 0; i < def_.outputs.size(); ++i) ptrs_[def_.outputs[i]] = outputs[i];
  for (auto& k : kernels_) k->run(ptrs_.data());
}

npuError_t Model::execute_async(npuStream_t stream, const std::vector<void*>& inputs,
                                const std::vector<void*>& outputs) {
  return launch(stream, inputs, outputs, false);
}

npuError_t Model::execute(npuStream_t stream, const std::vector<void*>& inputs,
                          const std::vector<void*>& outputs) {
  return launch(stream, inputs, outputs, true);
}

npuError_t Model::launch(npuStream_t stream, const std::vector<void*>& inputs,
                         const std::vector<void*>& outputs, bool wait) {
  auto* l = new Launch{this, inputs, outputs};
  const npuTaskFn run = [](void* arg) {
    auto* self = static_cast<Launch*>(arg);
    self->model->run(self->inputs.data(), self->outputs.data());
  };
  const npuTaskRelease release = [](void* arg) { delete static_cast<Launch*>(arg); };
  const npuError_t err = wait ? npuLaunchTaskSync(stream, "aclmdlExecute", run, release, l)
                              : npuLaunchTaskWithRelease(stream, "aclmdlExecute", run, release, l);
  if (err != npuSuccess && err != npuErrorLaunchFailure) delete l;
  return err;
}

}  // namespace npu::engine
